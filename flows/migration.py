"""Data migration: load legacy CSV exports into the ERP, idempotently.

``engine submit migration --source items.csv --kind items|opening-balances
[--encoding utf-8]``

Data errors are the data's, not an incident. The file as a whole is checked
at submit (its admission check: nothing is written and ``engine submit``
exits 2 when it is refused) and again when the job plans, in case it changed
in between: it must exist, decode in its stated encoding (the first bad byte
is named by offset and line; with ``utf-8``, a byte order mark is accepted),
have the kind's columns in its header, each named once, at least one row,
and no quote that is never closed (it would make the rest of the file one
value: the refusal names the line and column where it opens). A file
refused once the job runs fails the job once with the reason
(:class:`engine.Reject`): no retry, no dead letter, no alert.

Anything else wrong is the row's, not the file's (:mod:`flows.erp.csvfile`
reads each record to its end whatever it holds; :mod:`flows.erp.legacy_csv`
checks the file and its rows). Every row is checked on its
own, and rejected with a reason naming the value and what would be valid: a
stray quote (``ba"d``, ``"a"b``: a quote inside a value is written in quotes,
doubled), its column count against the header's, a value over
:data:`~flows.erp.csvfile.FIELD_LIMIT` characters (with its size), a NUL
character in any column, an empty value, its cells (pydantic: each field's
description says what is valid) and, for opening balances, the numbers
stating stock: ``qty`` 0 or more, ``value`` 0 or more, and 0 when ``qty`` is
0 (a value without a quantity). A value written without quotes is read
without the spaces and tabs around it; a quoted value exactly as written.

A natural key (items: ``sku``; opening balances: store, item, period) is
taken by its first *valid* row, one that passes every check above and names
a brand (or store, item and period) that exists: a later valid row stating
it again is rejected as a "duplicate of row N", across chunks too (found
when the job plans), while a row that corrects an earlier rejected one
loads. The file is split into chunks of rows (one step run each). Valid
rows are upserted by their natural key, and an upsert that would change
nothing writes nothing, so a rerun of the same file changes nothing. An
existing item whose standard cost the file changes is updated (the file is
the new truth) and listed old -> new in the summary. Rejected rows are kept
with their reason and their original text, exactly as in the file (the
first :data:`~flows.erp.csvfile.RAW_LIMIT` characters of a longer one, the
reason saying so), and written beside the reports as
``migration-<checksum>-rejects.csv`` (in ``ENGINE_REPORTS_DIR``, or under
``ENGINE_REPORTS_URL`` on S3), with cells that a spreadsheet would run as
formulas neutralised.

Opening balances respect the books (:mod:`flows.erp.periods`): they are
loaded only into a store's first period, while that period is open and the
store is not costed for it; a row for a costed or closed period, or for a
period whose openings costing carried forward, is rejected with the reason,
never written over.

Workers read the file, so it must be on storage they share (a mounted
volume) and, for the submit's check, on the submitting machine too. Its
sha256 is taken when the job plans; a chunk that finds a different file
rejects it rather than mixing two versions.
"""

from __future__ import annotations

import codecs
import csv
import io
import itertools
from decimal import Decimal
from typing import Any

import psycopg
from pydantic import BaseModel, Field, field_validator

from engine import Flow, Refused, Reject, StepContext, write_report_file
from flows.erp import csvfile, facts
from flows.erp.csvfile import Record
from flows.erp.legacy_csv import KEYS, ItemRow, Kind, Source
from flows.erp.queries import NamedQueries

_q = NamedQueries("migration")

CHUNK_ROWS = 1000
MAX_LISTED = 200  # cost changes listed in the summary; ``cost_changed`` is the full count


class MigrationParams(BaseModel):
    source: str = Field(description="CSV file to load (on storage the workers share)")
    kind: Kind = Field(description="what the file holds: items or opening-balances")
    encoding: str = Field(
        default="utf-8",
        description="the file's text encoding, a Python codec name (utf-8, cp1252, latin-1, "
        "utf-16, ...); a UTF-8 file may start with a byte order mark",
    )

    @field_validator("encoding")
    @classmethod
    def _known_encoding(cls, value: str) -> str:
        try:
            name = codecs.lookup(value).name
            b"".decode(name)  # a text encoding, not a bytes-to-bytes codec (base64)
        except LookupError:
            raise ValueError(
                f"unknown text encoding {value!r}: give a Python codec name, "
                "e.g. utf-8, cp1252, latin-1 or utf-16"
            ) from None
        return name


class Chunk(BaseModel):
    first_row: int  # 1-based data row (the header is row 0)
    rows: int


class MigrationPlan(BaseModel):
    source: str
    kind: Kind
    encoding: str = "utf-8"
    sha256: str
    rows: int
    chunks: list[Chunk]


class CostChange(BaseModel):
    """An existing item whose standard cost the file changes (the file is the new truth)."""

    row: int
    sku: str
    old: Decimal
    new: Decimal


class ChunkLoaded(BaseModel):
    first_row: int
    inserted: int
    updated: int
    unchanged: int
    rejected: int
    cost_changed: int = 0
    cost_changes: list[CostChange] = Field(default_factory=list)


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
    cost_changed: int = Field(default=0, description="items whose standard cost changed")
    cost_changes: list[CostChange] = Field(
        default_factory=list,
        description=f"the first {MAX_LISTED} by row; `cost_changed` is the full count",
    )


flow = Flow(
    "migration",
    # 3: openings and standard costs are refused while a period is being costed
    version=3,
    params=MigrationParams,
    description="Load legacy items or opening balances from CSV; upsert by natural key.",
)


def _storable(raw: str) -> str:
    # text cannot hold NUL: shown as the symbol for null (the reason names it)
    return raw.replace("\x00", "\u2400")


def _cut(record: Record) -> str:
    """What a reason adds when the record's text is kept cut (memory is bounded)."""
    if record.length <= len(record.raw):
        return ""
    kept = csvfile.RAW_LIMIT
    return f" (its text is {record.length} characters; the rejects keep the first {kept})"


def _rejects_key(plan: MigrationPlan, job_id: object) -> str:
    # the rejects of this job: a rerun of the file lists its own
    return f"{plan.kind}:{plan.sha256}:{job_id}"


# -- the steps ----------------------------------------------------------------------------


@flow.admit
def admit(params: MigrationParams, conn: psycopg.Connection[Any]) -> None:
    """The file can be loaded: there, in its encoding, with the kind's header and rows."""
    source = Source(params.source, params.kind, params.encoding)
    for _ in source.rows():
        pass


# the plan's check that a valid row's references exist, by kind: a row that names an unknown
# brand (or store, item, period) is no valid row, and takes no key
_UNRESOLVED = {
    "items": "staged_keys_delete_unknown_brand",
    "opening-balances": "staged_keys_delete_unresolved_openings",
}


@flow.step()
def plan(params: MigrationParams, ctx: StepContext) -> MigrationPlan:
    """Check the file again; reject the later rows of a key taken; split it into chunks."""
    conn = ctx.conn
    _q.execute(conn, "staged_keys_create")
    try:
        # the file may have changed or vanished since the submit checked it
        source = Source(params.source, params.kind, params.encoding)
        total = 0
        with _q.copy(conn, "staged_keys_copy") as copy:
            for record in source.rows():
                total += 1
                row = source.check(record)
                if isinstance(row, str):
                    continue  # rejected by its chunk, with its reason; it takes no key
                brand = row.brand_code if isinstance(row, ItemRow) else None
                copy.write_row(
                    (record.number, source.key(row), brand, _storable(record.raw), _cut(record))
                )
    except Refused as exc:
        raise Reject(str(exc)) from exc
    chunks = [
        Chunk(first_row=start, rows=min(CHUNK_ROWS, total - start + 1))
        for start in range(1, total + 1, CHUNK_ROWS)
    ]
    planned = MigrationPlan(
        source=str(source.path.resolve()),
        kind=params.kind,
        encoding=params.encoding,
        sha256=source.sha256,
        rows=total,
        chunks=chunks,
    )
    _q.execute(conn, _UNRESOLVED[params.kind])
    _q.execute(
        conn,
        "rejects_insert_duplicates",
        {"key": _rejects_key(planned, ctx.job_id), "names": list(KEYS[params.kind])},
    )
    _q.execute(conn, "staged_keys_drop")
    return planned


@flow.step(map_over="plan.chunks")
def load_chunk(chunk: Chunk, plan: MigrationPlan, ctx: StepContext) -> ChunkLoaded:
    """Validate each row of the chunk; upsert the valid ones; record the rejects."""
    try:
        source = Source(plan.source, plan.kind, plan.encoding)
    except Refused as exc:
        raise Reject(f"{plan.source} changed since the job planned it: {exc}") from exc
    if source.sha256 != plan.sha256:
        raise Reject(
            f"{plan.source} changed since the job planned it (its sha256 differs); a job loads "
            "one version of a file: submit the new one as a new job"
        )
    conn = ctx.conn
    key = _rejects_key(plan, ctx.job_id)
    last = chunk.first_row + chunk.rows - 1
    window = {"key": key, "first": chunk.first_row, "last": last}
    duplicates = {r["row_number"] for r in _q.rows(conn, "rejects_select_rows_between", window)}
    read: dict[int, Record] = {}
    valid: list[tuple[Any, ...]] = []
    rejects: list[tuple[int, str]] = []
    for record in itertools.islice(source.rows(), chunk.first_row - 1, last):
        if record.number in duplicates:
            continue  # rejected when the job planned
        read[record.number] = record
        row = source.check(record)
        if isinstance(row, str):
            rejects.append((record.number, row))
            continue
        valid.append((record.number, *row.model_dump().values()))
    changes: list[dict[str, Any]] = []
    if plan.kind == "items":
        _q.execute(conn, "items_lock")
        _q.execute(conn, "staged_items_create")
        with _q.copy(conn, "staged_items_copy") as copy:
            for staged in valid:
                copy.write_row(staged)
        for r in _q.rows(conn, "staged_items_unknown_brand"):
            rejects.append((r["row_number"], f"unknown brand {r['brand_code']}"))
        rejects += facts.refuse_cost_changes(conn)  # none while a period is being costed
        changes = _q.rows(conn, "staged_items_cost_changes")
        counts = _q.one(conn, "items_upsert_from_staged")
        _q.execute(conn, "staged_items_drop")
    else:
        _q.execute(conn, "staged_openings_create")
        with _q.copy(conn, "staged_openings_copy") as copy:
            for staged in valid:
                copy.write_row(staged)
        for r in _q.rows(conn, "staged_openings_unresolved"):
            rejects.append((r["row_number"], r["reason"]))
        for statement in ("openings_lock_periods", "openings_claim_first_periods"):
            _q.execute(conn, statement)
        _q.execute(conn, "openings_lock_store_periods")
        # parameters given (none), so psycopg reads the statement's %% as %
        for r in _q.rows(conn, "staged_openings_refused", {}):
            rejects.append((r["row_number"], r["reason"]))
        counts = _q.one(conn, "openings_upsert_from_staged")
        _q.execute(conn, "staged_openings_drop")
    inserted, updated = int(counts["inserted"]), int(counts["updated"])
    if rejects:
        _q.execute(
            conn,
            "rejects_insert",
            {
                "key": key,
                "rows": [n for n, _ in rejects],
                "reasons": [reason + _cut(read[n]) for n, reason in rejects],
                "raws": [_storable(read[n].raw) for n, _ in rejects],
            },
        )
    rejected = len({n for n, _ in rejects} | duplicates)
    return ChunkLoaded(
        first_row=chunk.first_row,
        inserted=inserted,
        updated=updated,
        unchanged=chunk.rows - rejected - inserted - updated,
        rejected=rejected,
        cost_changed=len(changes),
        cost_changes=[
            CostChange(row=c["row_number"], sku=c["sku"], old=c["old"], new=c["new"])
            for c in changes[:MAX_LISTED]
        ],
    )


def _neutralise(cell: str) -> str:
    # a cell starting like a formula would run in a spreadsheet (=cmd|...); the leading
    # quote keeps it text, and the line after it is still the original, as a person reads it
    return "'" + cell if cell[:1] in ("=", "+", "-", "@", "\t", "\r") else cell


@flow.step(after=["load_chunk", "plan"])
def report(loaded: list[ChunkLoaded], plan: MigrationPlan, ctx: StepContext) -> MigrationSummary:
    """Totals, the cost changes, and the rejected rows written to a CSV file beside the report."""
    rows = _q.rows(ctx.conn, "rejects_select", {"key": _rejects_key(plan, ctx.job_id)})
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
    changes = sorted((c for chunk in loaded for c in chunk.cost_changes), key=lambda c: c.row)
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
        cost_changed=sum(c.cost_changed for c in loaded),
        cost_changes=changes[:MAX_LISTED],
    )
