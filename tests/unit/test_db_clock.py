"""A slot's clock: its monotonic moments on the database's clock, by one anchor."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from engine.runner.lease import DbClock, Lease
from engine.runner.timing import Timing
from engine.store import Claimed, Ran

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def test_db_clock__maps_moments_by_one_anchor_and_keeps_the_one_that_errs_least() -> None:
    clock = DbClock(refresh_s=300)
    assert clock.at(10.0) is None, "no claim seen yet"
    clock.saw(T0, sent=100.0)  # the database read T0 some time after 100.0
    assert clock.at(101.5) == T0 + timedelta(seconds=1.5)
    clock.saw(T0 + timedelta(seconds=10.010), sent=110.0)  # a later claim that erred more
    assert clock.at(101.5) == T0 + timedelta(seconds=1.5), "the first erred less: kept"
    clock.saw(T0 + timedelta(seconds=19.995), sent=120.0)  # one that erred 5 ms less
    assert clock.at(120.0) == T0 + timedelta(seconds=19.995)
    clock.saw(T0 + timedelta(seconds=500), sent=600.0)  # stale: taken afresh
    assert clock.at(600.0) == T0 + timedelta(seconds=500)


def test_db_clock__a_better_anchor_never_puts_a_later_moment_before_an_earlier_one() -> None:
    # a loaded machine: the first claim's answer came 40 ms after it was sent; the next
    # batch's claim erred 1 ms. Step A stopped at 101.000, step B started 2 ms later.
    clock = DbClock(refresh_s=300)
    clock.saw(T0 + timedelta(milliseconds=40), sent=100.0)
    a_stopped = clock.at(101.000)
    clock.saw(T0 + timedelta(seconds=1.5, milliseconds=1), sent=101.5)  # 39 ms better
    b_started = clock.at(101.002)
    assert a_stopped is not None and b_started is not None
    assert b_started >= a_stopped, "one slot's bars keep their order"
    # and the better anchor holds for what comes after the moments already given
    assert clock.at(102.0) == T0 + timedelta(seconds=2, milliseconds=1)


def _claimed() -> Claimed:
    return Claimed(
        id=uuid.uuid4(),
        job_id=uuid.uuid4(),
        step="a",
        fanout_key="",
        fingerprint="f",
        attempt=1,
        max_attempts=3,
        token=uuid.uuid4(),
        lease_expires_at=T0 + timedelta(seconds=30),
        item=None,
        reclaimed_from=None,
        flow="chain",
        params={},
    )


def test_lease__tells_when_its_step_ran_or_that_it_never_started() -> None:
    clock = DbClock()
    clock.claimed(_claimed(), lease_s=30, sent=50.0)  # the claim's database time: T0
    # the attempt owns its timing; its lease (the heartbeat's) reads it
    timing = Timing(clock)
    lease = Lease(_claimed(), None, timing)
    assert lease.ran() == Ran(None, None), "claimed, not started"
    timing.started = 52.0
    assert lease.ran() == Ran(T0 + timedelta(seconds=2), None), "running"
    timing.stopped = 52.25
    assert lease.ran() == Ran(T0 + timedelta(seconds=2), 0.25)
    assert Lease(_claimed(), None).ran() is None, "no clock: nothing recorded"


def test_timing__a_better_anchor_between_two_attempts_never_overlaps_their_bars() -> None:
    # the report draws a bar from started_at for ran_s: the stop is a moment the clock
    # gave too, so the next attempt of the slot (started 2 ms after it) starts after it
    # (the timeline test saw bars overlap under load, before stops went through the clock)
    clock = DbClock(refresh_s=300)
    clock.saw(T0 + timedelta(milliseconds=40), sent=100.0)  # a claim that erred 40 ms
    a = Timing(clock, started=100.5, stopped=101.0)
    ran_a = a.ran()
    clock.saw(T0 + timedelta(seconds=1.5, milliseconds=1), sent=101.5)  # 39 ms better
    b = Timing(clock, started=101.002, stopped=101.1)
    ran_b = b.ran()
    assert ran_a is not None and ran_a.started_at is not None and ran_a.ran_s is not None
    assert ran_b is not None and ran_b.started_at is not None and ran_b.ran_s is not None
    a_stopped = ran_a.started_at + timedelta(seconds=ran_a.ran_s)
    assert ran_b.started_at >= a_stopped, "one slot's bars never overlap"
    assert ran_a.ran_s == 0.5 and ran_b.ran_s >= 0.0
