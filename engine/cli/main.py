"""The ``engine`` group, its named exit codes, and the one place that decides them.

Exit codes: 0 success, 1 a job failed or a check found problems, 2 bad
input (the message names the bad value), 3 the environment is wrong
(database unreachable, bad setting, a refused migration). Commands raise
the engine's exceptions and return; :meth:`EngineGroup.invoke` maps them
with :func:`exit_code` and prints the one-line message. ``--json`` prints one JSON object on stdout.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from typing import Any

import click
from click.core import ParameterSource
from pydantic import ValidationError

from engine.cli import WORKER_EXTRA, extensions, worker_extra_missing
from engine.errors import BadInput, ChecksFailed, ConfigError, EngineError, JobFailed
from engine.infra import logs
from engine.infra.resources import DISTRIBUTION

__all__ = [
    "COMMANDS",
    "EXIT_BAD_INPUT",
    "EXIT_ENVIRONMENT",
    "EXIT_JOB_FAILED",
    "EXIT_OK",
    "EngineGroup",
    "exit_code",
    "main",
]

from engine.cli.exits import EXIT_BAD_INPUT, EXIT_ENVIRONMENT, EXIT_JOB_FAILED, EXIT_OK

# The engine's commands, imported only when named (issue 37: a command pays only for
# its own imports, not every other command's): name -> (module, attribute, the
# first sentence of its help, which `engine --help` shows without importing it;
# tests/unit/test_cli_lazy.py checks each against the command's own help).
COMMANDS: dict[str, tuple[str, str, str]] = {
    "alerts": (
        "engine.cli.alerts",
        "alerts",
        "Alerts: one per dead letter (per orphaned flow version, per schedule time that did "
        "not submit its job), delivered to every sink.",
    ),
    "audit": (
        "engine.cli.audit",
        "audit",
        "List the audit trail, newest first: who did what, on what, when and why.",
    ),
    "cancel": (
        "engine.cli.jobs",
        "cancel",
        "Cancel an active job; running steps stop at their next check or commit.",
    ),
    "console": (
        "engine.cli.console",
        "console",
        "Serve the web console: runs, a live job page, approvals, dead letters, schedules, "
        "workers.",
    ),
    "db": (
        "engine.cli.database",
        "db",
        "The embedded PostgreSQL (ENGINE_PGDATA), used when ENGINE_DATABASE_URL is unset.",
    ),
    "dlq": (
        "engine.cli.dlq",
        "dlq",
        "Dead letters: step runs past their attempts, and poison messages.",
    ),
    "flows": ("engine.cli.flows", "flows", "The registered flows."),
    "migrate": (
        "engine.cli.migrate",
        "migrate",
        "Apply the numbered SQL migrations not applied yet (safe to run concurrently).",
    ),
    "pin": (
        "engine.cli.retention",
        "pin",
        "Keep a job from being pruned until a date (audited).",
    ),
    "prune": (
        "engine.cli.retention",
        "prune_command",
        "Retire finished jobs past their retention: a summary and the report stay.",
    ),
    "queues": ("engine.cli.queues", "queues", "SQS queues of the sqs transport."),
    "report": (
        "engine.cli.reports",
        "report",
        "Render one job's HTML report and print where it went (a path or an s3:// URI).",
    ),
    "reports": (
        "engine.cli.reports",
        "reports",
        "HTML run reports: build them all, or serve them.",
    ),
    "retry": (
        "engine.cli.jobs",
        "retry",
        "Resume a failed or cancelled job from its last checkpoints, with its children.",
    ),
    "runs": (
        "engine.cli.runs",
        "runs",
        "List recent jobs, newest first (the console's runs search).",
    ),
    "schedule": (
        "engine.cli.schedules",
        "schedule",
        "Schedules: a flow submitted on a cron calendar; any worker fires each time once.",
    ),
    "signal": (
        "engine.cli.signals",
        "signal",
        "Send signal NAME to an active job: the steps waiting for it resume.",
    ),
    "simulate": (
        "engine.cli.simulate",
        "simulate",
        "Run real workers with injected faults; check the oracles; render a replay page.",
    ),
    "status": (
        "engine.cli.status",
        "status",
        "Show a job and its step runs (or the most recent jobs).",
    ),
    "submit": (
        "engine.cli.jobs",
        "submit_group",
        "Submit a job of a flow: engine submit FLOW --param",
    ),
    "users": (
        "engine.cli.console",
        "users",
        "The console's users: add, list, remove, change a password or a role.",
    ),
    "worker": (
        "engine.cli.worker",
        "worker",
        "Run step runs until SIGTERM/SIGINT (then finish or release them; exit 0).",
    ),
    "workers": (
        "engine.cli.flows",
        "workers",
        "List live workers (seen within ENGINE_WORKER_LIVE_S) and the flow versions each runs.",
    ),
}


def exit_code(exc: BaseException) -> int | None:
    """The exit code ``exc`` stands for; ``None`` for a bug, which keeps its traceback."""
    if isinstance(exc, JobFailed | ChecksFailed):
        return EXIT_JOB_FAILED
    if isinstance(exc, BadInput):
        return EXIT_BAD_INPUT
    if isinstance(exc, EngineError) or _is_bad_setting(exc) or _is_bad_environment_option(exc):
        return EXIT_ENVIRONMENT
    return None


def _is_bad_setting(exc: BaseException) -> bool:
    # a settings model's (Settings, SqsSettings, a flow package's own): an ENGINE_* value is bad
    if not isinstance(exc, ValidationError):
        return False
    from engine.infra.bad_settings import bad_setting_message  # pydantic_settings: on error only

    return bad_setting_message(exc) is not None


def _is_bad_environment_option(exc: BaseException) -> bool:
    # an option's bad value read from its ENGINE_* variable (ENGINE_LOG_LEVEL=loud):
    # the environment is wrong, not the command line (click would exit 2)
    if not isinstance(exc, click.BadParameter) or exc.ctx is None or exc.param is None:
        return False
    name = exc.param.name
    return name is not None and exc.ctx.get_parameter_source(name) is ParameterSource.ENVIRONMENT


def _message(exc: BaseException) -> str:
    """The one line printed for ``exc``: a bad setting names its variable, not the field."""
    if isinstance(exc, ValidationError):
        from engine.infra.bad_settings import bad_setting_message

        return f"bad setting {bad_setting_message(exc)}"
    if isinstance(exc, click.BadParameter) and exc.ctx is not None and exc.param is not None:
        return f"bad setting {_envvar(exc.ctx, exc.param)}: {exc.message}"
    return str(exc)


def _envvar(ctx: click.Context, param: click.Parameter) -> str:
    """The variable an option's value was read from: its own, else the auto-prefixed one."""
    own = [param.envvar] if isinstance(param.envvar, str) else list(param.envvar or [])
    auto = f"{ctx.auto_envvar_prefix}_{(param.name or '').upper()}"
    candidates = [*own, auto] if ctx.auto_envvar_prefix else own
    return next((v for v in candidates if os.environ.get(v)), candidates[0])


def _exit(exc: Exception, code: int) -> click.exceptions.Exit:
    """Print ``exc``'s one line (unless the command showed how its job ended); the exit."""
    if not isinstance(exc, JobFailed):
        click.echo(f"{click.style('error:', fg='red')} {_message(exc)}", err=True)
    return click.exceptions.Exit(code)


class EngineGroup(click.Group):
    """The engine's commands, plus those the loaded flow modules export as ``commands``.

    Every command, an extension's too, runs inside :meth:`invoke`: the one place
    where an exception or a command's own status becomes the process's exit code.
    """

    def __init__(
        self,
        name: str | None = None,
        commands: Any = None,
        *,
        lazy: Mapping[str, tuple[str, str, str]] | None = None,
        **attrs: Any,
    ) -> None:
        super().__init__(name, commands, **attrs)
        self.lazy: Mapping[str, tuple[str, str, str]] = lazy or {}
        """Commands imported when first named: name -> (module, attribute, summary for --help)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            status = super().invoke(ctx)
        except Exception as exc:
            code = exit_code(exc)
            if code is None:
                raise
            raise _exit(exc, code) from None
        if isinstance(status, int):  # a command that reports a status (the worker) returns it
            raise click.exceptions.Exit(status)
        return status

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        # the group's own options are parsed here, before invoke (ENGINE_LOG_LEVEL=loud)
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.BadParameter as exc:
            if not _is_bad_environment_option(exc):
                raise
            raise _exit(exc, EXIT_ENVIRONMENT) from None

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, self._own_options_first(ctx, args))

    def _own_options_first(self, ctx: click.Context, args: list[str]) -> list[str]:
        """``args`` with the group's options moved before the subcommand, wherever they were.

        ``engine runs --log-level debug`` then means ``engine --log-level debug runs``:
        a global option is one whatever its place. Arguments after ``--`` stay where
        they are, and so does an option of the same name that the subcommand has
        itself (a flow parameter named ``version`` is ``submit FLOW --version``).
        """
        theirs = self._subcommand_options(ctx, args)
        takes_value: dict[str, bool] = {}
        for param in self.params:
            if isinstance(param, click.Option):
                for name in (*param.opts, *param.secondary_opts):
                    if name not in theirs:
                        takes_value[name] = not (param.is_flag or param.count)
        own: list[str] = []
        rest: list[str] = []
        i = 0
        while i < len(args):
            arg = args[i]
            if arg == "--":
                rest += args[i:]
                break
            name, eq, _ = arg.partition("=")
            if name in takes_value:
                own.append(arg)
                if takes_value[name] and not eq:
                    if i + 1 == len(args):  # before the subcommand, it would take its name
                        raise click.UsageError(f"Option '{name}' requires an argument.", ctx)
                    own.append(args[i + 1])
                    i += 1
            else:
                rest.append(arg)
            i += 1
        return own + rest

    def _subcommand_options(self, ctx: click.Context, args: list[str]) -> set[str]:
        """The option names of the (nested) subcommands ``args`` name."""
        names: set[str] = set()
        group: click.Group = self
        for arg in args:
            if arg == "--":
                break
            if arg.startswith("-"):
                continue
            try:
                command = group.get_command(ctx, arg)
            except Exception:  # a broken flow module: the subcommand's own parsing says so
                break
            if command is None:  # an option's value, or a name the group will refuse
                continue
            for param in command.params:
                if isinstance(param, click.Option):
                    names.update(param.opts, param.secondary_opts)
            if not isinstance(command, click.Group):
                break
            group = command
        return names

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy, *extensions.commands(ctx)})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return (
            super().get_command(ctx, cmd_name)
            or self._import(cmd_name)
            or extensions.commands(ctx).get(cmd_name)
        )

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except click.exceptions.NoSuchCommand as exc:
            # click suggests among the commands imported so far; these are all of them
            raise click.exceptions.NoSuchCommand(
                exc.command_name, possibilities=self.list_commands(ctx), ctx=ctx
            ) from None

    def _import(self, name: str) -> click.Command | None:
        """The engine's command ``name``, its module imported now (and kept)."""
        if name not in self.lazy:
            return None
        module, attribute, _ = self.lazy[name]
        try:
            command = getattr(importlib.import_module(module), attribute)
        except ModuleNotFoundError as exc:
            if (exc.name or "").partition(".")[0] not in WORKER_EXTRA:
                raise
            raise ConfigError(worker_extra_missing(exc.name or "")) from exc
        if not isinstance(command, click.Command):
            raise TypeError(f"{module}.{attribute} is not a click command")
        self.add_command(command, name)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """``engine --help``'s list: a command not imported yet shows its help from the table."""
        shown: list[tuple[str, str | click.Command]] = []
        for name in self.list_commands(ctx):
            loaded = super().get_command(ctx, name) or extensions.commands(ctx).get(name)
            if loaded is None and name in self.lazy:
                shown.append((name, self.lazy[name][2]))
            elif loaded is not None and not loaded.hidden:
                shown.append((name, loaded))
        if not shown:
            return
        limit = formatter.width - 6 - max(len(name) for name, _ in shown)
        rows: list[tuple[str, str]] = []
        for name, command in shown:
            if isinstance(command, str):
                # click's own shortening, the same as the imported command's
                rows.append((name, click.Command(name, help=command).get_short_help_str(limit)))
            else:
                rows.append((name, command.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(
    cls=EngineGroup,
    lazy=COMMANDS,
    context_settings={"auto_envvar_prefix": "ENGINE", "show_default": True},
)
@click.option(
    "--log-level",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], case_sensitive=False),
    default="WARNING",
    envvar="ENGINE_LOG_LEVEL",  # named, so that a bad value's message names the variable
    show_envvar=True,
    help="Python log level",
)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    envvar="ENGINE_LOG_FORMAT",
    show_envvar=True,
    help="readable lines, or one JSON object per line (job, flow, step, attempt, worker)",
)
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=lambda ctx, _param, value: _print_version(ctx) if value else None,
    help="print the installed version (erp-engine) and exit",
)
def main(log_level: str, log_format: logs.LogFormat) -> None:
    """Workflow engine for ERP jobs: typed step graphs, leased and fenced execution."""
    # every command's log lines, botocore's DEBUG requests included, are masked
    logs.configure(log_level, log_format, os.environ.get("ENGINE_DATABASE_URL"))


def _print_version(ctx: click.Context) -> None:
    from importlib import metadata

    try:
        version = metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        version = f"unknown ({DISTRIBUTION} is not installed: run from a source tree)"
    click.echo(f"engine {version}")
    ctx.exit()
