"""Backdated documents recosted forward, exactly and only where they reach (issue 36).

**Stale marks.** A document that moves stock may be posted into a period
whose stock is costed (status ``costed``, not closed). Its posting chunk
marks, in its own transaction (:func:`mark_documents`, so a mark is never
lost), the (store, item) pairs whose figures it changes
(``erp_stale_pairs``):

- the pairs it moves;
- the pairs their transfers out of the same item in that period reach,
  transitively (a receiver's average is made of its senders' averages;
  a loop is reached whole);
- the same pairs in the next period while it is costed (its opening is
  their closing), and what their transfers reach there, and so on.

A pair marked already keeps its mark: a hundred corrections of one item
before the next costing make one recompute. Upstream stores are not marked:
their averages do not depend on a receiver's.

**Recost.** The next costing of the period (``engine submit costing
--period P``, or the close's costing child) runs :func:`recost` in its step
``recost``: for P and then each later period with stale pairs, in order, it

1. solves again the averages of the stale pairs' items that move between
   stores, for every store of their transfer graph (:func:`flows.erp.inventory.solve_items`;
   an upstream store's average comes out the same);
2. recomputes the item costs of the stale pairs by the method of the
   store's costing statement (``item_costs_recost_pairs``);
3. posts per store touched one **delta journal** (source ``costing``, key
   ``recost:<period>:<store>:<job>``): what its item costs now say its
   costing journals hold in COGS (5000), stock counts (5100) and the
   inter-store account (1350), less what they hold, against inventory
   (1300); the old journals untouched;
4. carries the new closings to the next period's openings and marks the
   pairs whose opening changed there when it is costed (so a recost never
   relies on the marks posting made for later periods);
5. keeps the period's new facts fingerprint, the stores it recosted hashed
   again (:func:`flows.erp.facts.refresh`), and clears the marks it recosted.

All of it in the step's fenced transaction: a worker killed at any point
leaves nothing, and the step's next attempt recosts the same pairs from the
same facts.

**Locks.** The recost takes the rows of P and every later period ``FOR NO
KEY UPDATE``, in period order; posting share-locks them in the same order
before it marks (``stale_periods_lock_for_marking``). A posting in flight
is waited for and included; one that comes after waits for the recost's
commit and marks its pairs for the next one. Never lost, and no deadlock.

A later period is not costed while an earlier one has stale pairs
(:func:`refuse_if_earlier_stale`): its openings are stale too. The books
check names a period with stale pairs and the close refuses it until it is
recosted (:mod:`flows.erp.checks`).
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from datetime import datetime
from decimal import Decimal
from typing import Any

import psycopg
from pydantic import BaseModel, Field

from engine import Refused
from flows.erp import facts, inventory, ledger
from flows.erp.inventory import StoreRef
from flows.erp.ledger import ACCOUNTS, Journal
from flows.erp.queries import NamedQueries
from flows.erp.types import next_period

__all__ = [
    "LISTED",
    "PairRecost",
    "RecostJournal",
    "RecostReport",
    "Stale",
    "earliest_before",
    "mark_documents",
    "mark_pairs",
    "recost",
    "refuse_if_earlier_stale",
    "stale",
]

_q = NamedQueries("recost")

LISTED = 500
"""Pairs listed in a recost's report (the counts stay exact)."""
BULK_PAIRS = 2_000
"""Beyond this many pairs a period's carry joins by hashing (few pairs: the planner's probes)."""


class Stale(BaseModel):
    """A period's stale pairs: how many, since when."""

    period: str
    pairs: int
    since: datetime

    def why(self) -> str:
        return (
            f"{self.pairs} pair(s) stale since {self.since:%Y-%m-%d %H:%M:%S %Z}; "
            f"run engine submit costing --period {self.period}"
        )


class PairRecost(BaseModel):
    """One (store, item) pair recosted: its old and new figures, and the journal of the
    difference."""

    period: str
    store: str
    sku: str
    old_average: Decimal | None
    new_average: Decimal
    old_cogs: Decimal
    new_cogs: Decimal
    old_closing: Decimal
    new_closing: Decimal
    journal: str | None = Field(description="source key of the store's delta journal, if any")


class RecostJournal(BaseModel):
    """One delta journal: the store's difference in COGS and transfers in one period."""

    period: str
    store: str
    source_key: str
    id: int
    cogs: Decimal = Field(description="to 5000, against 1300")
    adjustments: Decimal = Field(description="stock counts, to 5100, against 1300")
    inter_store: Decimal = Field(description="transfers out - in, to 1350, against 1300")


class RecostReport(BaseModel):
    """What one costing recosted: the periods, the pairs (first :data:`LISTED`), the
    journals."""

    period: str
    periods: list[str] = []
    pairs: int = 0
    items_solved: int = Field(default=0, description="moving items whose averages were re-solved")
    journals: list[RecostJournal] = []
    recosted: list[PairRecost] = []


def mark_documents(conn: psycopg.Connection[Any], documents: list[int]) -> int:
    """Mark stale what these just-posted documents change in costed periods; pairs new marked.

    In the posting chunk's transaction, after their stock moves are written.
    Nothing when none of their moves falls in a costed period.
    """
    if not documents:
        return 0
    found = _q.rows(conn, "stale_costed_periods_of_documents", {"documents": documents})
    if not found:
        return 0
    _q.execute(conn, "stale_periods_lock_for_marking", {"period": found[0]["period"]})
    row = _q.one(
        conn,
        "stale_mark_reach",
        {"documents": documents, "periods": [], "stores": [], "items": []},
    )
    return int(row["marked"])


def mark_pairs(conn: psycopg.Connection[Any], period: str, pairs: list[tuple[int, int]]) -> int:
    """Mark stale (store, item) ``pairs`` of ``period`` (when it is costed) and what they
    reach; pairs new marked. The caller holds the rows of ``period`` and later periods."""
    if not pairs:
        return 0
    row = _q.one(
        conn,
        "stale_mark_reach",
        {
            "documents": [],
            "periods": [period] * len(pairs),
            "stores": [s for s, _ in pairs],
            "items": [i for _, i in pairs],
        },
    )
    return int(row["marked"])


def stale(conn: psycopg.Connection[Any], period: str) -> Stale | None:
    """``period``'s stale pairs, or ``None`` when its costs are up to date."""
    row = _q.one(conn, "stale_summary", {"period": period})
    if not row["pairs"]:
        return None
    return Stale(period=period, pairs=row["pairs"], since=row["since"])


def earliest_before(conn: psycopg.Connection[Any], period: str) -> Stale | None:
    """The earliest period before ``period`` with stale pairs, or ``None``."""
    row = _q.first(conn, "stale_earliest_before", {"period": period})
    return None if row is None else Stale.model_validate(row)


def refuse_if_earlier_stale(conn: psycopg.Connection[Any], period: str) -> None:
    """:class:`engine.Refused` when an earlier period has stale pairs (``period``'s openings
    are its closings: recost it first)."""
    earlier = earliest_before(conn, period)
    if earlier is not None:
        raise Refused(
            f"cannot cost {period}: {earlier.period} has {earlier.pairs} stale pair(s) since "
            f"{earlier.since:%Y-%m-%d %H:%M:%S %Z} whose closings feed {period}'s openings; "
            f"recost it first (engine submit costing --period {earlier.period})"
        )


def recost(conn: psycopg.Connection[Any], period: str, *, job: uuid.UUID) -> RecostReport:
    """Recost the stale pairs of ``period`` and of each later period, in order (see module).

    In the caller's (fenced) transaction. A report with no periods when
    nothing was stale (then nothing is locked either).
    """
    report = RecostReport(period=period)
    if _q.one(conn, "stale_next_period", {"period": period})["period"] is None:
        # nothing stale (a period costed afresh): no lock taken; a posting that marks pairs
        # after this read leaves them to the next costing, as one that comes after the recost
        return report
    _q.execute(conn, "jit_off_for_transaction")
    _q.execute(conn, "custom_plans_for_transaction")
    rows = _q.rows(conn, "stale_periods_lock_for_recost", {"period": period})
    locked = {r["period"]: r["status"] for r in rows}
    if period not in locked:
        raise Refused(f"period {period} does not exist in erp_periods; nothing to recost")
    if locked[period] == "closed":
        raise Refused(f"period {period} is closed: its costs are never recosted")
    codes = {s.id: s for s in inventory.stores(conn, None)}
    current: str | None = period
    while True:
        row = _q.one(conn, "stale_next_period", {"period": current})
        current = row["period"]
        if current is None:
            break
        if locked.get(current) == "closed":
            raise Refused(f"period {current} is closed but has stale pairs: reopen it first")
        _recost_period(conn, current, job, codes, report)
        current = next_period(current)
    return report


def _recost_period(
    conn: psycopg.Connection[Any],
    period: str,
    job: uuid.UUID,
    stores: dict[int, StoreRef],
    report: RecostReport,
) -> None:
    marks = _q.rows(conn, "stale_pairs_of_period", {"period": period})
    pairs = [(int(r["store_id"]), int(r["item_id"])) for r in marks]
    arrays = {"period": period, "stores": [s for s, _ in pairs], "items": [i for _, i in pairs]}
    touched = sorted({s for s, _ in pairs})
    listed = pairs[: max(0, LISTED - len(report.recosted))]  # the report's, old and new
    shown = {"period": period, "stores": [s for s, _ in listed], "items": [i for _, i in listed]}
    old = {
        (r["store_id"], r["item_id"]): r for r in _q.rows(conn, "item_costs_select_pairs", shown)
    }
    report.items_solved += _solve_again(conn, period, sorted({i for _, i in pairs}), stores)
    _q.one(conn, "item_costs_recost_pairs", arrays)
    new = {
        (r["store_id"], r["item_id"]): r for r in _q.rows(conn, "item_costs_select_pairs", shown)
    }
    keys: dict[int, str] = {}
    by_store = {"period": period, "stores": touched}
    due = {s: t.model_dump() for s, t in inventory.totals_of_stores(conn, period, touched).items()}
    booked = {r["store_id"]: r for r in _q.rows(conn, "costing_booked_by_store", by_store)}
    for s in touched:
        journal = _delta_journal(period, stores[s], job, due.get(s), booked.get(s))
        if journal is None:
            continue
        source_key = journal.journal.source_key
        ledger.post(conn, [journal.journal])
        keys[s] = source_key
        ids = ledger.journal_ids(conn, [source_key])
        report.journals.append(journal.summary(ids[source_key]))
    following = next_period(period)
    bulk = len(pairs) > BULK_PAIRS
    if bulk:
        _q.execute(conn, "hash_joins_only")
    changed = _q.rows(conn, "opening_carry_pairs", {**arrays, "next": following})
    if bulk:
        _q.execute(conn, "hash_joins_done")
    mark_pairs(conn, following, [(int(r["store_id"]), int(r["item_id"])) for r in changed])
    _q.execute(conn, "stale_clear_pairs", arrays)
    facts.refresh(conn, period, touched)
    report.periods.append(period)
    report.pairs += len(pairs)
    for key in listed:
        n = new.get(key)
        if n is None:
            continue
        o = old.get(key)
        report.recosted.append(
            PairRecost(
                period=period,
                store=n["store"],
                sku=n["sku"],
                old_average=None if o is None else o["average_cost"],
                new_average=n["average_cost"],
                old_cogs=Decimal(0) if o is None else o["cogs_value"],
                new_cogs=n["cogs_value"],
                old_closing=Decimal(0) if o is None else o["closing_value"],
                new_closing=n["closing_value"],
                journal=keys.get(key[0]),
            )
        )


def _solve_again(
    conn: psycopg.Connection[Any], period: str, items: list[int], stores: dict[int, StoreRef]
) -> int:
    """Solve again the averages of ``items`` that move between stores; how many there were."""
    moving = [
        (int(r["id"]), str(r["sku"]), r["standard_cost"])
        for r in _q.rows(conn, "stale_moving_items", {"period": period, "items": items})
    ]
    if not moving:
        return 0
    codes = {s.id: s.code for s in stores.values()}
    by_column: dict[str, list[Any]] = defaultdict(list)
    for start in range(0, len(moving), inventory.SOLVE_BATCH):
        rows, _, _ = inventory.solve_items(
            conn, period, moving[start : start + inventory.SOLVE_BATCH], codes
        )
        for _, item, store, cost, source, group in rows:
            by_column["items"].append(item)
            by_column["stores"].append(store)
            by_column["costs"].append(cost)
            by_column["froms"].append(source)
            by_column["groups"].append(group)
    _q.execute(conn, "averages_upsert", {"period": period, **by_column})
    return len(moving)


class _Delta(BaseModel):
    """A store's delta journal and its figures, before it has an id."""

    journal: Journal
    store: str
    cogs: Decimal
    adjustments: Decimal
    inter_store: Decimal

    def summary(self, journal_id: int) -> RecostJournal:
        return RecostJournal(
            period=self.journal.period,
            store=self.store,
            source_key=self.journal.source_key,
            id=journal_id,
            cogs=self.cogs,
            adjustments=self.adjustments,
            inter_store=self.inter_store,
        )


_NOTHING = {"cogs_value": 0, "adjustment_value": 0, "transfer_in_value": 0, "transfer_out_value": 0}
_NONE_BOOKED = {"cogs": 0, "adjustments": 0, "inter_store": 0}


def _delta_journal(
    period: str,
    store: StoreRef,
    job: uuid.UUID,
    due: dict[str, Any] | None,
    booked: dict[str, Any] | None,
) -> _Delta | None:
    """What the store's item costs now say its costing journals hold (``due``: COGS, stock
    counts, transfers in and out), less what they hold (``booked``, net debit per account),
    as one journal with the lines of :func:`flows.erp.inventory.costing_journals`; ``None``
    if nil. Against the ledger, not the old item costs: a stock count posted late changes the
    5000/5100 split of a COGS the old figures cannot tell."""
    due, booked = due or _NOTHING, booked or _NONE_BOOKED
    inv, inter = ACCOUNTS["inventory"], ACCOUNTS["inter_store"]
    adjustments = Decimal(due["adjustment_value"]) - Decimal(booked["adjustments"])
    cogs = Decimal(due["cogs_value"]) - Decimal(due["adjustment_value"]) - Decimal(booked["cogs"])
    inter_store = (
        Decimal(due["transfer_out_value"])
        - Decimal(due["transfer_in_value"])
        - Decimal(booked["inter_store"])
    )
    s = store.id
    lines = [
        *ledger.transfer(ACCOUNTS["cogs"], inv, s, cogs),
        *ledger.transfer(ACCOUNTS["adjustments"], inv, s, adjustments),
        *ledger.transfer(inter, inv, s, inter_store),
    ]
    if not lines:
        return None
    journal = Journal(
        period=period,
        source="costing",
        source_key=f"recost:{period}:{store.code}:{job}",
        store_id=s,
        memo=f"recost of {period}: difference in cost of goods sold and transfers",
        lines=lines,
    )
    return _Delta(
        journal=journal,
        store=store.code,
        cogs=cogs,
        adjustments=adjustments,
        inter_store=inter_store,
    )
