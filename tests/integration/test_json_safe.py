"""Values JSON cannot carry are refused on every path into the database, naming the field.

NaN and the infinities (a float, a float subclass, a ``Decimal``), a NUL
character and a lone surrogate: in a step's output typed ``dict`` or ``Any``
(where pydantic's JSON dump writes ``null`` for NaN), a job's parameters, a
child job's, a wait's summary, a tag, a signal's data, a schedule's
parameters (from Python and from ``engine schedule add``), an audit entry's
detail and a lookup of active jobs. A caller gets :class:`BadInput` (the CLI
exits 2) before anything is written; a step fails, naming the field, never
done with ``null``. Flows: ``tests/support/jsonflows.py``.
"""

from __future__ import annotations

import math
import subprocess
import uuid
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from cli_zygote import run_engine
from harness import fast_settings, run_of, thread_worker, wait_job_ended, worker_env
from jsonflows import LOOSE_FIELDS, SUMMARY_FIELDS

from engine import BadInput, InvalidParameters, add_schedule, signal, submit
from engine.config import Settings
from engine.errors import StoreError
from engine.flow.registry import Registry
from engine.jobs.admin import cancel
from engine.jobs.audit import record_action
from engine.jobs.lookup import active_jobs

MODULES = ["testflows", "jsonflows"]
REGISTRY = Registry.load(MODULES)
# the "why" every refusal of a non-finite number ends with
NO_NAN = "JSON cannot carry it (JSON has no NaN or Infinity: use null, a finite number or a string)"


@pytest.fixture
def fast(settings: Settings) -> Settings:
    return fast_settings(settings, flow_modules=MODULES)


def engine(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m engine ARGS`` with the JSON test flows, on the test's database."""
    return run_engine(args, env={**worker_env(settings, flow_modules=MODULES), "COLUMNS": "250"})


def count(conn: psycopg.Connection[Any], table: str) -> int:
    row = conn.execute(f"SELECT count(*) AS n FROM {table}").fetchone()
    assert row is not None
    return int(row["n"])


def job(settings: Settings, flow: str, **params: Any) -> uuid.UUID:
    return submit(flow, params, settings=settings, registry=REGISTRY).job_id


@pytest.mark.parametrize("kind", sorted(LOOSE_FIELDS))
def test_output__a_dict_or_any_field_json_cannot_carry_fails_the_step_never_null(
    fast: Settings, conn: psycopg.Connection[Any], kind: str
) -> None:
    job_id = job(fast, "measure_loose", bad=kind)
    with thread_worker(fast, REGISTRY):
        assert wait_job_ended(conn, job_id) == "failed"
    run = run_of(conn, job_id, "measure")
    assert (run["status"], run["attempts"], run["output"]) == ("dead", 2, None), (
        "retried under its policy, then dead: never done with null"
    )
    message = run["error"]["message"]
    assert run["error"]["type"] == "OutputRefused"
    assert message.startswith(f"output field {LOOSE_FIELDS[kind]!r} is "), message
    assert "JSON cannot carry it" in message
    [dead] = conn.execute("SELECT reason FROM engine_dead_letters").fetchall()
    assert dead["reason"].startswith(f"OutputRefused: output field {LOOSE_FIELDS[kind]!r}")


def test_output__a_good_loose_output_is_stored_as_it_was(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    job_id = job(fast, "measure_loose")
    with thread_worker(fast, REGISTRY):
        assert wait_job_ended(conn, job_id) == "done"
    assert run_of(conn, job_id, "measure")["output"] == {
        "totals": {"ratio": 0.5},
        "extra": {"lines": [{"cost": 1.0}, {"cost": 2.5}]},
    }


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"options": {"r": float("nan")}}, f"params field 'options.r' is NaN: {NO_NAN}"),
        (
            {"options": {"lines": [1.0, {"cost": float("inf")}]}},
            f"params field 'options.lines[1].cost' is Infinity: {NO_NAN}",
        ),
        (
            {"options": {"r": Decimal("-Infinity")}},
            f"params field 'options.r' is Decimal('-Infinity'): {NO_NAN}",
        ),
        ({"options": {"r": [Decimal("NaN")]}}, "params field 'options.r[0]' is Decimal('NaN')"),
        ({"options": {"note": "a\x00"}}, "params field 'options.note' contains a NUL character"),
    ],
)
def test_submit__loose_params_json_cannot_carry_are_refused_naming_the_field(
    fast: Settings, conn: psycopg.Connection[Any], params: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidParameters) as refused:
        submit("measure", params, settings=fast, registry=REGISTRY)
    assert str(refused.value).startswith(f"invalid parameters for flow 'measure': {message}")
    assert count(conn, "engine_jobs") == 0


def test_submit__cli_option_nan_exits_2_naming_the_field(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    done = engine(settings, "submit", "measure", "--ratio", "nan")
    assert done.returncode == 2, done.stderr
    assert "params field 'ratio' is NaN" in done.stderr
    assert count(conn, "engine_jobs") == 0


def test_child__params_json_cannot_carry_fail_the_parent_step_and_submit_nothing(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    job_id = job(fast, "spawn_bad")
    with thread_worker(fast, REGISTRY):
        assert wait_job_ended(conn, job_id) == "failed"
    run = run_of(conn, job_id, "spawn")
    assert (run["status"], run["output"]) == ("dead", None)
    assert run["error"]["type"] == "InvalidParameters"
    assert "params field 'options.r' is NaN" in run["error"]["message"]
    assert count(conn, "engine_jobs") == 1, "no child job was written"


def test_tag__a_value_json_cannot_carry_is_bad_input_naming_it(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    job_id = job(fast, "tag_bad")
    with thread_worker(fast, REGISTRY):
        assert wait_job_ended(conn, job_id) == "failed"
    run = run_of(conn, job_id, "tag")
    assert run["error"]["type"] == "JsonRefused", run["error"]
    assert run["error"]["message"].startswith(
        "tag 'document' value 2 contains a NUL character ('\\x00' at index 3)"
    ), run["error"]["message"]
    assert count(conn, "engine_job_tags") == 0


@pytest.mark.parametrize("kind", sorted(SUMMARY_FIELDS))
def test_wait__a_summary_json_cannot_carry_fails_the_step_naming_the_field(
    fast: Settings, conn: psycopg.Connection[Any], kind: str
) -> None:
    job_id = job(fast, "wait_bad", bad=kind)
    with thread_worker(fast, REGISTRY):
        assert wait_job_ended(conn, job_id) == "failed"
    run = run_of(conn, job_id, "gate")
    assert (run["status"], run["wait_summary"]) == ("dead", None)
    assert run["error"]["type"] == "OutputRefused"
    assert run["error"]["message"].startswith(f"wait summary field {SUMMARY_FIELDS[kind]!r} is "), (
        run["error"]["message"]
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"totals": {"ratio": math.nan}},
            f"signal 'go' data field 'totals.ratio' is NaN: {NO_NAN}",
        ),
        ([1, math.inf], f"signal 'go' data field '[1]' is Infinity: {NO_NAN}"),
        ({"amount": Decimal("NaN")}, "signal 'go' data field 'amount' is Decimal('NaN')"),
        ({"note": "ok\x00"}, "signal 'go' data field 'note' contains a NUL character"),
        ({"note": "\udc80"}, "signal 'go' data field 'note' contains a surrogate code point"),
    ],
)
def test_signal__data_json_cannot_carry_is_bad_input_naming_the_field(
    fast: Settings, conn: psycopg.Connection[Any], data: Any, message: str
) -> None:
    job_id = job(fast, "wait_bad")
    with pytest.raises(BadInput) as refused:
        signal(job_id, "go", data, settings=fast, sent_by="acct")
    assert not isinstance(refused.value, StoreError)
    assert str(refused.value).startswith(message), str(refused.value)
    assert count(conn, "engine_signals") == 0


def test_signal__cli_data_with_nan_exits_2_naming_the_field(
    fast: Settings, settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    job_id = job(fast, "wait_bad")
    done = engine(settings, "signal", str(job_id), "go", "--data", '{"totals": {"ratio": NaN}}')
    assert done.returncode == 2, done.stderr
    assert "signal 'go' data field 'totals.ratio' is NaN" in done.stderr
    assert count(conn, "engine_signals") == 0


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"ratio": math.nan}, "params field 'ratio' is NaN"),
        ({"ratio": "-inf"}, "params field 'ratio' is -Infinity"),
        ({"options": {"r": math.inf}}, "params field 'options.r' is Infinity"),
        ({"options": {"r": Decimal("NaN")}}, "params field 'options.r' is Decimal('NaN')"),
        ({"bad": "x\x00"}, "params field 'bad' contains a NUL character"),
    ],
)
def test_schedule__params_json_cannot_carry_are_bad_input_naming_the_field(
    fast: Settings, conn: psycopg.Connection[Any], params: dict[str, Any], message: str
) -> None:
    with pytest.raises(BadInput) as refused:
        add_schedule(
            "nightly", "measure", "0 2 * * *", params=params, settings=fast, registry=REGISTRY
        )
    assert not isinstance(refused.value, StoreError)
    assert message in str(refused.value), str(refused.value)
    assert count(conn, "engine_schedules") == 0
    assert count(conn, "engine_audit") == 0


@pytest.mark.parametrize("value", ["NaN", "inf", "-Infinity"])
def test_schedule__cli_param_nan_exits_2_naming_the_field(
    settings: Settings, conn: psycopg.Connection[Any], value: str
) -> None:
    done = engine(
        settings, "schedule", "add", "nightly", "--flow", "measure", "--cron", "0 2 * * *",
        "--param", f"ratio={value}",
    )  # fmt: skip
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "params field 'ratio' is " in done.stderr, done.stderr
    assert count(conn, "engine_schedules") == 0


def test_audit__detail_json_cannot_carry_is_bad_input_naming_the_field(
    conn: psycopg.Connection[Any],
) -> None:
    with pytest.raises(BadInput, match=r"audit detail field 'totals\.ratio' is NaN"):
        record_action(conn, "close", "period", "2026-11", detail={"totals": {"ratio": math.nan}})
    with pytest.raises(BadInput, match="audit reason contains a NUL character"):
        record_action(conn, "close", "period", "2026-11", reason="late\x00")
    assert count(conn, "engine_audit") == 0


def test_active_jobs__params_json_cannot_carry_are_bad_input_naming_the_field(
    conn: psycopg.Connection[Any],
) -> None:
    with pytest.raises(BadInput, match=r"params field 'ratio' is NaN"):
        active_jobs(conn, flows=["measure"], params={"ratio": math.nan})
    # the connection's transaction was not aborted by a refused statement
    assert active_jobs(conn, flows=["measure"], params={"ratio": 0.5}) == []


def test_submit__a_submitter_with_a_nul_is_bad_input_naming_it(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    with pytest.raises(BadInput, match="submitter contains a NUL character"):
        submit("measure", {}, settings=fast, registry=REGISTRY, submitted_by="acct\x00")
    assert count(conn, "engine_jobs") == 0


def test_cancel__a_reason_with_a_nul_is_bad_input_and_changes_nothing(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    job_id = job(fast, "measure")
    with pytest.raises(BadInput, match="cancel reason contains a NUL character"):
        cancel(fast, job_id, "late\x00", actor="acct")
    assert conn.execute("SELECT status FROM engine_jobs").fetchone() == {"status": "pending"}
    assert count(conn, "engine_audit") == 0
