"""The migration flow: validate each row, upsert by natural key, a rerun changes nothing.

Data errors are the data's, not an incident (issue 26, section 5): a bad row is
rejected with its reason and the original line, a bad file is refused at
submit (exit 2) naming what is wrong, and a file that goes bad after the
submit fails its job once, with no retry, no dead letter and no alert.
"""

from __future__ import annotations

import csv
import io
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from harness import engine_cli, fast_settings, thread_worker, wait_job_ended

import flows.erp.csvfile
import flows.migration
from engine import InvalidParameters, Refused, Registry, Reject, StepContext, submit
from engine.config import Settings
from engine.reports import render_job_report

ITEMS = """sku,brand_code,name,standard_cost,price
BR1-0001,BR1,Shirt,12.5,29.90
BR1-0002,BR1,"Socks, pair",1.2345,3.99
BR1-0003,BR1,=cmd|' /C calc'!A0,2,4
BR9-0001,BR9,Ghost brand item,1,2
BR1-0004,BR1,Negative,-1,2
bad sku!,BR1,Bad sku,1,2
BR1-0005,BR1,Too precise,1.23456,2
BR1-0006,BR1,<script>alert(1)</script>,5,9.5
"""


@pytest.fixture
def registry() -> Registry:
    return Registry.load(["flows.migration"])


@pytest.fixture
def fast(settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    # the flow reads ENGINE_REPORTS_DIR as a worker process would
    monkeypatch.setenv("ENGINE_REPORTS_DIR", str(tmp_path / "reports"))
    return fast_settings(
        settings, flow_modules=["flows.migration"], reports_dir=tmp_path / "reports"
    )


@pytest.fixture
def brand(conn: psycopg.Connection[Any]) -> None:
    conn.execute("INSERT INTO erp_brands VALUES (1, 'BR1', 'North')")
    conn.execute("INSERT INTO erp_stores VALUES (1, 'ST001', 1, 'a', 'large')")
    conn.execute("INSERT INTO erp_periods (period) VALUES ('2026-11')")


def run(
    fast: Settings,
    conn: psycopg.Connection[Any],
    registry: Registry,
    source: Path,
    kind: str,
    **params: str,
) -> dict[str, Any]:
    job = submit(
        "migration",
        {"source": str(source), "kind": kind, **params},
        settings=fast,
        registry=registry,
    )
    with thread_worker(fast, registry):
        assert wait_job_ended(conn, job.job_id) == "done"
    assert_no_incident(conn, job.job_id)
    row = conn.execute(
        "SELECT output FROM engine_step_runs WHERE job_id = %s AND step = 'report'", (job.job_id,)
    ).fetchone()
    assert row is not None
    return dict(row["output"])


def assert_no_incident(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> None:
    """Every step run ran once: no retry, no dead letter, no alert."""
    attempts = conn.execute(
        "SELECT step, fanout_key, attempts FROM engine_step_runs WHERE job_id = %s", (job_id,)
    ).fetchall()
    assert all(r["attempts"] == 1 for r in attempts), attempts
    assert conn.execute("SELECT count(*) AS n FROM engine_dead_letters").fetchone() == {"n": 0}
    assert conn.execute("SELECT count(*) AS n FROM engine_alerts").fetchone() == {"n": 0}


def rejects(conn: psycopg.Connection[Any]) -> dict[int, tuple[str, str]]:
    """The rejected rows recorded, by row number: (reason, raw)."""
    rows = conn.execute(
        "SELECT row_number, reason, raw FROM erp_migration_rejects ORDER BY row_number"
    ).fetchall()
    return {r["row_number"]: (r["reason"], r["raw"]) for r in rows}


def refused(fast: Settings, registry: Registry, source: Path, kind: str, **params: str) -> str:
    """Submit, expecting a refusal; its message (and nothing written)."""
    with pytest.raises(Refused) as raised:
        submit(
            "migration",
            {"source": str(source), "kind": kind, **params},
            settings=fast,
            registry=registry,
        )
    return str(raised.value)


@pytest.mark.usefixtures("brand")
def test_migration__items_loaded_rejects_written_and_a_rerun_changes_nothing(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry, tmp_path: Path
) -> None:
    source = tmp_path / "items.csv"
    source.write_text(ITEMS, encoding="utf-8")
    first = run(fast, conn, registry, source, "items")
    assert (first["rows"], first["inserted"], first["rejected"]) == (8, 4, 4)
    names = conn.execute("SELECT sku, name FROM erp_items ORDER BY sku").fetchall()
    assert {r["sku"]: r["name"] for r in names}["BR1-0003"] == "=cmd|' /C calc'!A0"
    assert {r["sku"]: r["name"] for r in names}["BR1-0006"] == "<script>alert(1)</script>"
    rejects = list(csv.reader(Path(first["rejects_file"]).read_text(encoding="utf-8").splitlines()))
    reasons = {int(r[0]): r[1] for r in rejects[1:]}
    assert "unknown brand BR9" in reasons[4]
    assert "standard_cost" in reasons[5] and "-1" in reasons[5]
    assert "sku" in reasons[6]
    assert "standard_cost" in reasons[7]
    assert all(not cell.startswith("=") for r in rejects for cell in r)

    before = conn.execute("SELECT xmin::text AS v, * FROM erp_items ORDER BY id").fetchall()
    # the same file again: a new job (the first one ended) that changes nothing
    again = run(fast, conn, registry, source, "items")
    assert (again["inserted"], again["updated"], again["unchanged"]) == (0, 0, 4)
    after = conn.execute("SELECT xmin::text AS v, * FROM erp_items ORDER BY id").fetchall()
    assert after == before, "not even a row version changed"

    # an edited row is updated, and only that one
    source.write_text(ITEMS.replace("Shirt,12.5", "Shirt,13.0"), encoding="utf-8")
    edited = run(fast, conn, registry, source, "items")
    assert (edited["inserted"], edited["updated"]) == (0, 1)


@pytest.mark.usefixtures("brand")
def test_migration__opening_balances_by_natural_key(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry, tmp_path: Path
) -> None:
    conn.execute("INSERT INTO erp_items VALUES (1, 1, 'BR1-0001', 'Shirt', 12.5, 29.9)")
    source = tmp_path / "opening.csv"
    source.write_text(
        "store_code,sku,period,qty,value\n"
        "ST001,BR1-0001,2026-11,10,125.00\n"
        "ST999,BR1-0001,2026-11,1,1\n"
        "ST001,NOPE,2026-11,1,1\n"
        "ST001,BR1-0001,2026-13,1,1\n",
        encoding="utf-8",
    )
    result = run(fast, conn, registry, source, "opening-balances")
    assert (result["inserted"], result["rejected"]) == (1, 3)
    reasons = [
        r["reason"]
        for r in conn.execute("SELECT reason FROM erp_migration_rejects ORDER BY row_number")
    ]
    assert "unknown store ST999" in reasons[0]
    assert "unknown item NOPE" in reasons[1]
    assert "2026-13" in reasons[2]
    balance = conn.execute("SELECT qty, value FROM erp_opening_balances").fetchone()
    assert balance is not None and str(balance["value"]) == "125.00"


# -- duplicates of a natural key --------------------------------------------------------


@pytest.mark.usefixtures("brand")
def test_migration__a_duplicate_sku_rejects_the_later_row_within_and_across_chunks(
    fast: Settings,
    conn: psycopg.Connection[Any],
    registry: Registry,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # chunks of 3 rows: rows 1-3, then 4-5
    monkeypatch.setattr(flows.migration, "CHUNK_ROWS", 3)
    source = tmp_path / "items.csv"
    source.write_text(
        "sku,brand_code,name,standard_cost,price\n"
        "BR1-0001,BR1,First,1,2\n"
        "BR1-0001,BR1,Again in the same chunk,9,9\n"
        "BR1-0002,BR1,Other,3,4\n"
        " BR1-0001 ,BR1,Again in the next chunk,8,8\n"
        "BR1-0003,BR1,Last,5,6\n",
        encoding="utf-8",
    )
    result = run(fast, conn, registry, source, "items")
    assert (result["rows"], result["inserted"], result["rejected"]) == (5, 3, 2)
    got = rejects(conn)
    assert got[2] == (
        "duplicate of row 1 (sku BR1-0001)",
        "BR1-0001,BR1,Again in the same chunk,9,9",
    )
    assert got[4] == (
        "duplicate of row 1 (sku BR1-0001)",
        " BR1-0001 ,BR1,Again in the next chunk,8,8",
    )
    first = conn.execute("SELECT name FROM erp_items WHERE sku = 'BR1-0001'").fetchone()
    assert first == {"name": "First"}, "the first row is the one loaded"


@pytest.mark.usefixtures("brand")
def test_migration__a_duplicate_opening_balance_key_rejects_the_later_row(
    fast: Settings,
    conn: psycopg.Connection[Any],
    registry: Registry,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(flows.migration, "CHUNK_ROWS", 2)
    conn.execute("INSERT INTO erp_items VALUES (1, 1, 'BR1-0001', 'Shirt', 12.5, 29.9)")
    conn.execute("INSERT INTO erp_items VALUES (2, 1, 'BR1-0002', 'Socks', 1, 3)")
    source = tmp_path / "opening.csv"
    source.write_text(
        "store_code,sku,period,qty,value\n"
        "ST001,BR1-0001,2026-11,10,125.00\n"
        "ST001,BR1-0002,2026-11,1,1\n"
        "ST001,BR1-0001,2026-11,11,130.00\n"
        "ST001,BR1-0002,2026-11,2,2\n",
        encoding="utf-8",
    )
    result = run(fast, conn, registry, source, "opening-balances")
    assert (result["inserted"], result["rejected"]) == (2, 2)
    got = rejects(conn)
    assert got[3][0] == "duplicate of row 1 (store_code ST001, sku BR1-0001, period 2026-11)"
    assert got[4][0] == "duplicate of row 2 (store_code ST001, sku BR1-0002, period 2026-11)"
    balance = conn.execute("SELECT qty FROM erp_opening_balances WHERE item_id = 1").fetchone()
    assert balance is not None and str(balance["qty"]) == "10.000"


# -- files refused at submit ------------------------------------------------------------


def test_migration__a_file_not_in_its_encoding_is_refused_at_submit_naming_the_byte(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry, tmp_path: Path
) -> None:
    source = tmp_path / "items.csv"
    head = b"sku,brand_code,name,standard_cost,price\nBR1-0001,BR1,Shirt,1,2\nBR1-0002,BR1,Caf"
    source.write_bytes(head + b"\xe9 cr\xe8me,1,2\n")  # cp1252 / latin-1
    message = refused(fast, registry, source, "items")
    assert f"byte offset {len(head)}" in message and "line 3" in message, message
    assert "0xe9" in message and "utf-8" in message and "--encoding" in message, message
    assert conn.execute("SELECT count(*) AS n FROM engine_jobs").fetchone() == {"n": 0}

    # the CLI: exit 2, the message on stderr, nothing written
    cli = engine_cli(fast, "submit", "migration", "--source", str(source), "--kind", "items")
    assert cli.returncode == 2, cli.stderr
    assert f"byte offset {len(head)}" in cli.stderr
    assert conn.execute("SELECT count(*) AS n FROM engine_jobs").fetchone() == {"n": 0}

    # a UTF-16 file said to be UTF-8: refused at its first byte
    source.write_text("sku,brand_code,name,standard_cost,price\n", encoding="utf-16")
    assert "byte offset 0 (line 1)" in refused(fast, registry, source, "items")


@pytest.mark.usefixtures("brand")
def test_migration__the_stated_encoding_is_read_and_a_utf8_bom_is_accepted(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry, tmp_path: Path
) -> None:
    source = tmp_path / "items.csv"
    text = "sku,brand_code,name,standard_cost,price\nBR1-0001,BR1,Café crème,1,2\n"
    source.write_bytes(text.encode("cp1252"))
    loaded = run(fast, conn, registry, source, "items", encoding="cp1252")
    assert (loaded["inserted"], loaded["rejected"]) == (1, 0)
    name = conn.execute("SELECT name FROM erp_items WHERE sku = 'BR1-0001'").fetchone()
    assert name == {"name": "Café crème"}

    bom = tmp_path / "bom.csv"
    bom.write_bytes(b"\xef\xbb\xbf" + text.replace("0001", "0002").encode("utf-8"))
    loaded = run(fast, conn, registry, bom, "items")
    assert (loaded["inserted"], loaded["rejected"]) == (1, 0)
    # the same file said to be latin-1: its header is refused, with the likely cause
    message = refused(fast, registry, bom, "items", encoding="latin-1")
    assert "missing column(s) sku" in message and "byte order mark: is it utf-8" in message

    wide = tmp_path / "utf16.csv"
    wide.write_text(text.replace("0001", "0003"), encoding="utf-16")  # with its BOM
    loaded = run(fast, conn, registry, wide, "items", encoding="UTF16")
    assert (loaded["inserted"], loaded["rejected"]) == (1, 0)

    with pytest.raises(InvalidParameters, match="klingon"):
        submit(
            "migration",
            {"source": str(source), "kind": "items", "encoding": "klingon"},
            settings=fast,
            registry=registry,
        )


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "does not exist"),
        ("", "is empty: no header line"),
        ("sku,name\nA,b\n", "missing column(s) brand_code, standard_cost, price"),
        ("sku,brand_code,name,standard_cost,price\n", "no data rows"),
        ("sku,brand_code,name,standard_cost,price\n\n\n", "no data rows"),
        ("sku,brand_code,name,sku,standard_cost,price\nA,B,c,A,1,2\n", "column sku is named twice"),
        (
            'sku,brand_code,name,standard_cost,price\nA,BR1,x,1,2\nB,BR1,"never closed,1,2\n'
            "C,BR1,y,1,2\n",
            "line 3: a quoted field starts here and is never closed",
        ),
        (
            'sku,brand_code,name,standard_cost,price\nA,BR1,x,1,2\nB,BR1,y,1,"2\n',
            "line 3: a quoted field starts here and is never closed: its quote opens column 5",
        ),
        (
            '\n"sku,brand_code,name,standard_cost,price\nA,BR1,x,1,2\n',
            "line 2: a quoted field starts here and is never closed: its quote opens column 1",
        ),
        (
            'sku,brand_code,na"me,standard_cost,price\nA,BR1,x,1,2\n',
            "line 1: the header is not well-formed CSV: a quote inside an unquoted value",
        ),
        ("sku,brand_code,na\x00me,standard_cost,price\nA,BR1,x,1,2\n", "NUL character"),
        (
            "sku,brand_code,name,standard_cost,price," + "h" * 200_000 + "\nA,BR1,x,1,2\n",
            "header column 6 is 200000 characters long",
        ),
    ],
    ids=[
        "missing",
        "empty",
        "columns",
        "header-only",
        "blank-lines",
        "twice",
        "open-quote",
        "open-quote-last",
        "open-quote-header",
        "header-stray-quote",
        "header-nul",
        "header-oversized",
    ],
)
def test_migration__a_file_that_cannot_be_loaded_is_refused_at_submit(
    fast: Settings,
    conn: psycopg.Connection[Any],
    registry: Registry,
    tmp_path: Path,
    content: str | None,
    expected: str,
) -> None:
    source = tmp_path / "items.csv"
    if content is not None:
        source.write_text(content, encoding="utf-8")
    message = refused(fast, registry, source, "items")
    assert expected in message and str(source) in message, message
    assert conn.execute("SELECT count(*) AS n FROM engine_jobs").fetchone() == {"n": 0}


@pytest.mark.parametrize("change", ["vanished", "re-encoded", "edited"])
def test_migration__a_file_that_goes_bad_after_submit_fails_the_job_once_without_a_page(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry, tmp_path: Path, change: str
) -> None:
    source = tmp_path / "items.csv"
    source.write_text(ITEMS, encoding="utf-8")
    job = submit(
        "migration", {"source": str(source), "kind": "items"}, settings=fast, registry=registry
    )
    if change == "vanished":
        source.unlink()
    elif change == "re-encoded":
        source.write_text(ITEMS.replace("Shirt", "Chemise brodée"), encoding="latin-1")
    else:
        source.write_text("sku,name\nA,b\n", encoding="utf-8")
    with thread_worker(fast, registry):
        assert wait_job_ended(conn, job.job_id) == "failed"
    plan = conn.execute(
        "SELECT status, attempts, error FROM engine_step_runs WHERE job_id = %s AND step = 'plan'",
        (job.job_id,),
    ).fetchone()
    assert plan is not None and (plan["status"], plan["attempts"]) == ("dead", 1)
    assert plan["error"]["type"] == "Reject"
    expected = {
        "vanished": "does not exist",
        "re-encoded": "not utf-8 text",
        "edited": "missing column(s) brand_code",
    }[change]
    assert expected in plan["error"]["message"]
    failed = conn.execute("SELECT error FROM engine_jobs WHERE id = %s", (job.job_id,)).fetchone()
    assert failed is not None and expected in failed["error"]
    assert conn.execute("SELECT count(*) AS n FROM engine_dead_letters").fetchone() == {"n": 0}
    assert conn.execute("SELECT count(*) AS n FROM engine_alerts").fetchone() == {"n": 0}


@pytest.mark.usefixtures("brand")
@pytest.mark.parametrize("change", ["edited", "vanished"])
def test_migration__a_chunk_rejects_a_file_changed_since_the_plan(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry, tmp_path: Path, change: str
) -> None:
    source = tmp_path / "items.csv"
    source.write_text(ITEMS, encoding="utf-8")
    run(fast, conn, registry, source, "items")
    row = conn.execute("SELECT job_id, output FROM engine_step_runs WHERE step = 'plan'").fetchone()
    assert row is not None
    plan = flows.migration.MigrationPlan.model_validate(row["output"])
    if change == "edited":
        source.write_text(ITEMS.replace("Shirt", "Blouse"), encoding="utf-8")
    else:
        source.unlink()
    # the chunk's step as a worker calls it, in a transaction of the test's connection
    ctx = StepContext(
        conn=conn,
        job_id=row["job_id"],
        step_run_id=uuid.uuid4(),
        step="load_chunk",
        fanout_key="0",
        attempt=1,
        max_attempts=5,
        fingerprint="test",
        worker="test",
    )
    expected = "changed since the job planned it" if change == "edited" else "does not exist"
    with pytest.raises(Reject, match=expected), conn.transaction():
        flows.migration.load_chunk(plan.chunks[0], plan, ctx)


# -- rows rejected with their reason and their original line -----------------------------


@pytest.mark.usefixtures("brand")
def test_migration__rows_with_the_wrong_number_of_columns_are_rejected_naming_both(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry, tmp_path: Path
) -> None:
    source = tmp_path / "items.csv"
    source.write_text(
        "sku,brand_code,name,standard_cost,price\n"
        "BR1-0001,BR1,Shirt,1,2,extra,more\n"
        "BR1-0002,BR1,Socks,1\n"
        "BR1-0003,BR1,Hat,1,2,\n"
        "BR1-0004,BR1,Scarf,1,2\n",
        encoding="utf-8",
    )
    result = run(fast, conn, registry, source, "items")
    assert (result["inserted"], result["rejected"]) == (1, 3)
    got = rejects(conn)
    assert got[1] == ("row has 7 columns, the header has 5", "BR1-0001,BR1,Shirt,1,2,extra,more")
    assert got[2] == ("row has 4 columns, the header has 5", "BR1-0002,BR1,Socks,1")
    assert got[3][0] == "row has 6 columns, the header has 5"
    skus = [r["sku"] for r in conn.execute("SELECT sku FROM erp_items")]
    assert skus == ["BR1-0004"], "no row was loaded from misplaced columns"


@pytest.mark.usefixtures("brand")
def test_migration__raw_is_the_original_line_and_the_rejects_file_neutralises_formulas(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry, tmp_path: Path
) -> None:
    lines = [
        "sku,brand_code,name,standard_cost,price",
        '"BR9-0001",BR9,"Socks, ""pair""",1.20,3',  # unknown brand: rejected in SQL
        '=HYPERLINK("http://x"),BR1,Click,1,2',  # a formula as a whole line
        'BR1-0001,BR1,"two\r\nlines",-1,2',  # a quoted line break; a bad cost
        "BR1-0002,BR1,Fine,1,2",
    ]
    source = tmp_path / "items.csv"
    source.write_bytes("\r\n".join(lines).encode("utf-8") + b"\r\n")
    result = run(fast, conn, registry, source, "items")
    assert (result["inserted"], result["rejected"]) == (1, 3)
    got = rejects(conn)
    assert got[1] == ("unknown brand BR9", lines[1])
    assert got[2][1] == lines[2]
    assert got[3][1] == lines[3], "the record's two physical lines, as in the file"
    with Path(result["rejects_file"]).open(encoding="utf-8", newline="") as f:
        written = list(csv.reader(f))
    assert written[0] == ["row", "reason", "raw"]
    raw = {int(r[0]): r[2] for r in written[1:]}
    assert raw[1] == lines[1]
    assert raw[2] == "'" + lines[2], "a formula is neutralised, the line still readable"
    assert raw[3] == lines[3]


@pytest.mark.usefixtures("brand")
def test_migration__bad_values_are_rejected_with_their_reason_never_a_database_error(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry, tmp_path: Path
) -> None:
    long_name = "x" * 5000
    source = tmp_path / "items.csv"
    source.write_text(
        "sku,brand_code,name,standard_cost,price\n"
        "BR1-0001,BR1,Nul\x00byte,1,2\n"
        "BR1-0002,BR1,Overflow,123456789012.12345,2\n"
        "BR1-0003,BR1,Huge,1e400,2\n"
        "BR1-0004,BR1,Not a number,NaN,2\n"
        f"BR1-0005,BR1,{long_name},1,2\n"
        'BR1-0006,BR1,"Quote"d,1,2\n'
        'BR1-0007,BR1,Comma decimal,"1,5",2\n'
        "BR1-0008,BR1,Fine,1,2\n",
        encoding="utf-8",
    )
    result = run(fast, conn, registry, source, "items")
    assert (result["inserted"], result["rejected"]) == (1, 7)
    got = rejects(conn)
    assert "name: contains a NUL character" in got[1][0]
    assert got[1][1] == "BR1-0001,BR1,Nul\u2400byte,1,2", "NUL shown as the symbol for null"
    assert "standard_cost" in got[2][0] and "123456789012.12345" in got[2][0]
    assert "standard_cost" in got[3][0] and "1e400" in got[3][0]
    assert "standard_cost" in got[4][0] and "finite" in got[4][0]
    assert "name" in got[5][0] and "at most 200 characters" in got[5][0]
    assert len(got[5][0]) < 400, "the reason quotes the start of a long value, not all of it"
    assert got[5][1].endswith(long_name + ",1,2"), "raw keeps the whole line"
    assert "malformed CSV" in got[6][0] and "line 7" in got[6][0]
    assert got[6][1] == 'BR1-0006,BR1,"Quote"d,1,2'
    assert "standard_cost" in got[7][0] and "1,5" in got[7][0]


# -- cost changes are reported, not silent ------------------------------------------------


@pytest.mark.usefixtures("brand")
def test_migration__a_changed_standard_cost_is_listed_old_to_new(
    fast: Settings,
    conn: psycopg.Connection[Any],
    registry: Registry,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    conn.execute("INSERT INTO erp_items VALUES (1, 1, 'BR1-0001', 'Shirt', 12.5, 29.9)")
    conn.execute("INSERT INTO erp_items VALUES (2, 1, 'BR1-0002', 'Socks', 1, 3)")
    conn.execute("INSERT INTO erp_items VALUES (3, 1, 'BR1-0003', 'Hat', 4, 9)")
    source = tmp_path / "items.csv"
    source.write_text(
        "sku,brand_code,name,standard_cost,price\n"
        "BR1-0001,BR1,Shirt,13,29.90\n"  # cost changed
        "BR1-0002,BR1,Socks renamed,1.0000,3\n"  # same cost, other name
        "BR1-0003,BR1,Hat,3.75,9\n"  # cost changed
        "BR1-0004,BR1,New,2,5\n",  # new: no old cost
        encoding="utf-8",
    )
    monkeypatch.setattr(flows.migration, "MAX_LISTED", 1)
    result = run(fast, conn, registry, source, "items")
    assert (result["inserted"], result["updated"]) == (1, 3)
    assert result["cost_changed"] == 2
    assert result["cost_changes"] == [
        {"row": 1, "sku": "BR1-0001", "old": "12.5000", "new": "13.0000"}
    ], "bounded: the first by row; cost_changed is the full count"
    costs = conn.execute("SELECT sku, standard_cost FROM erp_items ORDER BY sku").fetchall()
    assert [str(r["standard_cost"]) for r in costs] == ["13.0000", "1.0000", "3.7500", "2.0000"]
    # the run report lists them too
    job = conn.execute("SELECT id FROM engine_jobs WHERE flow = 'migration'").fetchone()
    assert job is not None
    page = Path(render_job_report(fast, job["id"])).read_text(encoding="utf-8")
    assert "Standard costs changed" in page and "12.5000" in page and "13.0000" in page
    assert "The first 1 of 2 changed standard costs" in page

    monkeypatch.setattr(flows.migration, "MAX_LISTED", 200)
    again = run(fast, conn, registry, source, "items")
    assert (again["updated"], again["cost_changed"], again["cost_changes"]) == (0, 0, [])


# -- quick chunks sharing one commit -------------------------------------------------------


@pytest.mark.usefixtures("brand")
def test_migration__quick_chunks_grouped_in_one_transaction_each_stage_their_rows(
    fast: Settings,
    conn: psycopg.Connection[Any],
    registry: Registry,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # one row a chunk: quick steps, which a slot runs in one transaction (group commit);
    # each chunk's staging table must be gone before the next one stages its rows
    monkeypatch.setattr(flows.migration, "CHUNK_ROWS", 1)
    items = tmp_path / "items.csv"
    items.write_text(
        "sku,brand_code,name,standard_cost,price\n"
        + "".join(f"BR1-{i:04d},BR1,Item {i},1,2\n" for i in range(40)),
        encoding="utf-8",
    )
    assert run(fast, conn, registry, items, "items")["inserted"] == 40
    openings = tmp_path / "opening.csv"
    openings.write_text(
        "store_code,sku,period,qty,value\n"
        + "".join(f"ST001,BR1-{i:04d},2026-11,1,1\n" for i in range(40)),
        encoding="utf-8",
    )
    assert run(fast, conn, registry, openings, "opening-balances")["inserted"] == 40


# -- bad files judged rightly: a bad row is the row's error, not the file's (issue 34, 8) --


@pytest.mark.usefixtures("brand")
def test_migration__an_oversized_value_is_its_rows_error_with_its_size(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry, tmp_path: Path
) -> None:
    big = "x" * 1_000_000  # well-formed: one long value, its quotes closed
    lines = [
        "sku,brand_code,name,standard_cost,price",
        "BR1-0001,BR1,Shirt,1,2",
        f"BR1-0002,BR1,{big},1,2",
        f'BR1-0003,BR1,"{big}",1,2',
        "BR1-0004,BR1,Socks,1,2",
    ]
    source = tmp_path / "items.csv"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = run(fast, conn, registry, source, "items")
    assert (result["rows"], result["inserted"], result["rejected"]) == (4, 2, 2)
    got = rejects(conn)
    for row in (2, 3):
        reason, raw = got[row]
        assert "name" in reason and "1000000 characters" in reason, reason
        assert str(flows.erp.csvfile.FIELD_LIMIT) in reason, "and what would be valid"
        assert "quote" not in reason, reason
        assert len(reason) < 400, "the reason does not quote the whole value"
        assert raw == lines[row], "the original line, whole"
    skus = [r["sku"] for r in conn.execute("SELECT sku FROM erp_items ORDER BY sku")]
    assert skus == ["BR1-0001", "BR1-0004"]


@pytest.mark.usefixtures("brand")
def test_migration__a_stray_quote_is_its_rows_error_naming_it(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry, tmp_path: Path
) -> None:
    lines = [
        "sku,brand_code,name,standard_cost,price",
        'BR1-0001,BR1,ba"d,1,2',  # a bare quote inside an unquoted value
        'BR1-0002,BR1,"Quote"d,1,2',  # text after a closing quote
        'BR1-0003,BR1, "Padded",1,2',  # a quote after a space: not a quoted value
        'BR1-0004,BR1,12",1,2',
        'BR1-0005,BR1,"A ""fine"" name",1,2',  # quotes written right
        "BR1-0006,BR1,Fine,1,2",
    ]
    source = tmp_path / "items.csv"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = run(fast, conn, registry, source, "items")
    assert (result["inserted"], result["rejected"]) == (2, 4)
    got = rejects(conn)
    assert set(got) == {1, 2, 3, 4}
    for row, shown in ((1, 'ba"d'), (2, '"Quote"d'), (3, ' "Padded"'), (4, '12"')):
        reason, raw = got[row]
        assert raw == lines[row], "the original line"
        assert "quote" in reason and f"line {row + 1}" in reason and shown in reason, reason
        assert "column 3 (name)" in reason, reason
        assert '""' in reason, "says what is valid: a quote inside a value is written twice"
    names = conn.execute("SELECT sku, name FROM erp_items ORDER BY sku").fetchall()
    assert [(r["sku"], r["name"]) for r in names] == [
        ("BR1-0005", 'A "fine" name'),
        ("BR1-0006", "Fine"),
    ]


@pytest.mark.usefixtures("brand")
def test_migration__a_quote_never_closed_is_refused_naming_where_it_starts(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry, tmp_path: Path
) -> None:
    source = tmp_path / "items.csv"
    source.write_text(
        "sku,brand_code,name,standard_cost,price\n"
        "BR1-0001,BR1,Shirt,1,2\n"
        'BR1-0002,BR1,"Never closed,1,2\n'
        + "".join(f"BR1-{i:04d},BR1,Item,1,2\n" for i in range(3, 3000)),
        encoding="utf-8",
    )
    message = refused(fast, registry, source, "items")
    assert "line 3" in message and "column 3" in message and "never closed" in message, message
    assert "larger than" not in message and "longer than" not in message, message
    assert conn.execute("SELECT count(*) AS n FROM engine_jobs").fetchone() == {"n": 0}


@pytest.mark.usefixtures("brand")
def test_migration__a_quote_closed_lines_later_rejects_one_row_naming_its_lines(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry, tmp_path: Path
) -> None:
    lines = [
        "sku,brand_code,name,standard_cost,price",
        'BR1-0001,BR1,"Never closed,1,2',
        "BR1-0002,BR1,Swallowed,1,2",
        'BR1-0003,BR1,"Closes" late,1,2',
        "BR1-0004,BR1,Fine,1,2",
    ]
    source = tmp_path / "items.csv"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = run(fast, conn, registry, source, "items")
    assert (result["rows"], result["inserted"], result["rejected"]) == (2, 1, 1)
    reason, raw = rejects(conn)[1]
    assert "lines 2-4" in reason, reason
    assert raw == "\n".join(lines[1:4])


@pytest.mark.usefixtures("brand")
def test_migration__a_nul_anywhere_in_a_row_is_its_error(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry, tmp_path: Path
) -> None:
    source = tmp_path / "items.csv"
    source.write_bytes(
        b"sku,brand_code,name,standard_cost,price,note\n"
        b"BR1-0001,BR1,Shirt,1,2,in an extra\x00column\n"
        b'BR1-0002,BR1,"quoted\x00",1,2,\n'
        b"BR1-0003,BR1,Fine,1,2,\n"
    )
    result = run(fast, conn, registry, source, "items")
    assert (result["inserted"], result["rejected"]) == (1, 2)
    got = rejects(conn)
    assert "note: contains a NUL character" in got[1][0], got[1][0]
    assert got[1][1] == "BR1-0001,BR1,Shirt,1,2,in an extra\u2400column"
    assert "name: contains a NUL character" in got[2][0], got[2][0]


# -- a key is taken by its first valid row --------------------------------------------------


@pytest.mark.usefixtures("brand")
def test_migration__a_corrected_row_after_a_rejected_one_with_its_key_loads(
    fast: Settings,
    conn: psycopg.Connection[Any],
    registry: Registry,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # chunks of 2 rows: a correction may be in the next chunk
    monkeypatch.setattr(flows.migration, "CHUNK_ROWS", 2)
    source = tmp_path / "items.csv"
    source.write_text(
        "sku,brand_code,name,standard_cost,price\n"
        "BR1-0001,BR1,Shirt,-1,2\n"  # 1: a bad cost
        "BR1-0001,BR1,Shirt,1,2\n"  # 2: corrected: loads
        "BR1-0002,BR9,Socks,1,2\n"  # 3: unknown brand
        "BR1-0002,BR1,Socks,2,3\n"  # 4: corrected, in the next chunk: loads
        'BR1-0003,BR1,"Hat"s,1,2\n'  # 5: a stray quote
        "BR1-0003,BR1,Hat,3,4\n"  # 6: corrected: loads
        "BR1-0001,BR1,Shirt again,5,6\n"  # 7: a duplicate of the valid row 2
        "BR1-0004,BR1,Scarf,1\n"  # 8: too few columns
        "BR1-0004,BR1,Scarf,4,5\n",  # 9: corrected: loads
        encoding="utf-8",
    )
    result = run(fast, conn, registry, source, "items")
    assert (result["rows"], result["inserted"], result["rejected"]) == (9, 4, 5)
    got = rejects(conn)
    assert set(got) == {1, 3, 5, 7, 8}
    assert "standard_cost" in got[1][0]
    assert got[3][0] == "unknown brand BR9"
    assert "quote" in got[5][0]
    assert got[7][0] == "duplicate of row 2 (sku BR1-0001)"
    assert got[8][0] == "row has 4 columns, the header has 5"
    items = conn.execute("SELECT sku, name, standard_cost FROM erp_items ORDER BY sku").fetchall()
    assert [(r["sku"], r["name"], str(r["standard_cost"])) for r in items] == [
        ("BR1-0001", "Shirt", "1.0000"),
        ("BR1-0002", "Socks", "2.0000"),
        ("BR1-0003", "Hat", "3.0000"),
        ("BR1-0004", "Scarf", "4.0000"),
    ]


@pytest.mark.usefixtures("brand")
def test_migration__a_corrected_opening_balance_after_a_rejected_one_loads(
    fast: Settings,
    conn: psycopg.Connection[Any],
    registry: Registry,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(flows.migration, "CHUNK_ROWS", 2)
    conn.execute("INSERT INTO erp_items VALUES (1, 1, 'BR1-0001', 'Shirt', 12.5, 29.9)")
    source = tmp_path / "opening.csv"
    source.write_text(
        "store_code,sku,period,qty,value\n"
        "ST001,BR1-0001,2026-11,0,50.00\n"  # 1: value without quantity
        "ST001,BR1-0001,2026-11,4,50.00\n"  # 2: corrected: loads
        "ST001,BR1-0001,2026-11,5,60.00\n",  # 3: a duplicate of row 2
        encoding="utf-8",
    )
    result = run(fast, conn, registry, source, "opening-balances")
    assert (result["inserted"], result["rejected"]) == (1, 2)
    got = rejects(conn)
    assert "qty" in got[1][0] and "50.00" in got[1][0]
    assert got[3][0] == "duplicate of row 2 (store_code ST001, sku BR1-0001, period 2026-11)"
    balance = conn.execute("SELECT qty, value FROM erp_opening_balances").fetchone()
    assert balance is not None and (str(balance["qty"]), str(balance["value"])) == (
        "4.000",
        "50.00",
    )


# -- opening balances: a quantity and the value of that quantity ---------------------------


@pytest.mark.usefixtures("brand")
def test_migration__opening_balances_that_cannot_be_stock_are_rejected_naming_the_values(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry, tmp_path: Path
) -> None:
    for n in range(1, 10):
        conn.execute("INSERT INTO erp_items VALUES (%s, 1, %s, 'Item', 1, 2)", (n, f"BR1-{n:04d}"))
    source = tmp_path / "opening.csv"
    source.write_text(
        "store_code,sku,period,qty,value\n"
        "ST001,BR1-0001,2026-11,0,50.00\n"  # 1: 0 units worth 50.00
        "ST001,BR1-0002,2026-11,,50.00\n"  # 2: a value without a quantity
        "ST001,BR1-0003,2026-11,-2,-25.00\n"  # 3: negative stock
        "ST001,BR1-0004,2026-11,-2,0\n"  # 4: negative stock, no value
        "ST001,BR1-0005,2026-11,3,-1.00\n"  # 5: a quantity worth less than nothing
        "ST001,BR1-0006,2026-11,3,\n"  # 6: a quantity without a value
        "ST001,BR1-0007,2026-11,3,36.00\n"  # 7: fine
        "ST001,BR1-0008,2026-11,0,0\n"  # 8: no stock, worth nothing: fine
        "ST001,BR1-0009,2026-11,0,-0.00\n",  # 9: no stock, worth nothing: fine
        encoding="utf-8",
    )
    result = run(fast, conn, registry, source, "opening-balances")
    assert (result["inserted"], result["rejected"]) == (3, 6)
    got = rejects(conn)
    assert set(got) == {1, 2, 3, 4, 5, 6}
    assert "qty 0" in got[1][0] and "value 50.00" in got[1][0], got[1][0]
    assert "qty" in got[2][0] and "no value" in got[2][0], got[2][0]
    assert "qty" in got[3][0] and "-2" in got[3][0] and "0 or more" in got[3][0], got[3][0]
    assert "qty" in got[4][0] and "-2" in got[4][0], got[4][0]
    assert "value" in got[5][0] and "-1.00" in got[5][0] and "0 or more" in got[5][0], got[5][0]
    assert "value" in got[6][0] and "no value" in got[6][0], got[6][0]
    loaded = conn.execute(
        "SELECT i.sku, b.qty, b.value FROM erp_opening_balances AS b"
        " JOIN erp_items AS i ON i.id = b.item_id ORDER BY i.sku"
    ).fetchall()
    assert [(r["sku"], str(r["qty"]), str(r["value"])) for r in loaded] == [
        ("BR1-0007", "3.000", "36.00"),
        ("BR1-0008", "0.000", "0.00"),
        ("BR1-0009", "0.000", "0.00"),
    ]


# -- hostile strings stay byte-exact ---------------------------------------------------------

HOSTILE = [
    "Robert'); DROP TABLE erp_items;--",
    "back\\slash \\N \\. %s %(key)s {0}",
    "tab\tinside",
    'say "hi"',
    "two\r\nlines",
    "bare\rreturn",
    "\u202eevil\u202c rtl",
    "zero\u200bwidth \ufeff bom",
    "emoji \U0001f600 and e\u0301",
    "trailing nbsp\u00a0",
    "\u3000ideographic spaces\u3000",
    "line\u2028separator",
    "unit\x1fseparator\x1f",
    "  padded, quoted  ",
    "<img src=x onerror=alert(1)>",
    "=1+1",
]


@pytest.mark.usefixtures("brand")
def test_migration__hostile_values_are_stored_byte_exact(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry, tmp_path: Path
) -> None:
    source = tmp_path / "items.csv"
    with source.open("w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, quoting=csv.QUOTE_ALL, lineterminator="\r\n")
        writer.writerow(["sku", "brand_code", "name", "standard_cost", "price"])
        for n, name in enumerate(HOSTILE, start=1):
            writer.writerow([f"BR1-{n:04d}", "BR1", name, "1", "2"])
    result = run(fast, conn, registry, source, "items")
    assert (result["inserted"], result["rejected"]) == (len(HOSTILE), 0)
    names = conn.execute("SELECT sku, name FROM erp_items ORDER BY sku").fetchall()
    assert [r["name"] for r in names] == HOSTILE

    # rejected (a negative price), each keeps its original text, byte for byte
    lines = []
    for n, name in enumerate(HOSTILE, start=1):
        text = io.StringIO(newline="")
        csv.writer(text, quoting=csv.QUOTE_ALL, lineterminator="").writerow(
            [f"BR1-{n:04d}", "BR1", name, "1", "-2"]
        )
        lines.append(text.getvalue())
    source.write_bytes(
        "\r\n".join(["sku,brand_code,name,standard_cost,price", *lines]).encode("utf-8")
    )
    result = run(fast, conn, registry, source, "items")
    assert (result["inserted"], result["rejected"]) == (0, len(HOSTILE))
    assert [raw for _, raw in rejects(conn).values()] == lines
    with Path(result["rejects_file"]).open(encoding="utf-8", newline="") as f:
        written = [r[2] for r in list(csv.reader(f))[1:]]
    assert written == lines, "the rejects file holds them too (quoted: no formula starts them)"


@pytest.mark.usefixtures("brand")
def test_migration__a_rejected_row_longer_than_the_kept_text_says_so(
    fast: Settings,
    conn: psycopg.Connection[Any],
    registry: Registry,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(flows.erp.csvfile, "FIELD_LIMIT", 50)
    monkeypatch.setattr(flows.erp.csvfile, "RAW_LIMIT", 100)
    line = "BR1-0001,BR1," + "y" * 500 + ",1,2"
    source = tmp_path / "items.csv"
    source.write_text(
        f"sku,brand_code,name,standard_cost,price\n{line}\nBR1-0002,BR1,Fine,1,2\n",
        encoding="utf-8",
    )
    result = run(fast, conn, registry, source, "items")
    assert (result["inserted"], result["rejected"]) == (1, 1)
    reason, raw = rejects(conn)[1]
    assert "column 3 (name): a value of 500 characters" in reason and "at most 50" in reason
    assert f"its text is {len(line)} characters; the rejects keep the first 100" in reason
    assert raw == line[:100]
