"""The key sampler: holders of every concurrency key, read from the database while the run goes.

A thread of the harness with its own connection reads
``key_holders_over_limit`` (:file:`chaos.sql`) every ``interval_s``: a holder
that sees its key's limit of other holders, by the definition of
``engine_concurrency_holders`` (migration 0014), is an overlap at that
instant. Each over-limit row is kept once per (key, step run, other
holders); an outage only makes the sampler miss samples (it reconnects and
counts the gaps), never invent one. The events give the same oracle after
the run (``oracle_key_overlap``); this one also sees holds that never
checkpointed.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

from engine import load_queries

_q = load_queries(str(Path(__file__).with_name("chaos.sql")))


@dataclass
class KeySampler:
    info: str
    interval_s: float = 0.1
    samples: int = 0
    samples_held: int = 0  # samples that saw at least one holder
    failed: int = 0
    overlaps: list[dict[str, Any]] = field(default_factory=list)
    _seen: set[tuple[str, str, str]] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="key-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        while not self._stop.wait(self.interval_s):
            try:
                if conn is None or conn.closed or conn.broken:
                    conn = psycopg.connect(
                        self.info, autocommit=True, row_factory=dict_row, connect_timeout=2
                    )
                    # a sample never waits on a lock for long (it takes none: reads only)
                    conn.execute("SET statement_timeout = '2s'")
                rows = conn.execute(_q["key_holders_over_limit"]).fetchall()
                held = conn.execute(_q["key_holders_count"]).fetchone()
            except psycopg.Error:
                self.failed += 1
                if conn is not None:
                    with contextlib.suppress(psycopg.Error):
                        conn.close()
                conn = None
                continue
            self.samples += 1
            if held and held["holders"]:
                self.samples_held += 1
            for row in rows:
                mark = (row["key"], str(row["id"]), ",".join(sorted(row["other_holders"])))
                if mark not in self._seen:
                    self._seen.add(mark)
                    self.overlaps.append(row)
        if conn is not None:
            conn.close()

    def figures(self) -> dict[str, Any]:
        return {
            "key_overlaps_sampled": len(self.overlaps),
            "key_samples": self.samples,
            "key_samples_held": self.samples_held,
            "key_samples_failed": self.failed,
            "key_overlap_examples": [
                f"{r['at']:%H:%M:%S.%f} key {r['key']} (limit {r['lim']}): step run {r['id']} "
                f"of job {r['job_id']} {r['status']} {r['lease_owner'] or '-'} beside "
                f"{sorted(r['other_holders'])}"
                for r in self.overlaps[:5]
            ],
        }
