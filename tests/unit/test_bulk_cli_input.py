"""Bad input to the bulk forms of ``engine retry|cancel|dlq`` exits 2 naming the bad value,
before any connection (the database URL here is a closed port: reaching it would exit 3)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from engine.cli.main import EXIT_BAD_INPUT, main


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("retry", "--flow", "example"), "need --dry-run"),
        (("cancel",), "give JOB ID, or filters with --dry-run"),
        (("retry", "--state", "done", "--dry-run"), "bad state 'done' for retry"),
        (("cancel", "--since", "yesterday", "--dry-run"), "bad --since 'yesterday'"),
        (("cancel", "--since", "2h", "--until", "3h", "--dry-run"), "bad time window"),
        (("retry", "--apply", "nope", "--reason", "r"), "bad preview id 'nope'"),
        (("retry", "--apply", "0" * 32, "--flow", "x", "--reason", "r"), "give no filter"),
        (("retry", "0123abcd", "--dry-run"), "give either JOB ID or a bulk form"),
        (("dlq", "replay", "--tag", "x", "--dry-run"), "bad tag 'x'"),
        (("dlq", "purge", "--state", "failed", "--dry-run"), "one of open, replayed"),
    ],
)
def test_bulk_cli__bad_input_exits_2_naming_it(args: tuple[str, ...], said: str) -> None:
    env = {"ENGINE_DATABASE_URL": "postgresql://x@127.0.0.1:1/x"}
    result = CliRunner().invoke(main, list(args), env=env)
    assert result.exit_code == EXIT_BAD_INPUT, result.output
    assert said in result.output
