"""Outputs JSON cannot carry are refused at the checkpoint, on real PostgreSQL.

A step that returns NaN, an infinity, a NUL character or a lone surrogate
fails itself, as if it had raised, with a message naming the field: its
output never becomes ``null`` and never takes a neighbour down, whether it
runs alone, in a round of pure steps (one message for their checkpoints,
:mod:`engine.runner.rounds`) or in a group commit (one COMMIT,
:mod:`engine.runner.group`). It is retried under its policy: a step that is
not deterministic may return a finite value next time. A job's parameters
are refused the same way at submit, as the caller's bad input. Flows:
``tests/support/jsonflows.py``.
"""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import psycopg
import pytest
from harness import fast_settings, run_of, thread_worker, wait_job_ended
from jsonflows import FIELDS
from test_group_commit import effects, group_order, one_runner, receive_all

from engine import InvalidParameters, submit
from engine.config import Settings
from engine.flow.registry import Registry
from engine.runner.attempt import Attempt
from engine.runner.execution import Executor

REGISTRY = Registry.load(["testflows", "jsonflows"])
KINDS = ["nan", "inf", "nul", "surrogate"]
WHAT = {"nan": "NaN", "inf": "Infinity", "nul": "NUL", "surrogate": "surrogate"}


@pytest.fixture
def fast(settings: Settings) -> Settings:
    # a window no loaded machine reaches: the groups here end with their rounds
    return fast_settings(settings, flow_modules=["testflows", "jsonflows"], group_commit_ms=5000)


def job(settings: Settings, flow: str, n: int, bad: str = "", bad_times: int = 1_000) -> uuid.UUID:
    params = {"n": n, "bad": bad, "bad_times": bad_times}
    return submit(flow, params, settings=settings, registry=REGISTRY).job_id


def refusal(kind: str) -> str:
    """The start of the message a refused output of ``kind`` fails its step with."""
    return f"output field {FIELDS[kind]!r} "


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Counter[uuid.UUID]:
    """How many times each job's step was called."""
    counted: Counter[uuid.UUID] = Counter()
    compute = Executor.compute

    def counting(self: Executor, attempt: Attempt) -> Any:
        counted[attempt.claimed.job_id] += 1
        return compute(self, attempt)

    monkeypatch.setattr(Executor, "compute", counting)
    return counted


@pytest.mark.parametrize("kind", KINDS)
def test_output__json_cannot_carry_it_fails_the_step_naming_the_field(
    fast: Settings, conn: psycopg.Connection[Any], kind: str
) -> None:
    job_id = job(fast, "measure", 1, bad=kind)
    with thread_worker(fast, REGISTRY):
        assert wait_job_ended(conn, job_id) == "failed"
    run = run_of(conn, job_id, "measure")
    assert (run["status"], run["attempts"], run["output"]) == ("dead", 2, None), (
        "retried under its policy (two attempts), then dead; nothing stored as null"
    )
    message = run["error"]["message"]
    assert message.startswith(refusal(kind)), message
    assert WHAT[kind] in message
    assert "JSON cannot carry it" in message
    assert run["error"]["type"] == "OutputRefused"
    retried = conn.execute(
        "SELECT detail FROM engine_history WHERE job_id = %s AND kind = 'retried'", (job_id,)
    ).fetchall()
    assert [r["detail"]["error"] for r in retried] == [message]
    dead = conn.execute("SELECT reason FROM engine_dead_letters").fetchall()
    assert [d["reason"].startswith(f"OutputRefused: {refusal(kind)}") for d in dead] == [True]


def test_output__refused_once_then_finite_is_retried_to_done(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    job_id = job(fast, "measure_ctx", 1, bad="nan", bad_times=1)
    with thread_worker(fast, REGISTRY):
        assert wait_job_ended(conn, job_id) == "done"
    run = run_of(conn, job_id, "measure")
    assert (run["status"], run["attempts"]) == ("done", 2)
    assert run["output"]["totals"] == {"ratio": 0.5, "label": "margin"}
    row = conn.execute("SELECT attempt FROM test_effects WHERE job_id = %s", (job_id,)).fetchall()
    assert row == [{"attempt": 2}], "the refused attempt's effect rolled back with it"


@pytest.mark.parametrize("kind", KINDS)
def test_round__a_refused_output_fails_only_its_own_step(
    fast: Settings,
    conn: psycopg.Connection[Any],
    calls: Counter[uuid.UUID],
    caplog: pytest.LogCaptureFixture,
    kind: str,
) -> None:
    jobs = [job(fast, "measure", n) for n in range(3)]
    with one_runner(fast, REGISTRY, quick=("measure",)) as (runner, transport):
        batch = receive_all(transport, 3)
        victim = group_order(batch)[1]
        conn.execute(
            "UPDATE engine_jobs SET params = params || jsonb_build_object('bad', %s::text) "
            "WHERE id = %s",
            (kind, victim),
        )
        outcomes = runner.handle_batch(batch)
        assert runner.conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE

    assert sorted(o.kind for o in outcomes) == ["done", "done", "retried"]
    [retried] = [o for o in outcomes if o.kind == "retried"]
    assert retried.detail.startswith(refusal(kind)), retried.detail
    assert "rolled back" not in caplog.text, "the round was not rolled back for it"
    for job_id in jobs:
        run = run_of(conn, job_id, "measure")
        assert calls[job_id] == 1, "each step called once: nobody went again"
        if job_id == victim:
            assert (run["status"], run["attempts"], run["output"]) == ("pending", 1, None)
            assert run["error"]["message"].startswith(refusal(kind))
        else:
            assert (run["status"], run["attempts"]) == ("done", 1)
            assert run["output"]["totals"]["ratio"] == 0.5
            assert wait_job_ended(conn, job_id) == "done"


@pytest.mark.parametrize("kind", KINDS)
def test_group__a_refused_output_rolls_back_only_its_own_effects(
    fast: Settings, conn: psycopg.Connection[Any], calls: Counter[uuid.UUID], kind: str
) -> None:
    jobs = [job(fast, "measure_ctx", n) for n in range(3)]
    with one_runner(fast, REGISTRY, quick=("measure_ctx",)) as (runner, transport):
        batch = receive_all(transport, 3)
        victim = group_order(batch)[1]
        conn.execute(
            "UPDATE engine_jobs SET params = params || jsonb_build_object('bad', %s::text) "
            "WHERE id = %s",
            (kind, victim),
        )
        outcomes = runner.handle_batch(batch)
        assert runner.conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE

    assert sorted(o.kind for o in outcomes) == ["done", "done", "retried"]
    [retried] = [o for o in outcomes if o.kind == "retried"]
    assert retried.detail.startswith(refusal(kind)), retried.detail
    for job_id in jobs:
        run = run_of(conn, job_id, "measure")
        assert calls[job_id] == 1, "each step called once: nobody went again"
        if job_id == victim:
            assert (run["status"], run["attempts"], run["output"]) == ("pending", 1, None)
            assert effects(conn, job_id) == [], "its effect rolled back with its savepoint"
        else:
            assert (run["status"], run["attempts"]) == ("done", 1)
            assert effects(conn, job_id) == ["measure"]
            assert wait_job_ended(conn, job_id) == "done"


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"ratio": float("nan")}, "params field 'ratio' is NaN: JSON cannot carry it"),
        ({"ratio": float("-inf")}, "params field 'ratio' is -Infinity: JSON cannot carry it"),
        ({"bad": "a\x00"}, "params field 'bad' contains a NUL character ('\\x00' at index 1)"),
        ({"bad": "\udfff"}, "params field 'bad' contains a surrogate code point"),
    ],
)
def test_submit__params_json_cannot_carry_are_refused_naming_the_field(
    fast: Settings, conn: psycopg.Connection[Any], params: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidParameters) as refused:
        submit("measure", params, settings=fast, registry=REGISTRY)
    assert str(refused.value).startswith(f"invalid parameters for flow 'measure': {message}")
    assert conn.execute("SELECT count(*) AS n FROM engine_jobs").fetchone() == {"n": 0}


@pytest.mark.parametrize(
    ("kind", "shown"), [("raise_nul", "\\x00"), ("raise_surrogate", "\\ud800")]
)
def test_failure__an_error_message_json_cannot_carry_is_recorded_escaped(
    fast: Settings, conn: psycopg.Connection[Any], kind: str, shown: str
) -> None:
    job_id = job(fast, "measure_ctx", 1, bad=kind, bad_times=1)
    with thread_worker(fast, REGISTRY):
        assert wait_job_ended(conn, job_id, timeout=20) == "done"
    run = run_of(conn, job_id, "measure")
    assert (run["status"], run["attempts"]) == ("done", 2), "retried at once, not left to lapse"
    [retried] = conn.execute(
        "SELECT detail FROM engine_history WHERE job_id = %s AND kind = 'retried'", (job_id,)
    ).fetchall()
    assert retried["detail"]["error"].startswith("document INV-42 has a bad note: ")
    assert shown in retried["detail"]["error"]
