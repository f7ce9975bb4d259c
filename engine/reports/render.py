"""Render run reports and the index, and store them where reports go.

Templates live in the top-level ``reports/`` folder: ``run.html.j2``,
``index.html.j2``, the inlined ``report.css``/``index.js``, and one business
summary block per flow, ``reports/flows/<flow>.html.j2`` (a flow without one
gets ``flows/_generic.html.j2``: its summary as nested tables), and the block
showing what a wait published for its approver, ``flows/<flow>.waiting.html.j2``
(else ``flows/_waiting.html.j2``: scalars as a definition list, lists of
objects as tables). Autoescape is
on and undefined names raise; the only markup marked safe is the SVG of
:mod:`engine.reports.svg`, which escapes every text it draws.

Pages are stored through :func:`engine.reports.storage.report_store`: a
local folder (written to a temporary name and renamed, so a reader never sees
half a report) or S3 when ``ENGINE_REPORTS_URL`` is set. A page rendered with
``refresh_s`` reloads itself that often; only ``engine reports serve`` asks
for it, and only while a job is active, so stored reports never refresh.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup

from engine.config import Settings
from engine.errors import EngineError
from engine.flow.registry import Registry
from engine.infra.resources import shipped_dir
from engine.reports.context import (
    IndexReport,
    RunReport,
    build_index,
    build_run_report,
)
from engine.reports.links import run_href
from engine.reports.storage import HTML, report_store
from engine.reports.svg import (
    OUTCOME_COLOURS,
    QUEUED_COLOUR,
    STATUS_COLOURS,
    durations_svg,
    gantt_svg,
    graph_svg,
)
from engine.reports.timeline import Attempt, WaitSpan
from engine.store.read import sqlalchemy_engine

__all__ = [
    "TEMPLATES_DIR",
    "amount",
    "environment",
    "instant",
    "render_after_end",
    "render_all",
    "render_index",
    "render_index_html",
    "render_job_report",
    "render_job_reports",
    "render_run_html",
]

TEMPLATES_DIR = shipped_dir("reports")
"""The top-level ``reports/`` folder of the project: templates and static assets."""

log = logging.getLogger(__name__)

_FLOW_NAME = re.compile(r"[a-z][a-z0-9_-]*")


def instant(value: datetime | str | None) -> datetime | None:
    """A moment as a UTC ``datetime``: a ``datetime`` or its ISO text (a summary's JSON)."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def _ts(value: datetime | str | None) -> str:
    """One date style: ``2026-11-30 18:04:05.123 UTC`` (text that is no moment as it is)."""
    moment = instant(value)
    if moment is None:
        return "\u2013" if value in (None, "") else str(value)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d} UTC"


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


def amount(value: Any) -> str:
    """Money and counts with thousands separators; anything else as text."""
    try:
        number = Decimal(str(value))
    except (InvalidOperation, ValueError):
        return str(value)
    if number == number.to_integral_value() and "." not in str(value):
        return f"{number:,.0f}"
    return f"{number:,.2f}"


def _job_ref(job_id: Any, href: str | None = None) -> Markup:
    """A job's whole id, linked to ``href`` when given."""
    if href:
        return Markup('<a href="{}">{}</a>').format(href, str(job_id))
    return Markup("{}").format(str(job_id))


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
    env.filters["amount"] = amount
    env.filters["job_ref"] = _job_ref  # the console's: a short id with a copy button
    env.filters["columns"] = _columns
    env.globals["wait_template"] = lambda flow: _wait_template(env, flow)
    env.globals["status_colours"] = STATUS_COLOURS
    env.globals["outcome_colours"] = OUTCOME_COLOURS
    env.globals["queued_colour"] = QUEUED_COLOUR
    return env


def _columns(rows: Sequence[Any]) -> list[str]:
    """The keys of a list of objects, in the order they first appear (a table's columns)."""
    seen: dict[str, None] = {}
    for row in rows:
        if isinstance(row, dict):
            seen.update(dict.fromkeys(str(k) for k in row))
    return list(seen)


def _wait_template(env: Environment, flow: str) -> str:
    """The block showing a wait's summary: ``flows/<flow>.waiting.html.j2`` or the generic one."""
    return _flow_template(env, flow, "waiting.html.j2", "flows/_waiting.html.j2")


def _summary_template(env: Environment, flow: str) -> str:
    return _flow_template(env, flow, "html.j2", "flows/_generic.html.j2")


def _flow_template(env: Environment, flow: str, suffix: str, generic: str) -> str:
    """``flows/<flow>.<suffix>`` if there is one (and ``flow`` is a safe name), else ``generic``."""
    if _FLOW_NAME.fullmatch(flow):
        name = f"flows/{flow}.{suffix}"
        if name in env.list_templates():
            return name
    return generic


def render_run_html(
    report: RunReport,
    env: Environment | None = None,
    *,
    refresh_s: float | None = None,
    fragment: bool = False,
) -> str:
    """One run report as a self-contained HTML document; it reloads every ``refresh_s``.

    ``fragment``: only what the body shows after its link to the index (the
    console puts it in its own page and replaces it when the job changes).
    """
    env = env or environment()
    spans: list[Attempt | WaitSpan] = [*report.attempts, *report.wait_spans]
    starts = [a.start for a in spans] + [report.created_at]
    ends = [a.end for a in spans if a.end is not None]
    window_end = report.finished_at or max([*ends, report.generated_at])
    return env.get_template("run.html.j2").render(
        r=report,
        graph=graph_svg(report.nodes),
        gantt=gantt_svg(report.attempts, report.lanes, min(starts), window_end, report.wait_spans),
        summary_template=_summary_template(env, report.flow),
        index_href="../index.html",
        refresh_s=_refresh(refresh_s),
        fragment=fragment,
    )


def render_index_html(
    index: IndexReport, env: Environment | None = None, *, refresh_s: float | None = None
) -> str:
    """The index of all runs as a self-contained HTML document; it reloads every ``refresh_s``."""
    env = env or environment()
    return env.get_template("index.html.j2").render(
        ix=index, chart=durations_svg(index.rows), refresh_s=_refresh(refresh_s)
    )


def _refresh(seconds: float | None) -> str | None:
    # the content of <meta http-equiv="refresh">: whole seconds, at least one
    return None if seconds is None else str(max(1, round(seconds)))


def _registry(settings: Settings) -> Registry | None:
    try:
        return Registry.load(settings.flow_modules)
    except EngineError:
        return None  # reports still render, without graphs


def _render(
    settings: Settings,
    jobs: Sequence[uuid.UUID] | None,
    *,
    index: bool,
    out_dir: Path | None = None,
    registry: Registry | None = None,
) -> list[str]:
    """Render these jobs' reports (``None``: every job's) and the index, where reports go.

    One database engine, one template environment and one store for the whole
    call (a job's end used to open two of each); returns where each page went,
    the index first when rendered.
    """
    engine = sqlalchemy_engine(settings)
    env = environment()
    store = report_store(settings, out_dir)
    stored: list[str] = []
    try:
        built = build_index(engine) if index or jobs is None else None
        ids = [uuid.UUID(r.job_id) for r in built.rows] if jobs is None and built else jobs
        if ids:
            flows = registry or _registry(settings)
            for job in ids:
                report = build_run_report(engine, job, flows)
                stored.append(store.put(run_href(job), render_run_html(report, env), HTML))
        if built is not None and index:
            # the pages first: the index never links a page that is not there yet
            stored.insert(0, store.put("index.html", render_index_html(built, env), HTML))
    finally:
        engine.dispose()
    return stored


def render_job_report(
    settings: Settings,
    job_id: uuid.UUID | str,
    *,
    out_dir: Path | None = None,
    registry: Registry | None = None,
) -> str:
    """Render one job's report as ``runs/<job_id>.html``; return where it was stored.

    It goes to ``out_dir`` when given, else to ``s3://bucket/prefix/runs/<job_id>.html``
    when ``ENGINE_REPORTS_URL`` is set (the ``s3://`` URI is returned), else to
    ``<reports_dir>/runs/<job_id>.html`` (its absolute path is returned).
    Raises :class:`~engine.errors.NoSuchJob` when there is no such job, and
    :class:`~engine.errors.ReportStoreError` when S3 refuses the page.
    ``registry`` defaults to ``Registry.load(settings.flow_modules)``; a flow it
    does not know is rendered without its graph.
    """
    job = job_id if isinstance(job_id, uuid.UUID) else uuid.UUID(str(job_id))
    return _render(settings, [job], index=False, out_dir=out_dir, registry=registry)[0]


def render_job_reports(
    settings: Settings, jobs: Sequence[uuid.UUID], *, registry: Registry | None = None
) -> dict[uuid.UUID, str]:
    """Render each job's report where reports go; where each went, by job.

    One database engine and one store for all of them (a prune stores a batch
    before the rows go). A job whose page cannot be built or stored is
    logged and left out, so that the caller keeps its rows.
    """
    engine = sqlalchemy_engine(settings)
    env = environment()
    store = report_store(settings)
    flows = registry or _registry(settings)
    stored: dict[uuid.UUID, str] = {}
    try:
        for job in jobs:
            try:
                page = render_run_html(build_run_report(engine, job, flows), env)
                stored[job] = store.put(run_href(job), page, HTML)
            except Exception as exc:
                log.warning("could not store the report of job %s: %s", job, exc)
    finally:
        engine.dispose()
    return stored


def render_index(settings: Settings, *, out_dir: Path | None = None) -> str:
    """Render ``index.html`` listing every job where reports go; return where it was stored."""
    return _render(settings, [], index=True, out_dir=out_dir)[0]


def render_after_end(
    settings: Settings, job_id: uuid.UUID, registry: Registry | None = None
) -> None:
    """A job just ended (whoever ended it): its report and the index, when configured.

    The job's outcome is committed already; a report that cannot be rendered
    or stored is logged (naming the bucket, for S3) and never fails or retries
    anything.
    """
    if not settings.report_on_end:
        return
    try:
        _render(settings, [job_id], index=True, registry=registry)
    except Exception as exc:
        log.warning("could not render the report of job %s: %s", job_id, exc, exc_info=True)


def render_all(settings: Settings, *, out_dir: Path | None = None) -> list[str]:
    """Render the index and every job's report where reports go; the index's location first."""
    return _render(settings, None, index=True, out_dir=out_dir)
