"""``--wait``: a progress bar on a terminal, one line per change of state off one.

Either way the job's last state is printed as a line at the end, with the
failure's reason when it failed; the exit code is the job's (decided where
every exit code is, from :class:`~engine.errors.JobFailed`).
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from engine.cli.output import out
from engine.config import Settings
from engine.jobs.watch import Progress as JobProgress
from engine.jobs.watch import watch_job

__all__ = ["wait_and_show"]


def wait_and_show(settings: Settings, job_id: uuid.UUID, *, quiet: bool = False) -> JobProgress:
    """Watch the job until it ends, showing it unless ``quiet``; its last progress."""
    if quiet:
        return watch_job(settings, job_id, lambda _p: None)
    show = _bar(job_id) if sys.stdout.isatty() else _lines()
    with show as on_poll:
        last = watch_job(settings, job_id, on_poll)
    out.print(last.line(), highlight=False, markup=False)
    return last


@contextmanager
def _lines() -> Iterator[Callable[[JobProgress], None]]:
    """A line at each change of state (and of what a waiting job waits for), not of counts."""
    seen: list[tuple[str, tuple[str, ...]]] = []

    def on_poll(p: JobProgress) -> None:
        key = (p.state, p.waiting_for)
        if p.ended or (seen and seen[-1] == key):
            return  # the last state is printed once, after the watch
        seen.append(key)
        out.print(p.line(), highlight=False, markup=False)

    yield on_poll


@contextmanager
def _bar(job_id: uuid.UUID) -> Iterator[Callable[[JobProgress], None]]:
    bar = Progress(
        TextColumn("[bold]job {task.fields[job]}[/bold] {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=out,
    )
    with bar:
        task = bar.add_task("pending", total=None, job=str(job_id)[:8])

        def on_poll(p: JobProgress) -> None:
            state = p.state + (f" ({', '.join(p.waiting_for)})" if p.waiting_for else "")
            bar.update(task, description=state, total=p.total or None, completed=p.done)

        yield on_poll
