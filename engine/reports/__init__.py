"""HTML run reports: what happened in a run, for an accountant and an engineer.

A report is a *view* of rows, never a source of truth. :mod:`.context` reads a
job, its step runs, events and dead letters through the SQLModel read models
and builds a typed :class:`~engine.reports.context.RunReport`; :mod:`.svg`
draws the step graph, the timeline and the duration charts as escaped SVG;
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

from engine.reports.render import render_after_end, render_all, render_index, render_job_report
from engine.reports.storage import write_report_file

__all__ = [
    "render_after_end",
    "render_all",
    "render_index",
    "render_job_report",
    "write_report_file",
]
