"""Render run reports and the index into ``Settings.reports_dir``.

Templates live in the top-level ``reports/`` folder: ``run.html.j2``,
``index.html.j2``, the inlined ``report.css``/``index.js``, and one business
summary block per flow, ``reports/flows/<flow>.html.j2`` (a flow without one
gets ``flows/_generic.html.j2``: its summary as nested tables). Autoescape is
on and undefined names raise; the only markup marked safe is the SVG of
:mod:`engine.reports.svg`, which escapes every text it draws.

Files are written to a temporary name and renamed, so a reader (the server,
a browser) never sees half a report.
"""

from __future__ import annotations

import os
import re
import tempfile
import uuid
from datetime import datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from engine.config import Settings
from engine.errors import EngineError
from engine.registry import Registry
from engine.reports.context import (
    IndexReport,
    RunReport,
    build_index,
    build_run_report,
    run_href,
)
from engine.reports.svg import OUTCOME_COLOURS, STATUS_COLOURS, durations_svg, gantt_svg, graph_svg
from engine.resources import shipped_dir
from engine.store.read import sqlalchemy_engine

__all__ = [
    "TEMPLATES_DIR",
    "environment",
    "render_all",
    "render_index",
    "render_index_html",
    "render_job_report",
    "render_run_html",
]

TEMPLATES_DIR = shipped_dir("reports")
"""The top-level ``reports/`` folder of the project: templates and static assets."""

_FLOW_NAME = re.compile(r"[a-z][a-z0-9_-]*")


def _ts(value: datetime | None) -> str:
    if value is None:
        return "\u2013"
    return value.strftime("%Y-%m-%d %H:%M:%S.") + f"{value.microsecond // 1000:03d} UTC"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "\u2013"
    if seconds < 60:
        return f"{seconds:.2f} s"
    minutes, rest = divmod(seconds, 60)
    if minutes < 60:
        return f"{int(minutes)} min {rest:04.1f} s"
    hours, minutes = divmod(minutes, 60)
    return f"{int(hours)} h {int(minutes):02d} min"


def _amount(value: Any) -> str:
    """Money and counts with thousands separators; anything else as text."""
    try:
        number = Decimal(str(value))
    except (InvalidOperation, ValueError):
        return str(value)
    if number == number.to_integral_value() and "." not in str(value):
        return f"{number:,.0f}"
    return f"{number:,.2f}"


def environment() -> Environment:
    """The jinja2 environment of the reports: autoescape, StrictUndefined, our filters."""
    env = Environment(
        loader=FileSystemLoader(TEMPLATES_DIR),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["ts"] = _ts
    env.filters["duration"] = _duration
    env.filters["amount"] = _amount
    env.globals["status_colours"] = STATUS_COLOURS
    env.globals["outcome_colours"] = OUTCOME_COLOURS
    return env


def _summary_template(env: Environment, flow: str) -> str:
    if _FLOW_NAME.fullmatch(flow):
        name = f"flows/{flow}.html.j2"
        if name in env.list_templates():
            return name
    return "flows/_generic.html.j2"


def render_run_html(report: RunReport, env: Environment | None = None) -> str:
    """One run report as a self-contained HTML document."""
    env = env or environment()
    starts = [a.start for a in report.attempts] + [report.created_at]
    ends = [a.end for a in report.attempts if a.end is not None]
    window_end = report.finished_at or max([*ends, report.generated_at])
    return env.get_template("run.html.j2").render(
        r=report,
        graph=graph_svg(report.nodes),
        gantt=gantt_svg(report.attempts, report.lanes, min(starts), window_end),
        summary_template=_summary_template(env, report.flow),
        index_href="../index.html",
    )


def render_index_html(index: IndexReport, env: Environment | None = None) -> str:
    """The index of all runs as a self-contained HTML document."""
    env = env or environment()
    return env.get_template("index.html.j2").render(ix=index, chart=durations_svg(index.rows))


def write_atomically(path: Path, text: str) -> Path:
    """Write ``text`` under a temporary name, then rename: a reader never sees half a page."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _registry(settings: Settings) -> Registry | None:
    try:
        return Registry.load(settings.flow_modules)
    except EngineError:
        return None  # reports still render, without graphs


def render_job_report(
    settings: Settings,
    job_id: uuid.UUID | str,
    *,
    out_dir: Path | None = None,
    registry: Registry | None = None,
) -> Path:
    """Render one job's report to ``<reports_dir>/runs/<job_id>.html``; return the path.

    Raises :class:`~engine.errors.NoSuchJob` when there is no such job. ``registry`` defaults
    to ``Registry.load(settings.flow_modules)``; a flow it does not know is
    rendered without its graph.
    """
    job = job_id if isinstance(job_id, uuid.UUID) else uuid.UUID(str(job_id))
    engine = sqlalchemy_engine(settings)
    try:
        report = build_run_report(engine, job, registry or _registry(settings))
    finally:
        engine.dispose()
    return write_atomically(
        (out_dir or settings.reports_dir) / run_href(job), render_run_html(report)
    )


def render_index(settings: Settings, *, out_dir: Path | None = None) -> Path:
    """Render ``<reports_dir>/index.html`` listing every job; return the path."""
    engine = sqlalchemy_engine(settings)
    try:
        index = build_index(engine)
    finally:
        engine.dispose()
    return write_atomically(
        (out_dir or settings.reports_dir) / "index.html", render_index_html(index)
    )


def render_all(settings: Settings, *, out_dir: Path | None = None) -> list[Path]:
    """Render the index and every job's report; the index's path first."""
    registry = _registry(settings)
    engine = sqlalchemy_engine(settings)
    env = environment()
    target = out_dir or settings.reports_dir
    try:
        index = build_index(engine)
        paths = [write_atomically(target / "index.html", render_index_html(index, env))]
        for row in index.rows:
            report = build_run_report(engine, uuid.UUID(row.job_id), registry)
            paths.append(write_atomically(target / row.href, render_run_html(report, env)))
    finally:
        engine.dispose()
    return paths
