"""``engine simulate``: real workers under injected faults, the oracles, a replay page.

What it does is :func:`engine.simulate.run_simulation`; this is its command line.
Exit 0 when every oracle holds, 1 when one fails or the run timed out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click
import psycopg

from engine.config import Settings
from engine.errors import JobFailed, StoreError
from engine.infra.secrets import mask_url
from engine.simulate import SimOptions, run_simulation
from engine.simulate.flow import STEPS
from engine.simulate.oracles import oracle_lines

__all__ = ["simulate"]

_Command = TypeVar("_Command", bound=Callable[..., Any])


# name, type, default, help; each also read from ENGINE_SIM_<NAME> (--timeout: TIMEOUT_S)
_OPTIONS: tuple[tuple[str, Any, Any, str], ...] = (
    ("--workers", click.IntRange(1, 16), 2, "worker processes at once"),
    ("--jobs", click.IntRange(1, 500), 8, "jobs to submit (3 steps each)"),
    (
        "--kill-rate",
        click.FloatRange(0.0, 1.0),
        0.3,
        "share of step runs whose first attempt's worker is SIGKILLed mid-step",
    ),
    (
        "--dup-rate",
        click.FloatRange(0.0, 1.0),
        0.5,
        "share of step runs announced again, and of jobs submitted again",
    ),
    ("--seed", int, 1, "seed of the fault plan and step durations"),
    ("--concurrency", click.IntRange(1, 8), 1, "slots per worker"),
    (
        "--timeout",
        click.FloatRange(5, 3600),
        120.0,
        "seconds before the run is stopped (jobs not done then fail an oracle)",
    ),
)


def _sim_options(command: _Command) -> _Command:
    """The run's shape as options, in ``--help`` in the order of :data:`_OPTIONS`."""
    for name, kind, default, help in reversed(_OPTIONS):
        attribute = name.removeprefix("--").replace("-", "_")
        attribute += "_s" if name == "--timeout" else ""
        command = click.option(
            name,
            attribute,
            type=kind,
            default=default,
            show_default=True,
            envvar=f"ENGINE_SIM_{attribute.upper()}",
            show_envvar=True,
            help=help,
        )(command)
    return command


@click.command("simulate")
@_sim_options
@click.option("--keep-db", is_flag=True, help="keep the scratch database for inspection")
def simulate(**kwargs: Any) -> None:
    """Run real workers with injected faults; check the oracles; render a replay page."""
    options = SimOptions(**kwargs)
    settings = Settings()
    click.echo(
        f"simulate: seed {options.seed}, {options.workers} worker(s), {options.jobs} job(s) "
        f"({options.jobs * len(STEPS)} step runs), kill rate {options.kill_rate:g}, "
        f"dup rate {options.dup_rate:g}"
    )
    try:
        record, path = run_simulation(options, settings)
    except psycopg.OperationalError as exc:
        # the scratch database is made over a raw psycopg connection, whose
        # errors are not wrapped by the store and may name the server's URL
        raise StoreError(mask_url(str(exc)).strip()) from exc
    kills = sum(1 for f in record.faults if f.kind == "kill")
    dups = [f for f in record.faults if f.kind == "duplicate"]
    resubmits = sum(1 for f in record.faults if f.kind == "resubmit")
    click.echo(
        f"faults: {kills} kill(s), {len(dups)} step run(s) announced again, "
        f"{resubmits} duplicate submit(s)"
    )
    for line in oracle_lines(record.oracles):
        click.echo(line)
    click.echo(f"replay: {path}")
    if record.timed_out or not all(o.passed for o in record.oracles):
        raise JobFailed("the simulation broke an oracle or timed out")
