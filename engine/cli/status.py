"""``engine status [JOB_ID]``: a job, its step runs and its result (or the most recent jobs).

A job's result is its last checkpoint: the output of the step run that
finished last (for a finished job, its final step's). It is shown as the
step's output model dumped to JSON, and ``--json`` gives it as ``result``.
The flow is loaded only to label a fan-out's runs (``cost_store[ST001]``),
so a job without fan-out shows without importing any flow module.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click
from rich.table import Table

from engine.cli.args import parse_job_id
from engine.cli.output import out, print_json, print_table
from engine.cli.runs import show_runs
from engine.cli.state import State, current
from engine.errors import EngineError, NoSuchJob
from engine.jobs.search import RunQuery
from engine.reports.counts import read_counts
from engine.store.status import StepStatus

if TYPE_CHECKING:
    from engine.flow import Flow
    from engine.retention.pruned import PrunedJob
    from engine.store.models import Job, StepRun
    from engine.store.read import JobView

__all__ = ["RESULT_SHOWN", "shown_result", "status"]


@click.command()
@click.argument("job_id", required=False)
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def status(job_id: str | None, as_json: bool) -> None:
    """Show a job and its step runs (or the most recent jobs).

    JOB_ID may be a unique prefix of the id (4 hex digits at least), as `engine runs` shows it.
    """
    state = current()
    if job_id is None:
        # for scripts: the metrics' counts, from the database, beside the recent jobs
        show_runs(state, RunQuery(), (), as_json, extra=lambda: {"counts": _counts(state)})
        return
    # SQLModel's read side, only for one job's view (the list above reads without it)
    from engine.store.read import job_view, sqlalchemy_engine

    parsed = parse_job_id(state.settings, job_id)
    view = job_view(sqlalchemy_engine(state.settings), parsed)
    if view is None:
        from engine.retention.pruned import pruned_job

        pruned = pruned_job(state.settings, parsed)
        if pruned is None:
            raise NoSuchJob(job_id)
        _show_pruned(pruned, as_json)
        return
    flow = _flow_or_none(state, view)
    if as_json:
        print_json(_view_json(view, flow))
    else:
        _print_view(view, flow)


def _show_pruned(job: PrunedJob, as_json: bool) -> None:
    """A job retention pruned: its summary, with the note saying so."""
    if as_json:
        print_json({"job": job.as_json(), "pruned": True})
        return
    out.print(
        f"job {job.id}  flow {job.flow} v{job.flow_version}  status [bold]{job.status}[/bold]",
        highlight=False,
    )
    out.print(job.note, highlight=False, markup=False)
    out.print(f"params {json.dumps(job.params, sort_keys=True)}", highlight=False, markup=False)
    out.print(
        f"created {job.created_at:%Y-%m-%d %H:%M:%S}  by {job.submitted_by or '-'}  "
        f"finished {job.finished_at:%Y-%m-%d %H:%M:%S}",
        highlight=False,
    )
    out.print(
        f"step runs {job.step_runs_done}/{job.step_runs} done, {job.step_runs_dead} dead, "
        f"{job.attempts} attempt(s), {job.events} event(s)",
        highlight=False,
    )
    if job.error:
        out.print(f"error {job.error}", highlight=False, markup=False)


def _counts(state: State) -> dict[str, Any]:
    return read_counts(state.settings).model_dump(mode="json")


def _flow_or_none(state: State, view: JobView) -> Flow | None:
    """The job's flow when this process loads it (for its fan-outs' labels); a status needs none."""
    name = view.job.flow
    if not any(s.fanout_key for s in view.steps):
        return None  # nothing to label: no flow module imported
    try:
        return state.registry.get(name) if name in state.registry.names() else None
    except EngineError:
        return None


def _key(run: StepRun, flow: Flow | None) -> str:
    """A fan-out run's label (``ST001``) when its step declares one, else its fan-out key."""
    step = flow.steps.get(run.step) if flow is not None else None
    return run.fanout_key if step is None else step.label_of(run.fanout_key, run.item)


def _view_json(view: JobView, flow: Flow | None) -> dict[str, Any]:
    return {
        "job": view.listed.as_json(),
        # the job's step runs and its descendants' (a parent's children do its work)
        "progress": {"done": view.done, "total": view.total},
        "steps": [
            {**s.model_dump(mode="json", exclude={"output"}), "label": _key(s, flow)}
            for s in view.steps
        ],
        "result": _result(view, flow),
        "unpublished_messages": view.unpublished,
        "signals": [
            sig.model_dump(mode="json", include={"name", "data", "sent_by", "created_at"})
            for sig in view.signals
        ],
        "parent": None if view.parent is None else _job_json(view.parent),
        "children": [_job_json(c) for c in view.children],
    }


# a result longer than this is cut in the text view (a close's is tens of kilobytes)
RESULT_SHOWN = 400


def shown_result(output: Any) -> str:
    """A result as the text view shows it: its JSON, cut at :data:`RESULT_SHOWN` characters."""
    text = json.dumps(output, sort_keys=True)
    if len(text) <= RESULT_SHOWN:
        return text
    return f"{text[:RESULT_SHOWN]}... ({len(text):,} characters; --json shows it whole)"


def _result(view: JobView, flow: Flow | None) -> dict[str, Any] | None:
    """The job's last checkpoint: the step run done last, its output; ``None`` before any."""
    done = [s for s in view.steps if s.status == StepStatus.DONE and s.finished_at is not None]
    if not done:
        return None
    last = max(done, key=lambda s: (s.finished_at, s.step, s.fanout_key))
    return {
        "step": last.step,
        "key": _key(last, flow),
        "finished_at": None if last.finished_at is None else last.finished_at.isoformat(),
        "output": last.output,
    }


def _job_json(job: Job) -> dict[str, Any]:
    return {
        "job_id": str(job.id),
        "flow": job.flow,
        "status": str(job.status),
        "key": job.child_key,
        "finished_at": None if job.finished_at is None else job.finished_at.isoformat(),
    }


def _print_view(view: JobView, flow: Flow | None) -> None:
    from engine.store.read import waits_for

    job = view.job
    waiting = f" for {', '.join(view.waiting_for)}" if view.waiting_for else ""
    out.print(
        f"job {job.id}  flow {job.flow} v{job.flow_version}  "
        f"status [bold]{view.listed.state}[/bold]{waiting}",
        highlight=False,
    )
    out.print(f"params {json.dumps(job.params, sort_keys=True)}", highlight=False, markup=False)
    out.print(f"created {job.created_at:%Y-%m-%d %H:%M:%S}  by {job.submitted_by or '-'}")
    family = " (its child jobs' included)" if view.children else ""
    out.print(f"progress {view.done}/{view.total} step runs done{family}", highlight=False)
    if view.parent is not None:
        p = view.parent
        out.print(
            f"child {job.child_key} of {p.flow} job {p.id} ({p.status})",
            highlight=False,
            markup=False,
        )
    table = Table("step", "key", "status", "attempts", "lease owner", "concurrency")
    table.add_column("waits for", no_wrap=True)
    table.add_column("error")
    for s in view.steps:
        error = (s.error or {}).get("message", "") if s.error else ""
        table.add_row(
            s.step,
            _key(s, flow),
            s.status,
            f"{s.attempts - s.attempt_base}/{s.max_attempts - s.attempt_base}"
            + (f" (retry {s.retries})" if s.retries else ""),
            s.lease_owner or "",
            f"{s.concurrency_key} (limit {s.concurrency_limit})" if s.concurrency_key else "",
            waits_for(s) if s.status == StepStatus.WAITING else "",
            str(error),
        )
    print_table(table)
    for sig in view.signals:
        out.print(
            f"signal {sig.name} from {sig.sent_by or '-'} at {sig.created_at:%Y-%m-%d %H:%M:%S}: "
            f"{json.dumps(sig.data, sort_keys=True)}",
            highlight=False,
            markup=False,
        )
    if view.children:
        kids = Table("child", "flow", "job", "status", "finished")
        for c in view.children:
            finished = f"{c.finished_at:%Y-%m-%d %H:%M:%S}" if c.finished_at else ""
            kids.add_row(c.child_key or "", c.flow, str(c.id), str(c.status), finished)
        print_table(kids)
    result = _result(view, flow)
    if result is not None:
        step = result["step"] + (f"[{result['key']}]" if result["key"] else "")
        out.print(
            f"result ({step}, the last checkpoint): {shown_result(result['output'])}",
            highlight=False,
            markup=False,
        )
    if view.unpublished:
        out.print(f"{view.unpublished} message(s) not published yet")
