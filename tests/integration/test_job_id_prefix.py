"""A job id as a person types it: a whole UUID, or a unique prefix (``engine runs`` cuts ids).

Resolved in one place (:func:`engine.jobs.lookup.resolve_job_id`) over the
primary key's range, so every command that takes a job id accepts the same.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

import psycopg
import pytest

from engine.errors import AmbiguousJobId, BadInput, NoSuchJob
from engine.jobs.lookup import MIN_JOB_ID_PREFIX, resolve_job_id


def _job(conn: psycopg.Connection[Any], job_id: str, flow: str = "example") -> uuid.UUID:
    fingerprint = hashlib.sha256(job_id.encode()).hexdigest()
    conn.execute(
        "INSERT INTO engine_jobs (id, flow, flow_version, params, fingerprint) "
        "VALUES (%s, %s, 1, '{}', %s)",
        (job_id, flow, fingerprint),
    )
    return uuid.UUID(job_id)


def test_resolve_job_id__a_unique_prefix_names_its_job(conn: psycopg.Connection[Any]) -> None:
    low = _job(conn, "aaab0000-0000-0000-0000-000000000000")  # the first id the prefix covers
    high = _job(conn, "aaaaffff-ffff-ffff-ffff-ffffffffffff")  # the last id of its neighbour
    other = _job(conn, "aaaa1234-5678-4000-8000-000000000000")
    assert resolve_job_id(conn, "aaab") == low
    assert resolve_job_id(conn, "AAAB0000") == low
    assert resolve_job_id(conn, "aaaaffff") == high
    assert resolve_job_id(conn, "aaaa1234-5678-4") == other  # as `engine runs` cuts it
    assert resolve_job_id(conn, "aaaa1234-56…") == other  # copied with the ellipsis
    assert resolve_job_id(conn, "aaaa12345678") == other  # without dashes


def test_resolve_job_id__an_ambiguous_prefix_names_the_candidates(
    conn: psycopg.Connection[Any],
) -> None:
    first = _job(conn, "abcd0001-0000-4000-8000-000000000000", flow="costing")
    second = _job(conn, "abcd0002-0000-4000-8000-000000000000", flow="posting")
    _job(conn, "abce0000-0000-4000-8000-000000000000")
    with pytest.raises(AmbiguousJobId) as caught:
        resolve_job_id(conn, "abcd")
    message = str(caught.value)
    assert "'abcd' is ambiguous" in message
    assert f"{first} (costing, pending, " in message
    assert f"{second} (posting, pending, " in message
    assert "abce" not in message
    assert "..." not in message
    assert len(caught.value.candidates) == 2


def test_resolve_job_id__many_candidates_show_a_few_and_say_there_are_more(
    conn: psycopg.Connection[Any],
) -> None:
    for n in range(8):
        _job(conn, f"cafe000{n}-0000-4000-8000-000000000000")
    with pytest.raises(AmbiguousJobId) as caught:
        resolve_job_id(conn, "cafe")
    assert len(caught.value.candidates) == 5
    assert str(caught.value).count("cafe000") == 5
    assert "; ..." in str(caught.value)


def test_resolve_job_id__an_unknown_prefix_is_named(conn: psycopg.Connection[Any]) -> None:
    _job(conn, "aaaa0000-0000-4000-8000-000000000000")
    with pytest.raises(NoSuchJob, match="no job id starts with 'aaab'"):
        resolve_job_id(conn, "aaab")


@pytest.mark.parametrize("bad", ["aaa", "a-a-a", "xyz1", "", "not-a-uuid", "a" * 33])
def test_resolve_job_id__text_that_is_no_prefix_is_bad_input_naming_it(
    conn: psycopg.Connection[Any], bad: str
) -> None:
    with pytest.raises(BadInput, match=repr(bad)) as caught:
        resolve_job_id(conn, bad)
    assert not isinstance(caught.value, NoSuchJob | AmbiguousJobId)
    assert MIN_JOB_ID_PREFIX == 4


def test_resolve_job_id__a_whole_uuid_is_taken_as_given(conn: psycopg.Connection[Any]) -> None:
    absent = uuid.uuid4()
    assert resolve_job_id(conn, str(absent)) == absent  # the command says "no job with id"
    assert resolve_job_id(conn, absent.hex.upper()) == absent


def test_resolve_job_id__the_lookup_can_use_the_primary_key(
    conn: psycopg.Connection[Any],
) -> None:
    from engine.store.queries import load

    statement = load("jobs")["job_select_by_id_range"]
    low, high = uuid.UUID("abcd" + "0" * 28), uuid.UUID("abcd" + "f" * 28)
    with conn.transaction(force_rollback=True):
        conn.execute("SET LOCAL enable_seqscan = off")
        plan = conn.execute(
            f"EXPLAIN (COSTS OFF) {statement}", {"low": low, "high": high, "limit": 6}
        ).fetchall()
    text = "\n".join(str(next(iter(row.values()))) for row in plan)
    assert "engine_jobs_pkey" in text


def test_resolve_job_id__a_prefix_finds_a_pruned_job_by_its_summary(
    conn: psycopg.Connection[Any],
) -> None:
    pruned = uuid.UUID("bbbb0001-0000-4000-8000-000000000000")
    conn.execute(
        "INSERT INTO engine_job_summaries (id, flow, flow_version, status, params, created_at,"
        " finished_at, step_runs, step_runs_done, step_runs_dead, attempts, events)"
        " VALUES (%s, 'posting', 1, 'done', '{}', now(), now(), 1, 1, 0, 1, 3)",
        (pruned,),
    )
    assert resolve_job_id(conn, "bbbb0001") == pruned
    live = _job(conn, "bbbb0002-0000-4000-8000-000000000000", flow="costing")
    with pytest.raises(AmbiguousJobId) as caught:
        resolve_job_id(conn, "bbbb")
    message = str(caught.value)
    assert f"{pruned} (posting, done, pruned, " in message
    assert f"{live} (costing, pending, " in message
