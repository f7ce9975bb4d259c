"""The ``engine`` group, its named exit codes, and the one place that decides them.

Exit codes: 0 success, 1 a job failed or a check found problems, 2 bad
input (the message names the bad value), 3 the environment is wrong
(database unreachable, bad setting, a refused migration). Commands raise
the engine's exceptions and return; :meth:`EngineGroup.invoke` maps them
with :func:`exit_code` and prints the one-line message. ``--json`` prints one JSON object on stdout.
"""

from __future__ import annotations

import os
from importlib import metadata
from typing import Any

import click
from click.core import ParameterSource
from pydantic import ValidationError

from engine.cli import extensions
from engine.cli.alerts import alerts
from engine.cli.audit import audit
from engine.cli.console import console, users
from engine.cli.database import db
from engine.cli.dlq import dlq
from engine.cli.flows import flows, workers
from engine.cli.jobs import cancel, retry, status, submit_group
from engine.cli.migrate import migrate
from engine.cli.queues import queues
from engine.cli.reports import report, reports
from engine.cli.retention import pin, prune_command
from engine.cli.runs import runs
from engine.cli.schedules import schedule
from engine.cli.signals import signal
from engine.cli.simulate import simulate
from engine.cli.worker import worker
from engine.errors import BadInput, ChecksFailed, EngineError, JobFailed
from engine.infra import logs
from engine.infra.bad_settings import bad_setting_message
from engine.infra.resources import DISTRIBUTION

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_ENVIRONMENT",
    "EXIT_JOB_FAILED",
    "EXIT_OK",
    "EngineGroup",
    "exit_code",
    "main",
]

from engine.cli.exits import EXIT_BAD_INPUT, EXIT_ENVIRONMENT, EXIT_JOB_FAILED, EXIT_OK


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
    return isinstance(exc, ValidationError) and bad_setting_message(exc) is not None


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
        return sorted({*super().list_commands(ctx), *extensions.commands(ctx)})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return super().get_command(ctx, cmd_name) or extensions.commands(ctx).get(cmd_name)


@click.group(
    cls=EngineGroup,
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
    try:
        version = metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        version = f"unknown ({DISTRIBUTION} is not installed: run from a source tree)"
    click.echo(f"engine {version}")
    ctx.exit()


for command in (
    alerts,
    audit,
    cancel,
    console,
    db,
    dlq,
    flows,
    migrate,
    pin,
    prune_command,
    queues,
    report,
    reports,
    retry,
    runs,
    schedule,
    signal,
    simulate,
    status,
    submit_group,
    users,
    worker,
    workers,
):
    main.add_command(command)
