"""Searching runs (the console's runs page): filters, keyset paging, the derived state, tags.

Jobs are arranged as rows (their created_at chosen, several equal; the tags
of their flows' searchable parameters written as submit writes them), except
where a real job matters: a posting job's document tags, a step that tags its
job then fails (its tags roll back with it), a submit that tags its job's
searchable parameters. The ERP's words (period, store, document) are its own
search fields (``flows.tools.search``), turned into the engine's matches.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from harness import engine_cli, fast_settings, thread_worker, wait_job_ended
from pydantic import BaseModel

from engine import BadInput, Flow, Registry, RetryPolicy, RunMatch, StepContext, submit
from engine.config import Settings
from engine.jobs.search import (
    MAX_LIMIT,
    RunPage,
    RunQuery,
    encode_cursor,
    parse_run_query,
    search_runs,
)
from engine.store import db
from flows.tools.search import search_fields

FIELDS = {f.name: f for f in search_fields}
# what the ERP's flows declare searchable (Flow(searchable=...)): tagged as submit tags them
SEARCHABLE = {"costing": ("period", "store"), "posting": ("period",), "close": ("period",)}

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
_n = itertools.count(1)


def _job(
    conn: psycopg.Connection[Any],
    *,
    flow: str = "posting",
    params: dict[str, Any] | None = None,
    status: str = "done",
    at: datetime = T0,
    job_id: str | None = None,
) -> uuid.UUID:
    n = next(_n)
    jid = uuid.UUID(job_id) if job_id else uuid.uuid4()
    ended = status in ("done", "failed", "cancelled")
    conn.execute(
        "INSERT INTO engine_jobs (id, flow, flow_version, params, fingerprint, status, "
        "created_at, started_at, finished_at, error) "
        "VALUES (%s, %s, 1, %s, %s, %s, %s, %s, %s, %s)",
        (
            jid,
            flow,
            psycopg.types.json.Jsonb(params or {}),
            hashlib.sha256(f"{jid}{n}".encode()).hexdigest(),
            status,
            at,
            None if status == "pending" else at + timedelta(seconds=1),
            at + timedelta(seconds=31) if ended else None,
            "it broke" if status == "failed" else None,
        ),
    )
    for name in SEARCHABLE.get(flow, ()):
        if (params or {}).get(name) is not None:
            _tag(conn, jid, f"param.{name}", str((params or {})[name]))
    return jid


def _query(**filters: Any) -> RunQuery:
    """A query with the ERP's fields (period, store, document) among the engine's filters."""
    erp = tuple(FIELDS[name].match(filters.pop(name)) for name in list(filters) if name in FIELDS)
    return RunQuery(**{**filters, "matches": (*filters.get("matches", ()), *erp)})


def _run(
    conn: psycopg.Connection[Any],
    job_id: uuid.UUID,
    step: str,
    status: str,
    *,
    key: str = "",
    signal: str | None = None,
) -> None:
    running = status == "running"
    conn.execute(
        "INSERT INTO engine_step_runs (id, job_id, step, fanout_key, fingerprint, status, "
        "attempts, max_attempts, lease_owner, lease_token, lease_expires_at, output, wait_signal) "
        "VALUES (gen_random_uuid(), %s, %s, %s, %s, %s, 1, 3, %s, %s, %s, %s, %s)",
        (
            job_id,
            step,
            key,
            hashlib.sha256(f"{job_id}{step}{key}".encode()).hexdigest(),
            status,
            "w1" if running else None,
            uuid.uuid4() if running else None,
            T0 + timedelta(days=1) if running else None,
            psycopg.types.json.Jsonb({}) if status == "done" else None,
            signal,
        ),
    )


def _tag(conn: psycopg.Connection[Any], job_id: uuid.UUID, name: str, value: str) -> None:
    conn.execute(
        "INSERT INTO engine_job_tags (job_id, name, value) VALUES (%s, %s, %s)",
        (job_id, name, value),
    )


def _ids(page: RunPage) -> list[uuid.UUID]:
    return [r.job_id for r in page.rows]


def _all_pages(conn: psycopg.Connection[Any], query: RunQuery) -> list[list[uuid.UUID]]:
    pages = [search_runs(conn, query)]
    while pages[-1].next_before is not None:
        nxt = pages[-1].next_query
        assert nxt is not None
        pages.append(search_runs(conn, nxt))
    return [_ids(p) for p in pages]


def _minutes(n: int) -> datetime:
    return T0 + timedelta(minutes=n)


def test_search_runs__newest_first_with_the_rows_the_page_shows(
    conn: psycopg.Connection[Any],
) -> None:
    old = _job(conn, flow="costing", params={"period": "2026-10"}, at=_minutes(1))
    new = _job(conn, flow="posting", params={"period": "2026-11"}, status="failed", at=_minutes(2))
    page = search_runs(conn, RunQuery())
    assert _ids(page) == [new, old]
    assert page.next_before is None
    row = page.rows[0]
    assert (row.flow, row.status, row.params["period"], row.error) == (
        "posting",
        "failed",
        "2026-11",
        "it broke",
    )
    assert row.params == {"period": "2026-11"}
    assert row.duration_s == pytest.approx(30.0)
    assert row.created_at == _minutes(2)
    assert row.parent_id is None and row.waiting_for == []
    assert page.rows[1].params["period"] == "2026-10"
    assert row.as_json()["job_id"] == str(new)


def test_search_runs__each_filter_finds_its_jobs(conn: psycopg.Connection[Any]) -> None:
    posting = _job(conn, flow="posting", params={"period": "2026-11"}, at=_minutes(1))
    costing_store = _job(
        conn, flow="costing", params={"period": "2026-11", "store": "ST002"}, at=_minutes(2)
    )
    costing_fan = _job(conn, flow="costing", params={"period": "2026-10"}, at=_minutes(3))
    _run(conn, costing_fan, "cost_store", "done", key="ST001")
    _run(conn, costing_fan, "cost_store", "done", key="ST003")
    failed = _job(conn, flow="migration", status="failed", at=_minutes(4))
    cancelled = _job(conn, flow="migration", status="cancelled", at=_minutes(5))
    tagged = _job(conn, flow="posting", params={"period": "2026-09"}, at=_minutes(6))
    _tag(conn, tagged, "document", "SI-000042")
    _tag(conn, tagged, "store", "ST009")

    def found(**filters: Any) -> list[uuid.UUID]:
        return _ids(search_runs(conn, _query(**filters)))

    assert found(flow="posting") == [tagged, posting]
    assert found(flow="costing") == [costing_fan, costing_store]
    assert found(flow="close") == []
    assert found(status="failed") == [failed]
    assert found(status="cancelled") == [cancelled]
    assert found(status="done") == [tagged, costing_fan, costing_store, posting]
    assert found(period="2026-11") == [costing_store, posting]
    assert found(period="2026-10") == [costing_fan]
    assert found(store="ST002") == [costing_store]  # as submitted
    assert found(store="ST001") == [costing_fan]  # a fan-out's key
    assert found(store="ST009") == [tagged]  # a step's tag
    assert found(store="ST404") == []
    assert found(document="SI-000042") == [tagged]
    assert found(document="SI-000043") == []
    # the engine's own filters: a searchable parameter, a tag, any of several
    assert found(params=(("period", "2026-11"),)) == [costing_store, posting]
    assert found(params=(("period", "2026-11"), ("store", "ST002"))) == [costing_store]
    assert found(tags=(("document", "SI-000042"),)) == [tagged]
    assert found(tags=(("document", "SI-000042"), ("store", "ST001"))) == []
    assert found(matches=(RunMatch(keys=("ST003",)),)) == [costing_fan]
    assert found(matches=(RunMatch(tags=(("store", "ST009"),), keys=("ST001",)),)) == [
        tagged,
        costing_fan,
    ]
    # free text that is no job id: any tag's value, a fan-out key, a flow's name
    assert found(text="SI-000042") == [tagged]
    assert found(text="ST003") == [costing_fan]
    assert found(text="ST002") == [costing_store]
    assert found(text="migration") == [cancelled, failed]
    assert found(text="nothing-like-it") == []


def test_search_runs__filters_combine(conn: psycopg.Connection[Any]) -> None:
    match = _job(conn, flow="costing", params={"period": "2026-11", "store": "ST001"})
    _job(conn, flow="costing", params={"period": "2026-11", "store": "ST001"}, status="failed")
    _job(conn, flow="costing", params={"period": "2026-10", "store": "ST001"})
    _job(conn, flow="costing", params={"period": "2026-11", "store": "ST002"})
    _job(conn, flow="posting", params={"period": "2026-11", "store": "ST001"})
    query = _query(flow="costing", status="done", period="2026-11", store="ST001")
    assert _ids(search_runs(conn, query)) == [match]
    assert _ids(search_runs(conn, RunQuery(text=str(match)[:8], flow="posting"))) == []


def test_search_runs__a_job_id_or_a_prefix_of_one(conn: psycopg.Connection[Any]) -> None:
    one = _job(conn, job_id="abcd0001-0000-4000-8000-000000000000", at=_minutes(1))
    two = _job(conn, job_id="abcd0002-0000-4000-8000-000000000000", at=_minutes(2))
    other = _job(conn, job_id="abce0000-0000-4000-8000-000000000000", at=_minutes(3))

    def found(text: str) -> list[uuid.UUID]:
        return _ids(search_runs(conn, RunQuery(text=text)))

    assert found(str(one)) == [one]
    assert found(str(other).upper()) == [other]
    assert found("abcd") == [two, one]  # a search lists every job a prefix names
    assert found("abcd0002-00") == [two]
    assert found("abcd0001-0000-4…") == [one]  # as `engine runs` cuts it
    assert found("abcf") == []


def test_search_runs__pages_have_no_duplicates_or_gaps_across_equal_created_at(
    conn: psycopg.Connection[Any],
) -> None:
    jobs = [_job(conn, at=_minutes(n // 4)) for n in range(23)]  # four at each minute
    expected = sorted(jobs, key=lambda j: (_minutes(jobs.index(j) // 4), j.bytes), reverse=True)
    for limit in (1, 3, 4, 5, 22, 23):
        pages = _all_pages(conn, RunQuery(limit=limit))
        assert [j for page in pages for j in page] == expected, limit
        assert all(len(page) == limit for page in pages[:-1])
        assert len(pages) == -(-23 // limit)
    # a job submitted between two pages shows on the first page, and moves nothing down
    first = search_runs(conn, RunQuery(limit=5))
    late = _job(conn, at=_minutes(100))
    assert first.next_query is not None
    second = search_runs(conn, first.next_query)
    assert _ids(second) == expected[5:10]
    assert search_runs(conn, RunQuery(limit=1)).rows[0].job_id == late


def test_search_runs__a_cursor_pages_through_a_filtered_search(
    conn: psycopg.Connection[Any],
) -> None:
    wanted = [_job(conn, flow="costing", at=_minutes(n // 2)) for n in range(9)]
    for n in range(9):
        _job(conn, flow="posting", at=_minutes(n // 2))
    pages = _all_pages(conn, RunQuery(flow="costing", limit=2))
    flat = [j for page in pages for j in page]
    assert sorted(flat) == sorted(wanted) and len(flat) == len(set(flat)) == 9


def test_search_runs__waiting_is_derived_and_says_what_for(
    conn: psycopg.Connection[Any],
) -> None:
    waiting = _job(conn, flow="posting", status="running", at=_minutes(1))
    _run(conn, waiting, "post_chunk", "done", key="0")
    _run(conn, waiting, "reconcile", "waiting", signal="approve")
    busy = _job(conn, flow="posting", status="running", at=_minutes(2))
    _run(conn, busy, "post_chunk", "running", key="0")
    _run(conn, busy, "reconcile", "waiting", signal="approve")  # one runs: not waiting
    pending = _job(conn, flow="posting", status="pending", at=_minutes(3))
    _run(conn, pending, "select_documents", "pending")
    _job(conn, flow="posting", at=_minutes(4))

    def found(status: str) -> list[uuid.UUID]:
        return _ids(search_runs(conn, RunQuery(status=status)))

    assert found("waiting") == [waiting]
    assert found("running") == [busy]
    assert found("pending") == [pending]
    rows = {r.job_id: r for r in search_runs(conn, RunQuery()).rows}
    assert (rows[waiting].status, rows[waiting].waiting_for) == ("waiting", ["signal approve"])
    assert rows[waiting].stored_status == "running"
    assert (rows[busy].status, rows[busy].waiting_for) == ("running", [])
    assert rows[pending].duration_s is None
    assert rows[busy].duration_s is not None and rows[busy].duration_s > 0


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"status": "stuck"}, "bad status 'stuck': one of pending, running, waiting, done"),
        ({"period": "2026-13"}, "invalid period '2026-13': expected YYYY-MM with a month"),
        ({"period": "Nov 2026"}, "invalid period 'Nov 2026'"),
        ({"before": "not-a-cursor"}, "bad cursor 'not-a-cursor': not one this search gave"),
        ({"limit": "0"}, f"bad limit 0: a whole number of rows, 1 to {MAX_LIMIT}"),
        ({"limit": "201"}, f"bad limit 201: a whole number of rows, 1 to {MAX_LIMIT}"),
        ({"limit": "ten"}, "bad limit 'ten': a whole number of rows"),
        ({"flow": "Posting!"}, "bad flow 'Posting!'"),
        ({"document": "x" * 201}, "bad document 'xxxx"),
    ],
)
def test_parse_run_query__bad_values_are_named_with_what_is_valid(
    values: dict[str, str], message: str
) -> None:
    with pytest.raises(BadInput) as caught:
        parse_run_query(values, search_fields)
    assert message in str(caught.value)


def test_parse_run_query__reads_a_form_and_ignores_empty_and_foreign_fields() -> None:
    cursor = encode_cursor(T0, uuid.UUID(int=5))
    query = parse_run_query(
        {
            "text": " SI-1 ",
            "flow": "posting",
            "status": "waiting",
            "period": "2026-11",
            "store": "",
            "document": "SI-1",
            "before": cursor,
            "limit": "20",
            "csrf": "token",
        },
        search_fields,
    )
    assert query == _query(
        text="SI-1",
        flow="posting",
        status="waiting",
        period="2026-11",
        document="SI-1",
        before=cursor,
        limit=20,
    )
    assert parse_run_query({}) == RunQuery()
    # without the fields, the ERP's names are foreign fields: ignored
    assert parse_run_query({"period": "2026-11"}) == RunQuery()


def test_search_runs__bad_values_of_a_query_are_refused_too(conn: psycopg.Connection[Any]) -> None:
    with pytest.raises(BadInput, match="bad limit 500"):
        search_runs(conn, RunQuery(limit=500))
    with pytest.raises(BadInput, match="bad status 'waiting-ish'"):
        search_runs(conn, RunQuery(status="waiting-ish"))


# -- tags written by real steps ---------------------------------------------------------


class TagParams(BaseModel):
    fail_times: int = 0


class Tagged(BaseModel):
    attempt: int


tagging = Flow("tagging", params=TagParams, description="tags its job, then may fail")


@tagging.step(retry=RetryPolicy(max_attempts=3, base_delay_s=0, jitter=0))
def tag_then_maybe_fail(params: TagParams, ctx: StepContext) -> Tagged:
    ctx.tag("document", f"DOC-{ctx.attempt}", "DOC-ALL")
    ctx.tag("document", ["DOC-ALL"])  # again: ignored
    if ctx.attempt <= params.fail_times:
        raise ValueError(f"planned failure after tagging, attempt {ctx.attempt}")
    return Tagged(attempt=ctx.attempt)


def _tags(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> list[tuple[str, str]]:
    rows = conn.execute(
        "SELECT name, value FROM engine_job_tags WHERE job_id = %s ORDER BY value", (job_id,)
    ).fetchall()
    return [(r["name"], r["value"]) for r in rows]


def test_tag__commits_with_the_step_only_and_once(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    fast = fast_settings(settings)
    registry = Registry([tagging])
    flaky = submit("tagging", {"fail_times": 1}, settings=fast, registry=registry).job_id
    dead = submit("tagging", {"fail_times": 3}, settings=fast, registry=registry).job_id
    with thread_worker(fast, registry):
        assert wait_job_ended(conn, flaky) == "done"
        assert wait_job_ended(conn, dead) == "failed"
    # the failed attempt's tags rolled back with it; the one that committed, once
    assert _tags(conn, flaky) == [("document", "DOC-2"), ("document", "DOC-ALL")]
    assert _tags(conn, dead) == []
    assert _ids(search_runs(conn, _query(document="DOC-2"))) == [flaky]
    assert _ids(search_runs(conn, _query(document="DOC-1"))) == []
    assert _ids(search_runs(conn, _query(document="DOC-ALL"))) == [flaky]


class Store(BaseModel):
    code: str


class Stores(BaseModel):
    stores: list[Store]


fanned = Flow("fanned", params=TagParams, description="a fan-out whose every run tags its job")


@fanned.step()
def plan_stores(params: TagParams) -> Stores:
    return Stores(stores=[Store(code=f"ST{n:03d}") for n in range(1, 10)])


@fanned.step(map_over="plan_stores.stores")
def tag_store(store: Store, ctx: StepContext) -> Tagged:
    ctx.tag("store", store.code)
    time.sleep(0.1)  # the runs beside it tag meanwhile, then all checkpoint
    return Tagged(attempt=ctx.attempt)


def test_tag__runs_of_one_job_tagging_side_by_side_do_not_hold_each_other_up(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    # a tag locks nothing of its job: with a foreign key to engine_jobs, its
    # check share-locked the job row mid-step and the checkpoints deadlocked
    fast = fast_settings(settings, concurrency=3)
    registry = Registry([fanned])
    job = submit("fanned", {}, settings=fast, registry=registry).job_id
    with thread_worker(fast, registry):
        assert wait_job_ended(conn, job, timeout=30) == "done"
    assert [v for _, v in _tags(conn, job)] == [f"ST{n:03d}" for n in range(1, 10)]
    refused = conn.execute(
        "SELECT count(*) AS n FROM engine_history WHERE job_id = %s AND kind = 'released'", (job,)
    ).fetchone()
    assert refused == {"n": 0}, "no run was sent round again"
    assert _ids(search_runs(conn, _query(store="ST005"))) == [job]


def test_tag__a_bad_name_or_value_is_named() -> None:
    ctx = StepContext(
        conn=None,  # type: ignore[arg-type]  # refused before any statement
        job_id=uuid.uuid4(),
        step_run_id=uuid.uuid4(),
        step="s",
        fanout_key="",
        attempt=1,
        max_attempts=1,
        fingerprint="0" * 64,
        worker="w",
    )
    with pytest.raises(BadInput, match="invalid tag name 'Document'"):
        ctx.tag("Document", "SI-1")
    with pytest.raises(BadInput, match="invalid value '' of tag 'document'"):
        ctx.tag("document", "")
    with pytest.raises(BadInput, match="at most 200 characters"):
        ctx.tag("document", ["x" * 201])
    assert ctx.tag("document") == 0


# -- a real posting job tags the documents it posted and rejected -----------------------


def test_search_runs__by_document_finds_the_posting_job_that_posted_or_rejected_it(
    settings: Settings, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "erp"))
    from test_posting import DOCUMENTS, GOOD, REJECTED, insert_erp  # its tiny ERP

    monkeypatch.setenv("ERP_POSTING_CHUNK_SIZE", "2")
    insert_erp(conn)
    fast = fast_settings(settings, concurrency=3)
    registry = Registry.load(["flows.posting"])
    job = submit("posting", {"period": "2026-11"}, settings=fast, registry=registry).job_id
    with thread_worker(fast, registry):
        assert wait_job_ended(conn, job) == "done"

    tagged = {value for name, value in _tags(conn, job) if name == "document"}
    assert tagged == {DOCUMENTS[i][0] for i in GOOD | set(REJECTED)}
    for number in ("SI-1", "SI-3", "ST-7"):  # posted, rejected, rejected
        page = search_runs(conn, _query(document=number))
        assert _ids(page) == [job], number
        assert page.rows[0].params["period"] == "2026-11"
        assert _ids(search_runs(conn, RunQuery(text=number))) == [job]
    # another period's document (not posted by it) finds nothing
    assert _ids(search_runs(conn, _query(document="SI-10"))) == []


# -- engine runs: the same search on the command line -------------------------------------


def test_engine_runs__filters_by_period_store_document_and_text(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    nov = _job(conn, flow="posting", params={"period": "2026-11"}, at=_minutes(1))
    _tag(conn, nov, "document", "SI-7")
    store = _job(
        conn, flow="costing", params={"period": "2026-10", "store": "ST001"}, at=_minutes(2)
    )
    failed = _job(
        conn, flow="costing", params={"period": "2026-10"}, status="failed", at=_minutes(3)
    )
    waiting = _job(
        conn, flow="posting", params={"period": "2026-12"}, status="running", at=_minutes(4)
    )
    _run(conn, waiting, "reconcile", "waiting", signal="approve")

    def listed(*args: str) -> list[str]:
        done = engine_cli(settings, "runs", *args, "--json")
        assert done.returncode == 0, done.stderr
        return [j["id"] for j in json.loads(done.stdout)["jobs"]]

    assert listed("--period", "2026-11") == [str(nov)]
    assert listed("--store", "ST001") == [str(store)]
    assert listed("--document", "SI-7") == [str(nov)]
    assert listed("--search", "SI-7") == [str(nov)]
    assert listed("--search", str(store)[:8]) == [str(store)]
    assert listed("--flow", "costing", "--period", "2026-10") == [str(failed), str(store)]
    assert listed("--status", "waiting", "--status", "failed") == [str(waiting), str(failed)]
    assert listed("--limit", "2") == [str(waiting), str(failed)]
    shown = json.loads(engine_cli(settings, "runs", "--status", "waiting", "--json").stdout)
    [row] = shown["jobs"]
    assert (row["status"], row["state"], row["waiting_for"]) == (
        "running",
        "waiting",
        ["signal approve"],
    )
    bad = engine_cli(settings, "runs", "--period", "2026-13")
    assert bad.returncode == 2, bad.stderr
    assert "invalid period '2026-13'" in bad.stderr
    assert listed("--param", "period=2026-12") == [str(waiting)]
    assert listed("--param", "period=2026-10", "--param", "store=ST001") == [str(store)]
    assert listed("--tag", "document=SI-7") == [str(nov)]
    assert listed("--tag", "document=SI-7", "--period", "2026-10") == []
    unsearchable = engine_cli(settings, "runs", "--param", "approve_rejects_over=3")
    assert unsearchable.returncode == 2, unsearchable.stderr
    assert "bad --param 'approve_rejects_over': no loaded flow declares it searchable" in (
        unsearchable.stderr
    )
    not_there = engine_cli(settings, "runs", "--flow", "posting", "--param", "store=ST001")
    assert not_there.returncode == 2, not_there.stderr
    assert "flow 'posting' does not declare it searchable" in not_there.stderr
    malformed = engine_cli(settings, "runs", "--tag", "document")
    assert malformed.returncode == 2, malformed.stderr
    assert "bad --tag 'document': NAME=VALUE" in malformed.stderr
    helped = engine_cli(settings, "runs", "--help")
    assert all(f"--{name}" in helped.stdout for name in ("param", "tag", "period", "store"))


# -- a flow's searchable parameters, tagged at submit ---------------------------------------


class Region(BaseModel):
    region: str
    codes: list[str] = []
    size: int | None = None
    note: str = ""


regional = Flow(
    "regional",
    params=Region,
    searchable=("region", "codes", "size"),
    description="found by its region, its codes and its size",
)


@regional.step()
def only(params: Region) -> Tagged:
    return Tagged(attempt=1)


def test_submit__tags_the_searchable_parameters_in_its_transaction(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    registry = Registry([regional])
    job = submit(
        regional,
        {"region": "north", "codes": ["A", "B"], "size": 3, "note": "not searchable"},
        settings=settings,
        registry=registry,
    ).job_id
    assert sorted(_tags(conn, job)) == [
        ("param.codes", "A"),
        ("param.codes", "B"),
        ("param.region", "north"),
        ("param.size", "3"),
    ]
    plain = submit(regional, {"region": "south"}, settings=settings, registry=registry).job_id
    assert _tags(conn, plain) == [("param.region", "south")]  # no codes, no size: no tag

    def found(*params: tuple[str, str]) -> list[uuid.UUID]:
        return _ids(search_runs(conn, RunQuery(params=params)))

    assert found(("region", "north")) == [job]
    assert found(("codes", "B"), ("size", "3")) == [job]
    assert found(("region", "south")) == [plain]
    assert found(("note", "not searchable")) == []
    # a submit that rolls back leaves no tag either
    with db.connect(settings) as caller:
        rolled = submit(regional, {"region": "east"}, conn=caller, settings=settings).job_id
        caller.rollback()
    assert _tags(conn, rolled) == [] and found(("region", "east")) == []


def test_erp_migration_1015__tags_the_jobs_submitted_before_it_as_submit_would(
    conn: psycopg.Connection[Any],
) -> None:
    costing = _job(
        conn, flow="costing", params={"period": "2026-11", "store": "ST001"}, at=_minutes(1)
    )
    whole = _job(conn, flow="costing", params={"period": "2026-11", "store": None}, at=_minutes(2))
    posting = _job(conn, flow="posting", params={"period": "2026-10"})
    other = _job(conn, flow="migration", params={"period": "2026-11"})  # not searchable by it
    conn.execute("DELETE FROM engine_job_tags")  # jobs of before 0030: no parameter tags
    backfill = Path(__file__).resolve().parents[2] / "flows/migrations/1015_erp_search_tags.sql"
    for _ in range(2):  # as an interrupted migration run again: nothing twice
        conn.execute(backfill.read_text())
    assert sorted(_tags(conn, costing)) == [("param.period", "2026-11"), ("param.store", "ST001")]
    assert _tags(conn, whole) == [("param.period", "2026-11")]
    assert _tags(conn, posting) == [("param.period", "2026-10")]
    assert _tags(conn, other) == []
    assert _ids(search_runs(conn, _query(period="2026-11"))) == [whole, costing]
