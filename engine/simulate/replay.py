"""The replay page of ``engine simulate``: what the workers did, drawn from the events.

The page is a *view* of the scratch database's rows (jobs, step runs, events)
plus the faults the simulator injected, rendered once into one
self-contained HTML file.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Engine
from sqlmodel import Session, select

from engine.reports.render import environment
from engine.reports.storage import write_atomically
from engine.simulate.draw import COLOURS, anim, grid_svg, lanes_svg
from engine.simulate.record import SimRecord
from engine.simulate.timeline import Timeline
from engine.store.models import Event, Job, StepRun
from engine.store.read import all_history

__all__ = ["render_replay", "render_replay_html"]

_LOG_LIMIT = 600


def _load(engine: Engine) -> tuple[list[Job], list[StepRun], list[Event]]:
    with Session(engine) as session:
        jobs = list(session.exec(select(Job)).all())
        runs = list(session.exec(select(StepRun)).all())
    return jobs, runs, all_history(engine)  # the claims and successes folded into step runs too


def render_replay_html(
    record: SimRecord, jobs: list[Job], runs: list[StepRun], events: list[Event]
) -> str:
    """The replay page as one self-contained HTML document."""
    replay = Timeline(record, jobs, runs, events)
    counts = {
        kind: sum(1 for f in record.faults if f.kind == kind) for kind in ("kill", "duplicate")
    }
    return (
        environment()
        .get_template("simulate.html.j2")
        .render(
            rec=record,
            replay=replay,
            lanes=lanes_svg(replay),
            grid=grid_svg(replay),
            log=replay.log[-_LOG_LIMIT:],
            log_cut=max(0, len(replay.log) - _LOG_LIMIT),
            anim=anim,
            kills=counts["kill"],
            colours=COLOURS,
            passed=all(o.passed for o in record.oracles),
        )
    )


def render_replay(engine: Engine, record: SimRecord, out_dir: Path) -> Path:
    """Render ``<out_dir>/simulate-<seed>.html`` from the scratch database; its path."""
    html = render_replay_html(record, *_load(engine))
    return write_atomically(out_dir / f"simulate-{record.seed}.html", html)
