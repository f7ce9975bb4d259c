"""``engine simulate``: real workers under injected faults, the oracles, a replay page.

What it does is :func:`engine.simulate.run_simulation`; this is its command line.
Exit 0 when every oracle holds, 1 when one fails or the run timed out.
"""

from __future__ import annotations

from typing import Any

import click
import psycopg

from engine.config import Settings, mask_url
from engine.errors import JobFailed, StoreError
from engine.simulate import SimOptions, run_simulation
from engine.simulate.flow import STEPS
from engine.simulate.oracles import oracle_lines

__all__ = ["simulate"]


@click.command("simulate")
@click.option(
    "--workers",
    type=click.IntRange(1, 16),
    default=2,
    show_default=True,
    envvar="ENGINE_SIM_WORKERS",
    show_envvar=True,
    help="worker processes at once",
)
@click.option(
    "--jobs",
    type=click.IntRange(1, 500),
    default=8,
    show_default=True,
    envvar="ENGINE_SIM_JOBS",
    show_envvar=True,
    help="jobs to submit (3 steps each)",
)
@click.option(
    "--kill-rate",
    type=click.FloatRange(0.0, 1.0),
    default=0.3,
    show_default=True,
    envvar="ENGINE_SIM_KILL_RATE",
    show_envvar=True,
    help="share of step runs whose first attempt's worker is SIGKILLed mid-step",
)
@click.option(
    "--dup-rate",
    type=click.FloatRange(0.0, 1.0),
    default=0.5,
    show_default=True,
    envvar="ENGINE_SIM_DUP_RATE",
    show_envvar=True,
    help="share of step runs announced again, and of jobs submitted again",
)
@click.option(
    "--seed",
    type=int,
    default=1,
    show_default=True,
    envvar="ENGINE_SIM_SEED",
    show_envvar=True,
    help="seed of the fault plan and step durations",
)
@click.option(
    "--concurrency",
    type=click.IntRange(1, 8),
    default=1,
    show_default=True,
    envvar="ENGINE_SIM_CONCURRENCY",
    show_envvar=True,
    help="slots per worker",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(5, 3600),
    default=120.0,
    show_default=True,
    envvar="ENGINE_SIM_TIMEOUT_S",
    show_envvar=True,
    help="seconds before the run is stopped (jobs not done then fail an oracle)",
)
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
