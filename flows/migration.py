"""Data migration: load legacy CSV exports into the ERP, idempotently.

``engine submit migration --source items.csv --kind items|opening-balances``

The file is split into chunks of rows (one step run each). Every row is
validated on its own (pydantic); valid rows are upserted by their natural key
(items: ``sku``; opening balances: store, item, period), and an upsert that
would change nothing writes nothing, so a rerun of the same file changes
nothing. Rejected rows are kept with their reason and written beside the
reports as ``migration-<checksum>-rejects.csv`` (in ``ENGINE_REPORTS_DIR``, or
under ``ENGINE_REPORTS_URL`` on S3), with cells that a spreadsheet would run as
formulas neutralised.

Opening balances respect the books (:mod:`flows.erp.periods`): they are
loaded only into a store's first period, while that period is open and the
store is not costed for it; a row for a costed or closed period, or for a
period whose openings costing carried forward, is rejected with the reason,
never written over.

Workers read the file, so it must be on storage they share (a mounted
volume). Its sha256 is taken when the job plans; a chunk that finds a
different file fails rather than mixing two versions.
"""

from __future__ import annotations

import csv
import hashlib
import io
import itertools
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from engine import Fail, Flow, StepContext, write_report_file
from flows.erp.queries import NamedQueries
from flows.erp.types import Period

_q = NamedQueries("migration")

CHUNK_ROWS = 1000
Kind = Literal["items", "opening-balances"]


class MigrationParams(BaseModel):
    source: str = Field(description="CSV file to load (on storage the workers share)")
    kind: Kind = Field(description="what the file holds: items or opening-balances")


class ItemRow(BaseModel):
    sku: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    brand_code: str = Field(min_length=1, max_length=32)
    name: str = Field(min_length=1, max_length=200)
    standard_cost: Decimal = Field(ge=0, max_digits=14, decimal_places=4)
    price: Decimal = Field(ge=0, max_digits=14, decimal_places=2)


class OpeningRow(BaseModel):
    store_code: str = Field(min_length=1, max_length=32)
    sku: str = Field(min_length=1, max_length=64)
    period: Period
    qty: Decimal = Field(max_digits=14, decimal_places=3)
    value: Decimal = Field(max_digits=16, decimal_places=2)


MODELS: dict[str, type[ItemRow] | type[OpeningRow]] = {
    "items": ItemRow,
    "opening-balances": OpeningRow,
}


class Chunk(BaseModel):
    first_row: int  # 1-based data row (the header is row 0)
    rows: int


class MigrationPlan(BaseModel):
    source: str
    kind: Kind
    sha256: str
    rows: int
    chunks: list[Chunk]


class ChunkLoaded(BaseModel):
    first_row: int
    inserted: int
    updated: int
    unchanged: int
    rejected: int


class MigrationSummary(BaseModel):
    kind: Kind
    source: str
    sha256: str
    rows: int
    inserted: int
    updated: int
    unchanged: int
    rejected: int
    rejects_file: str | None


flow = Flow(
    "migration",
    params=MigrationParams,
    description="Load legacy items or opening balances from CSV; upsert by natural key.",
)


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _rows(path: Path) -> Iterator[dict[str, str]]:
    with path.open(newline="", encoding="utf-8-sig") as f:
        yield from csv.DictReader(f)


def _key(plan: MigrationPlan) -> str:
    return f"{plan.kind}:{plan.sha256}"


@flow.step()
def plan(params: MigrationParams) -> MigrationPlan:
    """Check the file and its header; split it into chunks of rows."""
    path = Path(params.source)
    if not path.is_file():
        raise Fail(f"source file {params.source!r} does not exist (or is not a file)")
    expected = list(MODELS[params.kind].model_fields)
    with path.open(newline="", encoding="utf-8-sig") as f:
        header = next(csv.reader(f), [])
    missing = [c for c in expected if c not in header]
    if missing:
        raise Fail(
            f"{params.source}: missing column(s) {', '.join(missing)} for kind "
            f"{params.kind!r}; expected header: {','.join(expected)}"
        )
    total = sum(1 for _ in _rows(path))
    chunks = [
        Chunk(first_row=start, rows=min(CHUNK_ROWS, total - start + 1))
        for start in range(1, total + 1, CHUNK_ROWS)
    ]
    return MigrationPlan(
        source=str(path.resolve()),
        kind=params.kind,
        sha256=_digest(path),
        rows=total,
        chunks=chunks,
    )


def _problems(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']} (got {e.get('input')!r})"
        for e in exc.errors()
    )


@flow.step(map_over="plan.chunks")
def load_chunk(chunk: Chunk, plan: MigrationPlan, ctx: StepContext) -> ChunkLoaded:
    """Validate each row of the chunk; upsert the valid ones; record the rejects."""
    path = Path(plan.source)
    if not path.is_file() or _digest(path) != plan.sha256:
        raise Fail(f"{plan.source} changed since the job started (sha256 differs); resubmit")
    model = MODELS[plan.kind]
    fields = list(model.model_fields)
    valid: list[tuple[Any, ...]] = []
    rejects: list[tuple[int, str, str]] = []
    window = itertools.islice(_rows(path), chunk.first_row - 1, chunk.first_row - 1 + chunk.rows)
    for number, raw in enumerate(window, start=chunk.first_row):
        text = ",".join(str(v) for v in raw.values())
        try:
            row = model.model_validate({k: (raw.get(k) or "").strip() for k in fields})
        except ValidationError as exc:
            rejects.append((number, _problems(exc), text))
            continue
        valid.append((number, *row.model_dump().values()))
    conn = ctx.conn
    if plan.kind == "items":
        _q.execute(conn, "items_lock")
        _q.execute(conn, "staged_items_create")
        _copy(ctx, "staged_items", ["row_number", *fields], valid)
        for r in _q.rows(conn, "staged_items_unknown_brand"):
            rejects.append((r["row_number"], f"unknown brand {r['brand_code']}", ""))
        counts = _q.one(conn, "items_upsert_from_staged")
    else:
        _q.execute(conn, "staged_openings_create")
        _copy(ctx, "staged_openings", ["row_number", *fields], valid)
        for r in _q.rows(conn, "staged_openings_unresolved"):
            rejects.append((r["row_number"], r["reason"], ""))
        for statement in ("openings_lock_periods", "openings_claim_first_periods"):
            _q.execute(conn, statement)
        _q.execute(conn, "openings_lock_store_periods")
        # parameters given (none), so psycopg reads the statement's %% as %
        for r in _q.rows(conn, "staged_openings_refused", {}):
            rejects.append((r["row_number"], r["reason"], ""))
        counts = _q.one(conn, "openings_upsert_from_staged")
    inserted, updated = int(counts["inserted"]), int(counts["updated"])
    if rejects:
        by_row = {n: raw for n, _, raw in rejects if raw}
        _q.execute(
            conn,
            "rejects_insert",
            {
                "key": _key(plan),
                "rows": [n for n, _, _ in rejects],
                "reasons": [reason for _, reason, _ in rejects],
                "raws": [by_row.get(n) or _raw_row(path, n) for n, _, _ in rejects],
            },
        )
    rejected = len({n for n, _, _ in rejects})
    return ChunkLoaded(
        first_row=chunk.first_row,
        inserted=inserted,
        updated=updated,
        unchanged=chunk.rows - rejected - inserted - updated,
        rejected=rejected,
    )


def _raw_row(path: Path, number: int) -> str:
    row = next(itertools.islice(_rows(path), number - 1, number), {})
    return ",".join(str(v) for v in row.values())


def _copy(ctx: StepContext, table: str, columns: list[str], rows: list[tuple[Any, ...]]) -> None:
    from psycopg import sql

    statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
        sql.Identifier(table), sql.SQL(", ").join(map(sql.Identifier, columns))
    )
    with ctx.conn.cursor().copy(statement) as copy:
        for row in rows:
            copy.write_row(row)


def _neutralise(cell: str) -> str:
    # a cell starting like a formula would run in a spreadsheet (=cmd|...)
    return "'" + cell if cell[:1] in ("=", "+", "-", "@", "\t", "\r") else cell


@flow.step(after=["load_chunk", "plan"])
def report(loaded: list[ChunkLoaded], plan: MigrationPlan, ctx: StepContext) -> MigrationSummary:
    """Totals, and the rejected rows written to a CSV file beside the report."""
    rows = _q.rows(ctx.conn, "rejects_select", {"key": _key(plan)})
    rejects_file = None
    if rows:
        text = io.StringIO(newline="")
        writer = csv.writer(text)
        writer.writerow(["row", "reason", "raw"])
        for r in rows:
            writer.writerow([r["row_number"], _neutralise(r["reason"]), _neutralise(r["raw"])])
        # a path, or s3://bucket/prefix/... when the reports go to S3
        rejects_file = write_report_file(
            f"migration-{plan.sha256[:12]}-rejects.csv", text.getvalue()
        )
    return MigrationSummary(
        kind=plan.kind,
        source=plan.source,
        sha256=plan.sha256,
        rows=plan.rows,
        inserted=sum(c.inserted for c in loaded),
        updated=sum(c.updated for c in loaded),
        unchanged=sum(c.unchanged for c in loaded),
        rejected=sum(c.rejected for c in loaded),
        rejects_file=rejects_file,
    )
