"""Calendars of schedules: cron in a timezone, DST, missed times, fire-time parameters."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from engine.errors import BadInput
from engine.schedules.calendar import Calendar, check_templates, resolve_params


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


def times(calendar: Calendar, start: str, count: int) -> list[str]:
    out, t = [], utc(start)
    for _ in range(count):
        t = calendar.after(t)
        out.append(calendar.local(t).isoformat())
    return out


def test_calendar__fires_at_the_local_time_of_its_timezone() -> None:
    calendar = Calendar.parse("0 2 * * *", "Europe/Istanbul")
    assert calendar.after(utc("2026-12-04T12:00:00+00:00")) == utc("2026-12-04T23:00:00+00:00")


def test_calendar_dst__a_local_time_that_occurs_twice_fires_once() -> None:
    # 2026-11-01 America/New_York: 01:00-02:00 happens twice (EDT, then EST)
    calendar = Calendar.parse("30 1 * * *", "America/New_York")
    assert times(calendar, "2026-10-31T12:00:00-04:00", 3) == [
        "2026-11-01T01:30:00-04:00",
        "2026-11-02T01:30:00-05:00",
        "2026-11-03T01:30:00-05:00",
    ]


@pytest.mark.parametrize(
    "start",
    [
        "2026-11-01T01:30:00-04:00",  # the first occurrence itself (just fired)
        "2026-11-01T01:40:00-04:00",  # between the two
        "2026-11-01T01:10:00-05:00",  # inside the repeated hour, before its 01:30
    ],
)
def test_calendar_dst__after_the_first_occurrence_the_next_is_the_next_day(start: str) -> None:
    calendar = Calendar.parse("30 1 * * *", "America/New_York")
    assert times(calendar, start, 1) == ["2026-11-02T01:30:00-05:00"]


def test_calendar_dst__a_skipped_local_time_fires_at_the_next_valid_instant() -> None:
    # 2026-03-08 America/New_York: 02:00-03:00 does not exist
    calendar = Calendar.parse("30 2 * * *", "America/New_York")
    assert times(calendar, "2026-03-07T12:00:00-05:00", 3) == [
        "2026-03-08T03:00:00-04:00",
        "2026-03-09T02:30:00-04:00",
        "2026-03-10T02:30:00-04:00",
    ]


def test_calendar_dst__an_hourly_schedule_follows_the_real_clock() -> None:
    calendar = Calendar.parse("0 * * * *", "America/New_York")
    assert times(calendar, "2026-11-01T00:30:00-04:00", 3) == [
        "2026-11-01T01:00:00-04:00",
        "2026-11-01T01:00:00-05:00",
        "2026-11-01T02:00:00-05:00",
    ]


def test_calendar_due__latest_fires_only_the_last_missed_time() -> None:
    calendar = Calendar.parse("0 * * * *", "UTC")
    now = utc("2026-12-04T15:20:00+00:00")
    due = calendar.due(utc("2026-12-04T10:00:00+00:00"), now, "latest")
    assert due.slots == (utc("2026-12-04T15:00:00+00:00"),)
    assert due.next_fire_at == utc("2026-12-04T16:00:00+00:00")
    assert due.skipped == 5


def test_calendar_due__all_fires_each_missed_time_in_order() -> None:
    calendar = Calendar.parse("0 * * * *", "UTC")
    now = utc("2026-12-04T15:20:00+00:00")
    due = calendar.due(utc("2026-12-04T10:00:00+00:00"), now, "all")
    assert due.slots == tuple(utc(f"2026-12-04T{h}:00:00+00:00") for h in range(10, 16))
    assert due.skipped == 0


def test_calendar_due__all_is_bounded_to_the_latest_times() -> None:
    calendar = Calendar.parse("* * * * *", "UTC")
    now = utc("2026-12-04T15:00:00+00:00")
    due = calendar.due(now - timedelta(minutes=250), now, "all", limit=100)
    assert len(due.slots) == 100
    assert due.slots[-1] == now and due.slots[0] == now - timedelta(minutes=99)
    assert due.skipped == 151


def test_calendar_due__a_time_aged_off_the_calendar_fires_as_it_is() -> None:
    calendar = Calendar.parse("0 2 * * *", "Europe/Istanbul")
    aged = utc("2026-12-04T15:19:00+00:00")
    due = calendar.due(aged, utc("2026-12-04T15:20:00+00:00"), "latest")
    assert due.slots == (aged,)
    assert due.next_fire_at == utc("2026-12-04T23:00:00+00:00")


@pytest.mark.parametrize(
    ("cron", "named"),
    [
        ("61 2 * * *", "'61 2 * * *': Bad minute"),
        ("0 2 * *", "expected 5 fields"),
        ("0 0 2 * * *", "expected 5 fields"),
        ("0 0 31 2 *", "Bad day-of-month"),
        ("* * */20 * 1L", "never fires"),
        ("every night", "expected 5 fields"),
    ],
)
def test_calendar__a_bad_cron_names_itself_and_the_form(cron: str, named: str) -> None:
    with pytest.raises(BadInput, match="cron expression") as caught:
        Calendar.parse(cron, "UTC")
    assert named in str(caught.value)


def test_calendar__macros_are_cron_expressions() -> None:
    assert Calendar.parse("@daily", "UTC").expression == "0 0 * * *"


def test_calendar__a_bad_timezone_names_itself_and_close_valid_names() -> None:
    with pytest.raises(BadInput) as caught:
        Calendar.parse("0 2 * * *", "Europe/Istambul")
    message = str(caught.value)
    assert "'Europe/Istambul'" in message and "Europe/Istanbul" in message


@pytest.mark.parametrize("bad", ["Mars/Olympus", "../etc/passwd", ""])
def test_calendar__an_unknown_timezone_is_bad_input(bad: str) -> None:
    with pytest.raises(BadInput, match="unknown timezone"):
        Calendar.parse("0 2 * * *", bad)


def test_params__fire_time_values_are_taken_in_the_timezone_at_the_scheduled_time() -> None:
    calendar = Calendar.parse("30 1 1 * *", "Europe/Istanbul")
    slot = utc("2026-11-30T22:30:00+00:00")  # 2026-12-01 01:30 in Istanbul
    params = {
        "period": "@previous_month",
        "current": "@current_month",
        "day": "@fire_date",
        "literal": "@@previous_month",
        "n": 3,
    }
    assert resolve_params(params, slot, calendar.tz) == {
        "period": "2026-11",
        "current": "2026-12",
        "day": "2026-12-01",
        "literal": "@previous_month",
        "n": 3,
    }


def test_params__january_s_previous_month_is_last_december() -> None:
    tz = Calendar.parse("0 0 1 * *", "UTC").tz
    assert resolve_params({"p": "@previous_month"}, utc("2027-01-01T00:00:00+00:00"), tz) == {
        "p": "2026-12"
    }


def test_params__an_unknown_fire_time_value_names_the_valid_ones() -> None:
    with pytest.raises(BadInput) as caught:
        check_templates({"period": "@last_month"})
    message = str(caught.value)
    assert "period='@last_month'" in message and "@previous_month" in message
    check_templates({"period": "@@last_month", "n": 1})
