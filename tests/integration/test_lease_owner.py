"""A lease owner maps to its worker one way, in Python and in SQL alike."""

from __future__ import annotations

from typing import Any

import psycopg

from engine import store

WORKERS = ["host:4242", "pod/7", "a/b/c:1", "w1", "10.0.0.1:99", "trailing/"]


def test_worker_of__python_and_sql_map_every_slot_owner_to_its_worker(
    conn: psycopg.Connection[Any],
) -> None:
    owners = [store.lease_owner(w, slot) for w in WORKERS for slot in (0, 1, 12)]
    owners += ["thief", "no-slot/x"]  # written by hand: their own worker
    rows = conn.execute(
        "SELECT o, engine_worker_of(o) AS worker FROM unnest(%s::text[]) AS o", (owners,)
    ).fetchall()
    in_sql = {r["o"]: r["worker"] for r in rows}
    assert in_sql == {o: store.worker_of(o) for o in owners}
    for w in WORKERS:
        assert store.worker_of(store.lease_owner(w, 3)) == w
    assert store.worker_of("thief") == "thief"
