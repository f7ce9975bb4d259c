"""Jobs: ``engine submit FLOW``, ``status``, ``cancel`` and ``retry`` (``runs``: :mod:`.runs`)."""

from __future__ import annotations

import json
from typing import Any

import click
from pydantic import BaseModel
from rich.table import Table

from engine.cli.args import option_type, parse_job_id
from engine.cli.audit import by_option, reason_option
from engine.cli.output import out, print_json, print_table
from engine.cli.runs import show_runs
from engine.cli.state import State, current
from engine.cli.watching import wait_and_show
from engine.errors import EngineError, JobFailed, NoSuchJob
from engine.flow import Flow
from engine.jobs import admin
from engine.jobs.audit import operator
from engine.jobs.search import RunQuery
from engine.jobs.submit import Submitted, submit
from engine.reports.counts import read_counts
from engine.retention.pruned import PrunedJob, pruned_job
from engine.store.models import Job, StepRun
from engine.store.read import JobView, job_view, sqlalchemy_engine, waits_for
from engine.store.status import JobStatus, StepStatus

__all__ = ["cancel", "retry", "status", "submit_group"]


class SubmitGroup(click.Group):
    """``engine submit FLOW``: one subcommand per registered flow, options from its params."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        try:
            return ctx.ensure_object(State).registry.names()
        except EngineError:
            return []

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        registry = ctx.ensure_object(State).registry
        if cmd_name not in registry.names():
            return None
        return _submit_command(registry.get(cmd_name))

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        try:
            registry = ctx.ensure_object(State).registry
        except EngineError as exc:
            raise click.UsageError(str(exc), ctx) from exc
        if name not in registry.names():
            known = ", ".join(registry.names()) or "(none registered)"
            raise click.UsageError(f"unknown flow {name!r}; known flows: {known}", ctx)
        return super().resolve_command(ctx, args)


def _param_options(params: type[BaseModel]) -> list[click.Option]:
    options = []
    for name, field in params.model_fields.items():
        flag = "--" + name.replace("_", "-")
        help_text = field.description or ""
        if field.annotation is bool:
            options.append(
                click.Option([f"{flag}/--no-{flag[2:]}", name], default=None, help=help_text)
            )
            continue
        # Numbers are typed (INTEGER in --help, `abc` refused by click); the rest stay
        # strings, and the flow's pydantic model validates every value.
        options.append(
            click.Option(
                [flag, name],
                type=option_type(field.annotation),
                required=field.is_required(),
                default=None,
                help=help_text,
                show_default=False if field.is_required() else repr(field.default),
            )
        )
    return options


def _submit_command(flow: Flow) -> click.Command:
    def run(as_json: bool, wait: bool, submitted_by: str | None, **values: Any) -> None:
        state = current()
        given = {k: v for k, v in values.items() if v is not None}
        result = submit(
            flow,
            given,
            settings=state.settings,
            submitted_by=submitted_by or whoami(),
        )
        if not (as_json and wait):  # --json --wait prints one object, at the end
            _report_submitted(result, as_json)
        if wait:
            last = wait_and_show(state.settings, result.job_id, quiet=as_json)
            if as_json:
                print_json({**result.as_json(), "status": last.status, "error": last.error})
            if last.status != JobStatus.DONE:
                raise JobFailed(f"{flow.name} job {result.job_id} ended {last.status}")

    params: list[click.Parameter] = [
        *_param_options(flow.params),
        click.Option(["--json", "as_json"], is_flag=True, help="print one JSON object"),
        click.Option(
            ["--wait"],
            is_flag=True,
            help=(
                "wait until the job ends: a progress bar on a terminal, else a line per "
                "change of state; the last state (and why it failed); exit 1 if it failed"
            ),
        ),
        click.Option(
            ["--submitted-by"],
            envvar="ENGINE_SUBMITTED_BY",
            show_envvar=True,
            help="who submits (recorded on the job); default user@host",
        ),
    ]
    return click.Command(
        flow.name,
        callback=run,
        params=params,
        help=(flow.description or f"Submit a job of flow {flow.name!r}."),
    )


def whoami() -> str:
    """Who runs the command: user@host (recorded as who submitted, scheduled or acted)."""
    return operator()


def _report_submitted(result: Submitted, as_json: bool) -> None:
    if as_json:
        print_json(result.as_json())
    elif result.created:
        out.print(f"submitted {result.flow} job {result.job_id} ({result.status})", highlight=False)
    else:
        out.print(
            f"{result.flow} job {result.job_id} is already {result.status} with the same "
            "parameters; returned it (not created)",
            highlight=False,
        )


submit_group = SubmitGroup("submit", help="Submit a job of a flow: engine submit FLOW --param")


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
    parsed = parse_job_id(state.settings, job_id)
    view = job_view(sqlalchemy_engine(state.settings), parsed)
    if view is None:
        pruned = pruned_job(state.settings, parsed)
        if pruned is None:
            raise NoSuchJob(job_id)
        _show_pruned(pruned, as_json)
        return
    flow = _flow_or_none(state, view.job.flow)
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


def _flow_or_none(state: State, name: str) -> Flow | None:
    """The job's flow when this process loads it (for its steps' labels); a status needs none."""
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
        "unpublished_messages": view.unpublished,
        "signals": [
            sig.model_dump(mode="json", include={"name", "data", "sent_by", "created_at"})
            for sig in view.signals
        ],
        "parent": None if view.parent is None else _job_json(view.parent),
        "children": [_job_json(c) for c in view.children],
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
    if view.unpublished:
        out.print(f"{view.unpublished} message(s) not published yet")


@click.command()
@click.argument("job_id")
@by_option
@reason_option
def cancel(job_id: str, by: str | None, reason: str | None) -> None:
    """Cancel an active job; running steps stop at their next check or commit.

    Recorded (who, why) in the audit trail; a job that ended already is refused
    (exit 2) and nothing is recorded. JOB_ID may be a unique prefix of the id.
    """
    settings = current().settings
    job = parse_job_id(settings, job_id)
    admin.cancel(settings, job, reason, actor=by or whoami())
    out.print(f"job {job} cancelled", highlight=False)


@click.command()
@click.argument("job_id")
@by_option
@reason_option
def retry(job_id: str, by: str | None, reason: str | None) -> None:
    """Resume a failed or cancelled job from its last checkpoints, with its children.

    Its failed or cancelled child jobs are retried with it (same ids); a done
    child stays done. A child whose parent failed is retried by retrying the parent.
    Recorded (who, why) in the audit trail. JOB_ID may be a unique prefix of the id.

    Each retry starts a retry round: a step's attempts count from 1 of its own
    budget again ("attempt 1 of 5 (retry 2)"). A rejected job (its data was
    refused, or an accountant rejected it) is not retried (exit 2): correct
    the data and submit a new job.
    """
    settings = current().settings
    job = parse_job_id(settings, job_id)
    reopened = admin.retry_job(settings, job, actor=by or whoami(), reason=reason)
    line = f"job {job} resumed: {reopened.step_runs} step run(s) back to pending"
    if reopened.children:
        line += f"; child job(s) retried with it: {', '.join(map(str, reopened.children))}"
    out.print(line, highlight=False)
