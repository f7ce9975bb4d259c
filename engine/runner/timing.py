"""When an attempt's step ran on its slot, on the database's clock.

A step run claimed in a batch waits its turn first, so its claim is not its
start: :class:`Timing` keeps the monotonic moments its step started and
stopped (written by the attempt alone, :class:`~engine.runner.attempt.Attempt`),
and :class:`DbClock` turns them onto the database's clock for the events of
the attempt (the run report's timeline). The heartbeat only reads them (a
renewal says whether the step has started yet).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from engine.store import Claimed, Ran

__all__ = ["DbClock", "Timing"]


class DbClock:
    """The database's clock as one slot reads it, for when its steps ran (invariant 3).

    One anchor: a moment of the database's clock the slot was told (a claim's
    ``clock_timestamp()``, from its lease's expiry) and the worker's monotonic
    moment just before it sent the claim. A monotonic moment of the slot maps
    onto the database's clock by that one offset, so the moments of one slot
    keep their order exactly (a batch's step runs, one after another, never
    overlap), and no worker's wall clock is used. The anchor errs late, by
    the claim's way there (a few milliseconds at most, so a bar may end a
    little after the event that ended it): of the claims seen, the one that
    errs least is kept (a step run's moments are converted one by one, so
    the anchor only moves between them). It is taken afresh after
    ``refresh_s``, so that drift between the two clocks stays negligible.
    """

    def __init__(self, refresh_s: float = 300.0) -> None:
        self._refresh_s = refresh_s
        self._anchor: tuple[datetime, float] | None = None
        self._taken = 0.0
        self._given: tuple[float, datetime] | None = None  # the latest moment converted
        self._lock = threading.Lock()  # the slot and its heartbeat convert moments

    def saw(self, db_time: datetime, sent: float) -> None:
        """The database's clock read ``db_time`` after the monotonic moment ``sent``."""
        with self._lock:
            if self._anchor is None or sent - self._taken > self._refresh_s:
                self._anchor, self._taken = (db_time, sent), sent
                return
            # the smaller the database's lead over the send, the closer to its true offset
            anchor_db, anchor_mono = self._anchor
            if db_time - timedelta(seconds=sent) < anchor_db - timedelta(seconds=anchor_mono):
                self._anchor = (db_time, sent)

    def claimed(self, claimed: Claimed, lease_s: float, sent: float) -> None:
        """A claim sent at ``sent``: its lease expires ``lease_s`` after its database time."""
        self.saw(claimed.lease_expires_at - timedelta(seconds=lease_s), sent)

    def at(self, mono: float) -> datetime | None:
        """``mono`` (a monotonic moment) on the database's clock; ``None``: no anchor yet.

        A better anchor moves the offset back by the error it saves (tens of
        milliseconds on a loaded machine): a moment later than one already
        given is never put before it, so the bars of one slot never overlap.
        """
        with self._lock:
            if self._anchor is None:
                return None
            db_time, anchor = self._anchor
            at = db_time + timedelta(seconds=mono - anchor)
            if self._given is not None and mono >= self._given[0]:
                at = max(at, self._given[1])
                self._given = (mono, at)
            elif self._given is None:
                self._given = (mono, at)
            return at


@dataclass
class Timing:
    """When one attempt's step ran on this slot (monotonic), and whether it is finishing.

    Written by the attempt alone (:meth:`start`, :meth:`stop`, :meth:`finish`);
    its lease's heartbeat reads it.
    """

    clock: DbClock | None = None  # its slot's, which turns moments onto the database's clock
    started: float | None = None
    stopped: float | None = None
    # set just before the checkpoint: a failed renewal then is the commit
    # itself having cleared the token, not a lost lease
    finishing: bool = False

    def start(self) -> None:
        """Its step starts (again: a round sent back one by one runs it again)."""
        self.started, self.stopped = time.monotonic(), None

    def stop(self) -> None:
        self.stopped = time.monotonic()

    def finish(self) -> None:
        """Its step returned: the checkpoint is next."""
        self.finishing = True

    def ran(self) -> Ran | None:
        """When the step ran, for an event of this attempt; ``None``: no clock to tell it."""
        if self.clock is None:
            return None
        if self.started is None:
            return Ran()
        started_at = self.clock.at(self.started)
        if started_at is None:
            return None
        if self.stopped is None:
            return Ran(started_at, None)
        # the stop is a moment the clock gives too: a better anchor taken before the
        # slot's next attempt then never starts that one before this one stopped
        stopped_at = self.clock.at(self.stopped)
        assert stopped_at is not None  # the anchor that gave the start is still there
        return Ran(started_at, max((stopped_at - started_at).total_seconds(), 0.0))
