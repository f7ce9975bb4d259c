"""Jobs: ``engine submit FLOW``, ``cancel``, ``retry`` (``status`` and ``runs``: their own)."""

from __future__ import annotations

from typing import Any

import click
from pydantic import BaseModel

from engine.cli.args import option_type, parse_job_id
from engine.cli.audit import by_option, reason_option
from engine.cli.bulk import bulk_options, run_bulk, wants_bulk
from engine.cli.output import out, print_json
from engine.cli.state import State, current
from engine.cli.watching import wait_and_show
from engine.errors import EngineError, JobFailed, UnknownFlow
from engine.flow import Flow
from engine.jobs import admin
from engine.jobs.audit import operator
from engine.jobs.submit import Submitted, submit
from engine.store.status import JobStatus

__all__ = ["cancel", "retry", "submit_group", "whoami"]


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
            # the closest flow's name suggested (`postng`: did you mean 'posting'?); a
            # usage error exits EXIT_BAD_INPUT (2), as click's own do
            raise click.UsageError(str(UnknownFlow(name, registry.names())), ctx)
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
@by_option
@reason_option
@bulk_options("cancel")
def cancel(job_id: str | None, by: str | None, reason: str | None, **bulk: Any) -> None:
    """Cancel an active job; running steps stop at their next check or commit.

    Recorded (who, why) in the audit trail; a job that ended already is refused
    (exit 2) and nothing is recorded. JOB_ID may be a unique prefix of the id.

    In bulk: filters with --dry-run write a preview (its id, counts, a sample);
    --apply PREVIEW --reason R cancels that set only, skipping (and listing)
    each job whose state changed since.
    """
    if job_id is None or wants_bulk(bulk):
        run_bulk("cancel", {"job_id": job_id, **bulk}, by=by, reason=reason, single="job_id")
        return
    settings = current().settings
    job = parse_job_id(settings, job_id)
    admin.cancel(settings, job, reason, actor=by or whoami())
    out.print(f"job {job} cancelled", highlight=False)


@click.command()
@click.argument("job_id", required=False)
@by_option
@reason_option
@bulk_options("retry")
def retry(job_id: str | None, by: str | None, reason: str | None, **bulk: Any) -> None:
    """Resume a failed or cancelled job from its last checkpoints, with its children.

    Its failed or cancelled child jobs are retried with it (same ids); a done
    child stays done. A child whose parent failed is retried by retrying the parent.
    Recorded (who, why) in the audit trail. JOB_ID may be a unique prefix of the id.

    Each retry starts a retry round: a step's attempts count from 1 of its own
    budget again ("attempt 1 of 5 (retry 2)"). A rejected job (its data was
    refused, or an accountant rejected it) is not retried (exit 2): correct
    the data and submit a new job.

    In bulk: filters with --dry-run write a preview (its id, counts, a sample);
    --apply PREVIEW --reason R retries that set only, skipping (and listing)
    each job whose state changed since; the same refusals hold per job.
    """
    if job_id is None or wants_bulk(bulk):
        run_bulk("retry", {"job_id": job_id, **bulk}, by=by, reason=reason, single="job_id")
        return
    settings = current().settings
    job = parse_job_id(settings, job_id)
    reopened = admin.retry_job(settings, job, actor=by or whoami(), reason=reason)
    line = f"job {job} resumed: {reopened.step_runs} step run(s) back to pending"
    if reopened.children:
        line += f"; child job(s) retried with it: {', '.join(map(str, reopened.children))}"
    out.print(line, highlight=False)
