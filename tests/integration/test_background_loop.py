"""The worker's background loop (engine.infra.background), which the schedule firer,
the alert dispatcher and the pruner share: a failed round closes its connection and the
next round opens a fresh one; an outage is reported to the worker under the loop's name;
the stop ends it and closes what it holds."""

from __future__ import annotations

import threading
from typing import Any

import psycopg

from engine.config import Settings
from engine.infra.background import BackgroundLoop
from engine.infra.outage import Outage
from engine.store import db


class _Loop(BackgroundLoop):
    name = "test loop"

    def __init__(
        self,
        settings: Settings,
        rounds: list[Exception | None],
        interval_s: float = 0.0,
        **kw: Any,
    ) -> None:
        super().__init__(settings, connect=lambda: db.connect(settings), **kw)
        self.interval_s = interval_s
        self.rounds = rounds  # what each round does: raise this, or (None) stop the loop
        self.conns: list[psycopg.Connection[Any]] = []
        self.failures: list[Exception] = []
        self.ran_out = threading.Event()

    def _interval_s(self) -> float:
        return self.interval_s  # 0: each round follows a failed one at once

    def _turn(self) -> float:
        conn = self._connection()
        if not self.conns or self.conns[-1] is not conn:
            self.conns.append(conn)
        conn.execute("SELECT 1")
        todo = self.rounds.pop(0)
        if todo is not None:
            raise todo
        self.stop.set()
        self.ran_out.set()
        return 0.0

    def _round_failed(self, exc: Exception) -> None:
        self.failures.append(exc)


def test_a_failed_round_closes_its_connection_and_the_next_opens_a_fresh_one(
    settings: Settings,
) -> None:
    loop = _Loop(settings, [RuntimeError("a bug in a round"), None])
    loop.start()
    assert loop.ran_out.wait(30)
    loop.close(30)
    assert [str(e) for e in loop.failures] == ["a bug in a round"]
    assert len(loop.conns) == 2
    assert all(c.closed for c in loop.conns)  # the failed one at once, the last at the stop
    assert loop.conns[0].autocommit and loop.conns[1].autocommit


def test_an_outage_is_reported_under_the_loops_name_and_no_round_runs_while_down(
    settings: Settings,
) -> None:
    outage = Outage(1.0)
    down = psycopg.OperationalError("server closed the connection")
    loop = _Loop(settings, [down], interval_s=60.0, outage=outage)  # the stop cuts the wait
    loop.start()
    assert outage.down.wait(30)
    assert loop.failures == []  # an outage is the worker's to report, not a failed round
    assert loop.rounds == []
    loop.close(30)
    assert loop._thread is not None and not loop._thread.is_alive()
    assert outage.outages == 1
    assert all(c.closed for c in loop.conns)
