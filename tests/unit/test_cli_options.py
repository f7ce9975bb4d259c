"""The command line without friction (issue 28): version, global options anywhere,
typed options, and bad ``ENGINE_*`` values named by their variable.

In process through click's runner; nothing here reaches a database (each
command fails, prints or parses before it would connect).
"""

from __future__ import annotations

from importlib import metadata
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result
from pydantic import BaseModel, Field, SecretStr, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from engine.cli.args import option_type
from engine.cli.main import EXIT_BAD_INPUT, EXIT_ENVIRONMENT, EXIT_OK, main
from engine.infra import logs
from engine.infra.bad_settings import bad_setting_message
from engine.infra.resources import DISTRIBUTION


def invoke(*args: str, **env: str | None) -> Result:
    # a closed port: a command that got as far as connecting would fail with exit 3
    base: dict[str, str | None] = {"ENGINE_DATABASE_URL": "postgresql://x@127.0.0.1:1/x"}
    return CliRunner().invoke(main, list(args), env={**base, **env})


def test_cli__version_is_the_installed_distributions() -> None:
    result = invoke("--version")
    assert result.exit_code == EXIT_OK, result.output
    assert result.stdout == f"engine {metadata.version(DISTRIBUTION)}\n"


@pytest.fixture
def configured(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """The (level, format) each invocation configured logging with."""
    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(logs, "configure", lambda *a: calls.append(a[:2]))
    return calls


def test_cli__global_options_are_taken_after_the_subcommand_too(
    configured: list[tuple[Any, ...]],
) -> None:
    result = invoke("flows", "list", "--log-level", "debug", "--log-format=json", "--json")
    assert result.exit_code == EXIT_OK, result.output
    assert configured == [("DEBUG", "json")]
    assert '"flows"' in result.stdout  # the subcommand kept its own --json

    nested = invoke("submit", "example", "--log-level=error", "--help")
    assert nested.exit_code == EXIT_OK, nested.output
    assert configured[-1] == ("ERROR", "text")

    assert invoke("flows", "list", "--version").stdout.startswith("engine ")


def test_cli__a_global_option_after_the_subcommand_is_still_checked(
    configured: list[tuple[Any, ...]],
) -> None:
    bad = invoke("flows", "list", "--log-level", "loud")
    assert bad.exit_code == EXIT_BAD_INPUT
    assert "'loud' is not one of" in bad.stderr
    missing = invoke("flows", "list", "--log-level")
    assert missing.exit_code == EXIT_BAD_INPUT
    assert "'--log-level' requires an argument" in missing.stderr
    assert configured == []


def test_cli__arguments_after_a_double_dash_are_left_to_the_subcommand(
    configured: list[tuple[Any, ...]],
) -> None:
    result = invoke("signal", "--", "--log-level", "approve")
    assert result.exit_code == EXIT_BAD_INPUT
    assert "invalid job id '--log-level'" in result.stderr  # an argument, not the option
    assert configured == [("WARNING", "text")]


def test_cli__a_subcommand_keeps_its_own_option_of_the_same_name(
    monkeypatch: pytest.MonkeyPatch, configured: list[tuple[Any, ...]]
) -> None:
    # as a flow parameter named `version` would be: `engine submit FLOW --version 2`
    @click.command("own-version")
    @click.option("--version", "version_given")
    def own_version(version_given: str) -> None:
        click.echo(f"given {version_given}")

    monkeypatch.setitem(main.commands, "own-version", own_version)
    result = invoke("own-version", "--version", "2", "--log-level", "info")
    assert result.exit_code == EXIT_OK, result.output
    assert result.stdout == "given 2\n"
    assert configured == [("INFO", "text")]


def test_cli__a_bad_option_value_in_the_environment_exits_3_naming_the_variable() -> None:
    result = invoke("flows", "list", ENGINE_LOG_LEVEL="loud")
    assert result.exit_code == EXIT_ENVIRONMENT
    assert result.stderr.startswith("error: bad setting ENGINE_LOG_LEVEL: 'loud' is not one of")
    assert len(result.stderr.splitlines()) == 1

    # a subcommand's option read from its variable (the dead-letter queue's redrive)
    queues = invoke("queues", "create", ENGINE_SQS_MAX_RECEIVE_COUNT="often")
    assert queues.exit_code == EXIT_ENVIRONMENT
    assert "bad setting ENGINE_SQS_MAX_RECEIVE_COUNT: 'often' is not" in queues.stderr

    # the same value on the command line is bad input
    given = invoke("flows", "list", "--log-level", "loud")
    assert given.exit_code == EXIT_BAD_INPUT


def test_cli__integer_flow_parameters_are_typed_options() -> None:
    shown = invoke("submit", "example", "--help")
    assert shown.exit_code == EXIT_OK, shown.output
    assert "--chunks INTEGER" in shown.stdout
    assert "--period TEXT" in shown.stdout
    assert "--approve-rejects-over INTEGER" in invoke("submit", "close", "--help").stdout

    refused = invoke("submit", "example", "--period", "2026-11", "--chunks", "three")
    assert refused.exit_code == EXIT_BAD_INPUT
    assert "'three' is not a valid integer" in refused.stderr
    refused = invoke("submit", "posting", "--period", "2026-11", "--approve-rejects-over", "1.5")
    assert refused.exit_code == EXIT_BAD_INPUT
    assert "'1.5' is not a valid integer" in refused.stderr


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        (int, click.INT),
        (int | None, click.INT),
        (float, click.FLOAT),
        (str, click.STRING),
        (str | None, click.STRING),
        (bool | int, click.STRING),
    ],
)
def test_option_type__numbers_are_typed_the_rest_text(annotation: Any, expected: Any) -> None:
    assert option_type(annotation) is expected


def test_cli__a_bad_engine_setting_is_one_line_naming_the_variable() -> None:
    result = invoke("runs", ENGINE_LEASE_S="abc")
    assert result.exit_code == EXIT_ENVIRONMENT
    assert result.stderr == "error: bad setting ENGINE_LEASE_S='abc': expected a number\n"

    several = invoke("status", ENGINE_MAX_ATTEMPTS="0", ENGINE_TRANSPORT="kafka")
    assert several.exit_code == EXIT_ENVIRONMENT
    assert several.stderr == (
        "error: bad setting ENGINE_MAX_ATTEMPTS='0': expected a number >= 1; "
        "ENGINE_TRANSPORT='kafka': expected 'postgres' or 'sqs'\n"
    )
    listed = invoke("runs", ENGINE_ALERT_SINKS="log,smtp")
    expected = "ENGINE_ALERT_SINKS (item 'smtp'): expected 'log', 'sns' or 'webhook'"
    assert expected in listed.stderr


class _SecretiveSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TEST_CLI_")
    token: SecretStr = Field(default=SecretStr("unset-token"), min_length=8)
    retries: int = 1


def test_bad_setting_message__masks_a_secret_and_ignores_other_models(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TEST_CLI_TOKEN", "hunter2")
    monkeypatch.setenv("TEST_CLI_RETRIES", "many")
    with pytest.raises(ValidationError) as caught:
        _SecretiveSettings()
    message = bad_setting_message(caught.value)
    assert message is not None
    assert "hunter2" not in message
    assert "TEST_CLI_TOKEN='***': " in message
    assert "TEST_CLI_RETRIES='many': expected a whole number" in message

    class NotSettings(BaseModel):  # a flow's parameters, say: not a bad setting
        n: int

    with pytest.raises(ValidationError) as other:
        NotSettings.model_validate({"n": "x"})
    assert bad_setting_message(other.value) is None
