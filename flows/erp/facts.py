"""Costing never uses stale facts: the facts a period's solve read, locked and fingerprinted.

Costing a period solves the averages of every store at once
(:func:`flows.erp.inventory.solve_averages`), then costs its stores one by
one, perhaps days apart (``--store``). Whatever changes the facts in
between would be costed with averages solved from the old ones. So:

- **Lock.** The solve takes the period's row ``FOR NO KEY UPDATE``
  (:func:`lock_for_solve`); every writer of a period's facts share-locks it
  (posting, a migration of opening balances), so the solve waits for writers
  in flight and a writer that comes after sees the solve.
- **Refuse.** Once a period is being costed (solved, not yet costed) its
  facts are frozen: documents that move stock are refused by posting
  (:func:`flows.erp.document_posting.check_postable`), opening balances by the migration
  flow (the row's reason names the period), and a standard cost change by
  the items migration (:func:`refuse_cost_changes`).
- **Fingerprint.** The solve keeps a fingerprint of what it read
  (:func:`record`: per store the openings, receipts and transfers in of the
  items that move between stores, and every standard cost). Costing a
  store compares it with the facts as they are (:func:`verify`) and fails
  naming what changed rather than mix; ``engine books check`` does too
  (:func:`stale_reason`, the check "facts unchanged since the solve"), so a
  change that bypassed the refusals (SQL, a bug) is named. Standard costs
  count only while the period is being costed: once its stores are costed a
  new standard cost is the next period's.
- **Recost.** A costed period takes backdated documents (:mod:`flows.erp.recost`):
  while it has stale pairs its facts changed by design, the check names the
  stale pairs instead, and its recost keeps the new fingerprint.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import psycopg
from pydantic import BaseModel

from engine import Refused
from flows.erp.queries import NamedQueries

__all__ = [
    "BeingCosted",
    "being_costed",
    "changes",
    "fingerprint",
    "is_solved",
    "lock_for_solve",
    "record",
    "refresh",
    "refuse_cost_changes",
    "stale_reason",
    "verify",
]

_q = NamedQueries("facts")


class BeingCosted(BaseModel):
    """An open period whose costing has started: its averages are solved."""

    period: str
    solved_at: datetime
    costed: int

    def why(self) -> str:
        return (
            f"period {self.period} is being costed (its averages were solved at "
            f"{self.solved_at:%Y-%m-%d %H:%M:%S %Z}, {self.costed} store(s) costed)"
        )


def lock_for_solve(conn: psycopg.Connection[Any], period: str) -> None:
    """Lock ``period``'s row against every writer of its facts, for the solve's transaction."""
    _q.first(conn, "facts_lock_for_solve", {"period": period})


def fingerprint(conn: psycopg.Connection[Any], period: str) -> dict[str, Any]:
    """The fingerprint of ``period``'s facts as they are now (``stores``, ``standard_costs``,
    ``moving``: the items moving between stores)."""
    return dict(_q.one(conn, "facts_fingerprint", {"period": period, "stores": None})["facts"])


def is_solved(conn: psycopg.Connection[Any], period: str) -> bool:
    """Whether ``period``'s averages are solved."""
    return bool(_q.one(conn, "facts_is_solved", {"period": period})["solved"])


def record(conn: psycopg.Connection[Any], period: str) -> None:
    """Keep the fingerprint of the facts ``period``'s averages are being solved from."""
    facts = json.dumps(fingerprint(conn, period))
    _q.execute(conn, "facts_record", {"period": period, "facts": facts})


def refresh(conn: psycopg.Connection[Any], period: str, stores: list[int]) -> None:
    """Keep ``period``'s fingerprint after a recost changed the facts of ``stores`` only.

    A costed period's recost changes the facts of its stale pairs' stores by design: their
    hashes are computed again (an index probe per store, where the whole fingerprint reads
    every receipt of the month: most of a 1M-move recost through a worker); every other
    store keeps the hash of its solve, so a change made to it behind the engine's back is
    still named by the check. The whole fingerprint is taken again when the items moving
    between stores changed (every store holding them hashes them), for an open period
    (its standard costs count) or one fingerprinted before ``moving`` was kept.
    """
    row = _q.first(conn, "facts_solved", {"period": period})
    if row is None:
        return
    kept = row["facts"]
    if kept is None or "moving" not in kept or row["status"] == "open":
        record(conn, period)
        return
    part = _q.one(conn, "facts_fingerprint", {"period": period, "stores": stores})["facts"]
    if part["moving"] != kept["moving"]:
        record(conn, period)
        return
    hashes = {code: h for code, h in kept["stores"].items() if code not in part["asked"]}
    hashes.update(part["stores"])
    kept = {**kept, "stores": dict(sorted(hashes.items()))}
    _q.execute(conn, "facts_record", {"period": period, "facts": json.dumps(kept)})


def changes(solved: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """What differs between two fingerprints, in words: the stores, the standard costs."""
    before, after = solved.get("stores", {}), now.get("stores", {})
    stores = sorted(s for s in set(before) | set(after) if before.get(s) != after.get(s))
    found = []
    if stores:
        shown = ", ".join(stores[:8]) + (f" and {len(stores) - 8} more" if len(stores) > 8 else "")
        found.append(
            f"the openings, receipts or transfers of items moving between stores at {shown}"
        )
    if solved.get("standard_costs") != now.get("standard_costs"):
        found.append("standard costs of items")
    return found


def stale_reason(conn: psycopg.Connection[Any], period: str) -> str | None:
    """Why ``period``'s solved averages are stale (its facts changed since), or ``None``.

    ``None`` too when the period is not solved or was solved before fingerprints,
    and while it has stale pairs (a backdated document changed its facts by
    design: :mod:`flows.erp.recost` recosts them and keeps the new fingerprint,
    and the books check names the stale pairs meanwhile).
    """
    row = _q.first(conn, "facts_solved", {"period": period})
    if row is None or row["facts"] is None:
        return None
    if _q.one(conn, "facts_stale_marks", {"period": period})["stale"]:
        return None
    now = fingerprint(conn, period)
    if row["status"] != "open":
        # costed: its item costs are written, a later standard cost is the next period's
        now["standard_costs"] = row["facts"].get("standard_costs")
    changed = changes(row["facts"], now)
    if not changed:
        return None
    return (
        f"the facts of {period} changed after its averages were solved at "
        f"{row['solved_at']:%Y-%m-%d %H:%M:%S %Z}: " + "; ".join(changed)
    )


def verify(conn: psycopg.Connection[Any], period: str, *, doing: str) -> None:
    """:class:`engine.Refused` when ``period``'s facts changed since its solve (see module)."""
    why = stale_reason(conn, period)
    if why is not None:
        raise Refused(
            f"{why}; {doing} now would mix averages solved from the old facts with the new "
            "ones, so nothing is costed: put the changed facts back as they were solved "
            "(what changed is named above) and submit the costing again"
        )


def being_costed(conn: psycopg.Connection[Any]) -> list[BeingCosted]:
    """Open periods whose averages are solved, after share-locking every open period's row."""
    _q.execute(conn, "periods_open_lock")
    return [BeingCosted.model_validate(r) for r in _q.rows(conn, "periods_being_costed")]


def refuse_cost_changes(conn: psycopg.Connection[Any]) -> list[tuple[int, str]]:
    """Take the staged item rows that change a standard cost out while a period is being costed.

    For the items migration's chunk (its ``staged_items``); the (row number,
    reason) of each row taken out, for the chunk to reject. Nothing while no
    period is being costed.
    """
    busy = being_costed(conn)
    if not busy:
        return []
    why = "; ".join(b.why() for b in busy)
    todo = ", ".join(f"engine submit costing --period {b.period}" for b in busy)
    return [
        (
            r["row_number"],
            f"standard cost of {r['sku']} {r['old']} -> {r['new']} not loaded: {why}, and "
            f"its stores must be costed with one standard cost; finish the costing ({todo}) "
            "and load the file again",
        )
        for r in _q.rows(conn, "staged_items_cost_changes_refused")
    ]
