"""HTML run reports: what happened in a run, for an accountant and an engineer.

A report is a *view* of rows, never a source of truth. :mod:`.context` reads a
job, its step runs, events and dead letters through the SQLModel read models
and builds a typed :class:`~engine.reports.views.RunReport`, its timeline of
attempts and its event log built by :mod:`.timeline`; :mod:`.svg` draws the
step graph, the timeline and the duration charts as escaped SVG;
:mod:`.render` fills the jinja2 templates of the top-level ``reports/`` folder
(autoescape on, ``StrictUndefined``) into one self-contained HTML file per run
plus an index. :mod:`.storage` stores them where reports go: S3 when
``Settings.reports_url`` is set, else ``Settings.reports_dir``; flows write
files beside them with :func:`write_report_file`. :mod:`.serve` renders the
same pages live from the database, reloading while jobs run;
:mod:`engine.cli.reports` adds ``engine report`` and ``engine reports``.

The worker and the sweeper call :func:`render_after_end` after a job
ends; both only read the database.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.reports.storage import write_report_file

if TYPE_CHECKING:
    from engine.reports.render import (
        render_after_end,
        render_all,
        render_index,
        render_job_report,
    )

_RENDER = frozenset({"render_after_end", "render_all", "render_index", "render_job_report"})


def __getattr__(name: str) -> Any:
    # the renderers need jinja2 and SQLModel (the worker extra); storing a
    # flow's side file (write_report_file) needs neither, so an API install
    # can load every flow module
    if name in _RENDER:
        from engine.reports import render

        return getattr(render, name)
    raise AttributeError(f"module 'engine.reports' has no attribute {name!r}")


__all__ = [
    "render_after_end",
    "render_all",
    "render_index",
    "render_job_report",
    "write_report_file",
]
