"""The ``engine`` command line: thin commands over the public API.

Exit codes: 0 success, 1 a job failed, 2 bad input (the message names the bad
value), 3 the environment is wrong (database unreachable, bad setting, a
refused migration). ``--json`` prints one JSON object on stdout.
"""

from __future__ import annotations

import functools
import getpass
import json
import logging
import os
import socket
import sys
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import click
from pydantic import BaseModel, SecretStr
from rich.console import Console
from rich.table import Table

from engine import admin, db
from engine.config import SecretsFilter, Settings
from engine.errors import BadInput, EngineError
from engine.flow import Flow
from engine.queues_cli import queues
from engine.registry import Registry
from engine.reports.cli import report, reports
from engine.simulate import simulate
from engine.store import migrations
from engine.store.models import JobStatus
from engine.store.read import JobView, job_view, recent_jobs, sqlalchemy_engine
from engine.submit import Submitted, submit
from engine.waiting import wait_for_job
from engine.worker import Worker

EXIT_OK = 0
EXIT_JOB_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_ENVIRONMENT = 3

F = TypeVar("F", bound=Callable[..., Any])

out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)


class State:
    """Per-invocation settings and registry, loaded on first use."""

    def __init__(self) -> None:
        self._settings: Settings | None = None
        self._registry: Registry | None = None

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = Settings()
        return self._settings

    @property
    def registry(self) -> Registry:
        if self._registry is None:
            self._registry = Registry.load(self.settings.flow_modules)
        return self._registry


def _state() -> State:
    return click.get_current_context().ensure_object(State)


def handle_errors(fn: F) -> F:
    """Turn engine errors into a one-line message and a named exit code."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except BadInput as exc:
            err.print(f"[red]error:[/red] {exc}", markup=True, highlight=False)
            sys.exit(EXIT_BAD_INPUT)
        except EngineError as exc:
            err.print(f"[red]error:[/red] {exc}", markup=True, highlight=False)
            sys.exit(EXIT_ENVIRONMENT)

    return wrapper  # type: ignore[return-value]


def _print_json(value: dict[str, Any]) -> None:
    click.echo(json.dumps(value, default=str, sort_keys=True))


class EngineGroup(click.Group):
    """The engine's commands, plus those the loaded flow modules export as ``commands``."""

    def _extra(self, ctx: click.Context) -> dict[str, click.Command]:
        try:
            registry = ctx.ensure_object(State).registry
        except EngineError:
            return {}
        return {c.name: c for c in registry.commands if isinstance(c, click.Command) and c.name}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._extra(ctx)})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return super().get_command(ctx, cmd_name) or self._extra(ctx).get(cmd_name)


@click.group(
    cls=EngineGroup,
    context_settings={"auto_envvar_prefix": "ENGINE", "show_default": True},
)
@click.option("--log-level", default="WARNING", show_envvar=True, help="Python log level")
def main(log_level: str) -> None:
    """Workflow engine for ERP jobs: typed step graphs, leased and fenced execution."""
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # every command's log lines, botocore's DEBUG requests included, are masked
    url = os.environ.get("ENGINE_DATABASE_URL")
    secrets = SecretsFilter(SecretStr(url) if url else None)
    for handler in logging.getLogger().handlers:
        handler.addFilter(secrets)


@main.command()
@handle_errors
def migrate() -> None:
    """Apply the numbered SQL migrations not applied yet (safe to run concurrently)."""
    state = _state()
    with db.connect(state.settings, autocommit=True) as conn:
        report = migrations.apply(conn, state.settings.migration_dirs)
    for name in report.applied:
        out.print(f"applied {name}", highlight=False)
    out.print(
        f"{len(report.applied)} applied, {len(report.already)} already applied "
        f"({state.settings.masked_database_url()})",
        highlight=False,
    )


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
        # Values stay strings here: the flow's pydantic model validates them,
        # so the CLI and the Python API give the same messages.
        options.append(
            click.Option(
                [flag, name],
                required=field.is_required(),
                default=None,
                help=help_text,
                show_default=False if field.is_required() else repr(field.default),
            )
        )
    return options


def _submit_command(flow: Flow) -> click.Command:
    @handle_errors
    def run(as_json: bool, wait: bool, submitted_by: str | None, **values: Any) -> None:
        state = _state()
        given = {k: v for k, v in values.items() if v is not None}
        result = submit(
            flow,
            given,
            settings=state.settings,
            submitted_by=submitted_by or _whoami(),
        )
        if not (as_json and wait):  # --json --wait prints one object, at the end
            _report_submitted(result, as_json)
        if wait:
            status = wait_for_job(state.settings, result.job_id, progress=not as_json)
            if as_json:
                _print_json({**result.as_json(), "status": status})
            if status != JobStatus.DONE:
                sys.exit(EXIT_JOB_FAILED)

    params: list[click.Parameter] = [
        *_param_options(flow.params),
        click.Option(["--json", "as_json"], is_flag=True, help="print one JSON object"),
        click.Option(
            ["--wait"],
            is_flag=True,
            help="wait until the job ends (progress bar on a terminal); exit 1 if it failed",
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


def _whoami() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


def _report_submitted(result: Submitted, as_json: bool) -> None:
    if as_json:
        _print_json(result.as_json())
    elif result.created:
        out.print(f"submitted {result.flow} job {result.job_id} ({result.status})", highlight=False)
    else:
        out.print(
            f"{result.flow} job {result.job_id} is already {result.status} with the same "
            "parameters; returned it (not created)",
            highlight=False,
        )


main.add_command(SubmitGroup("submit", help="Submit a job of a flow: engine submit FLOW --param"))


@main.group()
def flows() -> None:
    """The registered flows."""


@flows.command("list")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
@handle_errors
def flows_list(as_json: bool) -> None:
    """List registered flows."""
    registry = _state().registry
    if as_json:
        _print_json(
            {
                "flows": [
                    {"name": f.name, "version": f.version, "description": f.description}
                    for f in registry.flows()
                ]
            }
        )
        return
    table = Table("flow", "version", "steps", "description")
    for f in registry.flows():
        table.add_row(f.name, str(f.version), str(len(f.steps)), f.description)
    out.print(table)


@flows.command("show")
@click.argument("name")
@handle_errors
def flows_show(name: str) -> None:
    """Show a flow's parameters, steps, their types and the edges."""
    click.echo(_state().registry.get(name).describe())


@main.command()
@click.argument("job_id", required=False)
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
@handle_errors
def status(job_id: str | None, as_json: bool) -> None:
    """Show a job and its step runs (or the most recent jobs)."""
    state = _state()
    engine = sqlalchemy_engine(state.settings)
    if job_id is None:
        _runs(engine, None, [], as_json)
        return
    try:
        parsed = uuid.UUID(job_id)
    except ValueError:
        raise BadInput(f"invalid job id {job_id!r}: expected a UUID") from None
    view = job_view(engine, parsed)
    if view is None:
        raise BadInput(f"no job with id {job_id}")
    if as_json:
        _print_json(_view_json(view))
    else:
        _print_view(view)


def _view_json(view: JobView) -> dict[str, Any]:
    return {
        "job": view.job.model_dump(mode="json"),
        "steps": [s.model_dump(mode="json", exclude={"output"}) for s in view.steps],
        "unpublished_messages": view.unpublished,
    }


def _print_view(view: JobView) -> None:
    job = view.job
    out.print(
        f"job {job.id}  flow {job.flow} v{job.flow_version}  status [bold]{job.status}[/bold]",
        highlight=False,
    )
    out.print(f"params {json.dumps(job.params, sort_keys=True)}", highlight=False, markup=False)
    out.print(f"created {job.created_at:%Y-%m-%d %H:%M:%S}  by {job.submitted_by or '-'}")
    table = Table("step", "key", "status", "attempts", "lease owner", "error")
    for s in view.steps:
        error = (s.error or {}).get("message", "") if s.error else ""
        table.add_row(
            s.step,
            s.fanout_key,
            s.status,
            f"{s.attempts}/{s.max_attempts}",
            s.lease_owner or "",
            str(error),
        )
    out.print(table)
    if view.unpublished:
        out.print(f"{view.unpublished} message(s) not published yet")


@main.command()
@click.option("--flow", default=None, help="only this flow")
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice([s.value for s in JobStatus]),
    help="only these statuses (repeatable)",
)
@click.option("--limit", default=50, type=click.IntRange(1, 10_000))
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
@handle_errors
def runs(flow: str | None, statuses: tuple[str, ...], limit: int, as_json: bool) -> None:
    """List recent jobs."""
    state = _state()
    if flow is not None:
        state.registry.get(flow)  # an unknown flow is bad input, not an empty list
    _runs(sqlalchemy_engine(state.settings), flow, [JobStatus(s) for s in statuses], as_json, limit)


def _runs(
    engine: Any, flow: str | None, statuses: list[JobStatus], as_json: bool, limit: int = 50
) -> None:
    jobs = recent_jobs(engine, flow=flow, statuses=statuses, limit=limit)
    if as_json:
        _print_json({"jobs": [j.model_dump(mode="json") for j in jobs]})
        return
    table = Table("job", "flow", "status", "params", "created")
    for j in jobs:
        table.add_row(
            str(j.id),
            j.flow,
            j.status,
            json.dumps(j.params, sort_keys=True),
            f"{j.created_at:%Y-%m-%d %H:%M:%S}",
        )
    out.print(table)


@main.command()
@click.option(
    "--concurrency",
    type=click.IntRange(1, 64),
    default=None,
    help="step runs at once (threads, one connection each) [env ENGINE_CONCURRENCY]",
)
@click.option(
    "--transport",
    type=click.Choice(["postgres", "sqs"]),
    default=None,
    help="how ready step runs arrive [env ENGINE_TRANSPORT]",
)
@handle_errors
def worker(concurrency: int | None, transport: str | None) -> None:
    """Run step runs until SIGTERM/SIGINT (then finish or release them; exit 0).

    Every connection of the worker takes ENGINE_WORKER_ROLE (no DDL, no UPDATE or
    DELETE of posted journal lines); admin commands keep the login's role.
    """
    state = _state()
    updates: dict[str, Any] = {
        k: v for k, v in {"concurrency": concurrency, "transport": transport}.items() if v
    }
    if state.settings.worker_role:
        updates["session_role"] = state.settings.worker_role
    settings = state.settings.model_copy(update=updates)
    w = Worker(settings, state.registry)
    w.install_signal_handlers()
    role = f"role {settings.session_role}" if settings.session_role else "the login's role"
    err.print(
        f"worker {w.worker_id}: {settings.concurrency} slot(s), transport {settings.transport}, "
        f"{role}, {settings.masked_database_url()}",
        highlight=False,
    )
    sys.exit(w.run())


def _job_id(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise BadInput(f"invalid job id {value!r}: expected a UUID") from None


@main.command()
@click.argument("job_id")
@handle_errors
def cancel(job_id: str) -> None:
    """Cancel an active job; running steps stop at their next check or commit."""
    admin.cancel(_state().settings, _job_id(job_id))
    out.print(f"job {job_id} cancelled", highlight=False)


@main.command()
@click.argument("job_id")
@handle_errors
def retry(job_id: str) -> None:
    """Resume a failed or cancelled job from its last checkpoints."""
    reopened = admin.retry_job(_state().settings, _job_id(job_id))
    out.print(
        f"job {job_id} resumed: {reopened.step_runs} step run(s) back to pending", highlight=False
    )


@main.group()
def dlq() -> None:
    """Dead letters: step runs past their attempts, and poison messages."""


@dlq.command("list")
@click.option("--limit", default=100, type=click.IntRange(1, 10_000))
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
@handle_errors
def dlq_list(limit: int, as_json: bool) -> None:
    """List open dead letters with their reasons."""
    rows = admin.dead_letters(_state().settings, limit)
    if as_json:
        _print_json({"dead_letters": rows})
        return
    table = Table("id", "source", "job", "flow", "step", "reason", "at")
    for r in rows:
        step = f"{r['step']}[{r['fanout_key']}]" if r["fanout_key"] else (r["step"] or "")
        table.add_row(
            str(r["id"]),
            r["source"],
            str(r["job_id"] or ""),
            r["flow"] or "",
            step,
            r["reason"],
            f"{r['created_at']:%Y-%m-%d %H:%M:%S}",
        )
    out.print(table)


@dlq.command("replay")
@click.argument("dead_letter_id", type=int)
@handle_errors
def dlq_replay(dead_letter_id: int) -> None:
    """Re-drive a dead letter: retry its step run's job, or send its message again."""
    out.print(admin.replay(_state().settings, dead_letter_id), highlight=False)


@dlq.command("purge")
@click.confirmation_option(prompt="Delete poison-message and replayed dead letters?")
@handle_errors
def dlq_purge() -> None:
    """Delete poison-message and replayed dead letters (open step dead letters stay)."""
    out.print(f"{admin.purge(_state().settings)} dead letter(s) deleted")


main.add_command(report)
main.add_command(reports)
main.add_command(simulate)
main.add_command(queues)
