"""The typed context of a run report and of the index, built from the database.

Everything a template shows is computed here, into the views of
:mod:`engine.reports.views` (templates hold no SQL and no logic beyond
loops): the job header, the step graph's node states, errors with
tracebacks, dead letters and the flow's business summary (the checkpoint of
its last step); the timeline of attempts and the event log
come from :mod:`engine.reports.timeline`.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import networkx as nx
from sqlalchemy import Engine

from engine import tracing
from engine.errors import EngineError, NoSuchJob
from engine.flow import Flow
from engine.flow.registry import Registry
from engine.reports.links import run_href
from engine.reports.timeline import (
    attempts,
    event_log,
    lanes,
    step_label,
    wait_spans,
)
from engine.reports.views import (
    AuditView,
    ChildWaitView,
    DeadLetterView,
    DecidedView,
    ErrorView,
    GraphNode,
    IndexReport,
    IndexRow,
    JobLink,
    RunReport,
    SignalView,
    StepRunView,
    WaitView,
)
from engine.store.models import Job, JobSignal, JobSummary, StepRun, StepStatus
from engine.store.read import job_history, recent_job_summaries, recent_jobs

__all__ = ["IndexReport", "RunReport", "build_index", "build_run_report"]

# worst first: the colour of a graph node with several runs
_NODE_ORDER = ("dead", "running", "waiting", "pending", "cancelled", "done")


def _seconds(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return max((end - start).total_seconds(), 0.0)


def _find_flow(registry: Registry | None, name: str) -> Flow | None:
    if registry is None or name not in registry.names():
        return None
    try:
        return registry.get(name)
    except EngineError:
        return None


def _nodes(flow: Flow, runs: list[StepRun]) -> list[GraphNode]:
    """Steps laid out in columns by topological generation, coloured by their runs."""
    by_step: dict[str, list[StepRun]] = {}
    for run in runs:
        by_step.setdefault(run.step, []).append(run)
    order = {name: i for i, name in enumerate(flow.steps)}
    nodes: list[GraphNode] = []
    for column, generation in enumerate(nx.topological_generations(flow.graph)):
        for row, name in enumerate(sorted(generation, key=order.__getitem__)):
            step_runs = by_step.get(name, [])
            statuses = {str(r.status) for r in step_runs}
            status = next((s for s in _NODE_ORDER if s in statuses), "not_reached")
            nodes.append(
                GraphNode(
                    name=name,
                    status=status,
                    mapped=flow.steps[name].is_mapped,
                    runs=len(step_runs),
                    done=sum(1 for r in step_runs if r.status == StepStatus.DONE),
                    after=list(flow.steps[name].after),
                    column=column,
                    row=row,
                )
            )
    return nodes


def _error(where: str, error: dict[str, Any] | None) -> ErrorView | None:
    if not error:
        return None
    attempt = error.get("attempt")
    return ErrorView(
        where=where,
        attempt=attempt if isinstance(attempt, int) else None,
        type=str(error.get("type", "")),
        message=str(error.get("message", "")),
        traceback=str(error.get("traceback", "")),
    )


def _summary(flow: Flow | None, runs: list[StepRun]) -> tuple[str | None, dict[str, Any] | None]:
    """The checkpoint of the flow's last step (the business summary), if it has one."""
    if flow is not None:
        last = flow.topological_order()[-1]
        outputs = [r for r in runs if r.step == last and r.output is not None]
        if len(outputs) == 1:
            return last, outputs[0].output
        return last, None
    finished = [r for r in runs if not r.fanout_key and r.output is not None and r.finished_at]
    if not finished:
        return None, None
    last_run = max(finished, key=lambda r: r.finished_at or r.created_at)
    return last_run.step, last_run.output


def build_run_report(engine: Engine, job_id: uuid.UUID, registry: Registry | None) -> RunReport:
    """Read one job and everything about it; :class:`~engine.errors.NoSuchJob` if there is none.

    A job whose flow is not in ``registry`` still gets a report, without the graph.
    """
    history = job_history(engine, job_id)
    if history is None:
        raise NoSuchJob(job_id)
    job, runs, events, dead = history.job, history.runs, history.events, history.dead_letters
    by_id = {r.id: r for r in runs}
    flow = _find_flow(registry, job.flow)

    timeline = attempts(events, by_id, flow)
    # when each step run's step first ran (not its claim: a batch's step runs wait their turn)
    first_ran: dict[str, datetime] = {}
    for a in timeline:
        if a.start_recorded and a.ran and a.outcome != "queued":
            first_ran[a.step_run_id] = min(a.start, first_ran.get(a.step_run_id, a.start))
    log, renewals = event_log(events, by_id, flow)
    errors = [view for r in runs if (view := _error(step_label(r, flow), r.error)) is not None]
    summary_step, summary = _summary(flow, runs)
    end = job.finished_at
    return RunReport(
        generated_at=datetime.now(UTC),
        job_id=str(job.id),
        flow=job.flow,
        flow_version=job.flow_version,
        flow_known=flow is not None,
        flow_description=flow.description if flow is not None else "",
        params=[(k, json.dumps(v, default=str)) for k, v in sorted(job.params.items())],
        status="waiting" if history.waiting_for else str(job.status),
        waiting_for=history.waiting_for,
        fingerprint=job.fingerprint,
        submitted_by=job.submitted_by,
        trace_id=tracing.trace_id(job.traceparent),
        created_at=job.created_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
        duration_s=_seconds(job.started_at or job.created_at, end),
        error=job.error,
        rejected=job.rejected,
        nodes=_nodes(flow, runs) if flow is not None else [],
        steps=[
            StepRunView(
                id=str(r.id),
                label=step_label(r, flow),
                step=r.step,
                fanout_key=r.fanout_key,
                status=str(r.status),
                attempts=r.attempts,
                max_attempts=r.max_attempts,
                attempt_base=r.attempt_base,
                retries=r.retries,
                lease_owner=r.lease_owner,
                started_at=_first_ran(first_ran.get(str(r.id)), r),
                finished_at=r.finished_at,
                duration_s=_seconds(_first_ran(first_ran.get(str(r.id)), r), r.finished_at),
            )
            for r in runs
        ],
        attempts=timeline,
        wait_spans=wait_spans(events, by_id, flow, job.finished_at),
        lanes=lanes(timeline),
        counts=dict(Counter(str(e.kind) for e in events)),
        events=log,
        renewals=renewals,
        errors=errors,
        dead_letters=[
            DeadLetterView(
                id=d.id,
                source=str(d.source),
                label=step_label(by_id.get(d.step_run_id) if d.step_run_id else None, flow),
                reason=d.reason,
                created_at=d.created_at,
                replayed_at=d.replayed_at,
            )
            for d in dead
        ],
        summary_step=summary_step,
        summary=summary,
        waits=[_wait_view(r, flow, job.flow) for r in runs if r.status == StepStatus.WAITING],
        signals=[
            SignalView(
                name=g.name,
                data=json.dumps(g.data, sort_keys=True, default=str),
                sent_by=g.sent_by,
                at=g.created_at,
            )
            for g in history.signals
        ],
        parent=None if history.parent is None else _job_link(history.parent, job.child_key),
        children=[_job_link(c) for c in history.children],
        child_waits=_child_waits(history.children, history.child_waits, registry),
        decided=[
            _decided(r, flow, job.flow, history.signals)
            for r in runs
            if r.wait_summary is not None and r.status != StepStatus.WAITING
        ],
        audit=[
            AuditView(
                at=a.at,
                actor=a.actor,
                source=str(a.source),
                action=a.action,
                target=a.target_kind + ("" if a.target_id is None else f" {a.target_id}"),
                reason=a.reason,
                detail=json.dumps(a.detail, sort_keys=True, default=str) if a.detail else "",
            )
            for a in history.audit
        ],
    )


def _wait_view(run: StepRun, flow: Flow | None, flow_name: str) -> WaitView:
    return WaitView(
        label=step_label(run, flow),
        signal=run.wait_signal,
        until=run.wait_until,
        children=run.wait_children,
        summary=run.wait_summary,
        flow=flow_name,
    )


def _child_waits(
    children: list[Job], waits: list[StepRun], registry: Registry | None
) -> list[ChildWaitView]:
    """Each waiting step run of the children, with the child it belongs to."""
    by_id = {c.id: c for c in children}
    return [
        ChildWaitView(
            child=_job_link(child),
            wait=_wait_view(r, _find_flow(registry, child.flow), child.flow),
        )
        for r in waits
        if (child := by_id.get(r.job_id)) is not None
    ]


def _decided(
    run: StepRun, flow: Flow | None, flow_name: str, signals: list[JobSignal]
) -> DecidedView:
    """A wait with a summary that is over, with the signal it waited for if that came."""
    came = next((g for g in signals if run.wait_signal and g.name == run.wait_signal), None)
    return DecidedView(
        label=step_label(run, flow),
        signal=run.wait_signal,
        summary=run.wait_summary or {},
        flow=flow_name,
        sent_by=None if came is None else came.sent_by,
        at=None if came is None else came.created_at,
        data=None if came is None else json.dumps(came.data, sort_keys=True, default=str),
    )


def _first_ran(recorded: datetime | None, run: StepRun) -> datetime | None:
    """When a step run's step first ran, for its table row: never after the run finished.

    The recorded start is its slot's clock mapped onto the database's with one
    offset (a few milliseconds late at most), while ``finished_at`` is the
    database's own: a step that ran for less than that error would read as
    starting after it ended.
    """
    if recorded is None:
        return run.started_at
    return recorded if run.finished_at is None else min(recorded, run.finished_at)


def _job_link(job: Job, key: str | None = None) -> JobLink:
    """A link to ``job``; ``key``: this job's key as the parent's child (else ``job``'s own)."""
    # a run report is runs/<id>.html: another run's is beside it
    return JobLink(
        job_id=str(job.id),
        flow=job.flow,
        status=str(job.status),
        key=key or job.child_key,
        href=f"../{run_href(job.id)}",
    )


def build_index(engine: Engine, limit: int = 5000) -> IndexReport:
    """Every job, live or pruned (newest first, at most ``limit``), with its duration."""
    rows = [
        _index_row(listed.job, str(listed.state), waiting_for=listed.waiting_for)
        for listed in recent_jobs(engine, limit=limit)
    ]
    # pruned jobs: their summaries, linking the page stored before their rows went
    rows += [
        _index_row(s, s.status, pruned=True) for s in recent_job_summaries(engine, limit=limit)
    ]
    rows = sorted(rows, key=lambda r: r.created_at, reverse=True)[:limit]
    return IndexReport(
        generated_at=datetime.now(UTC),
        rows=rows,
        flows=sorted({r.flow for r in rows}),
        statuses=sorted({r.status for r in rows}),
        periods=sorted({r.period for r in rows if r.period}, reverse=True),
    )


def _index_row(j: Job | JobSummary, status: str, **more: Any) -> IndexRow:
    """A job's row in the index, from its row or (pruned) its summary's."""
    return IndexRow(
        job_id=str(j.id),
        flow=j.flow,
        status=status,
        period=str(j.params.get("period", "")),
        params=json.dumps(j.params, sort_keys=True, default=str),
        submitted_by=j.submitted_by,
        created_at=j.created_at,
        duration_s=_seconds(j.started_at or j.created_at, j.finished_at),
        href=run_href(j.id),
        **more,
    )
