"""Calendars of schedules: a cron expression in a timezone, its DST rules, fire-time parameters.

Named for cron rather than "schedule": :mod:`engine.jobs.plan` decides which
step runs of a job exist; this module only answers "at which instants does
this calendar fire". It needs no database, so its rules are unit-tested
directly; :mod:`engine.schedules.schedules` stores schedules and fires them.

- An expression has the five standard fields (minute hour day-of-month month
  day-of-week) or is one of ``@hourly @daily @weekly @monthly @yearly``. It
  is evaluated by cronsim, which follows Debian's cron, in the schedule's
  IANA timezone (``zoneinfo``; UTC by default).
- Daylight saving time, for an expression with a fixed hour (``0 2 * * *``):
  a local time that occurs twice (clocks go back) fires once, at its first
  occurrence; a local time that does not exist (clocks go forward) fires at
  the first valid instant after the gap (02:30 on the spring-forward night
  of America/New_York fires at 03:00 EDT). Expressions that run every hour
  or more often follow the real clock (Debian's rule).
- Instants are aware datetimes; what is stored and compared is UTC.
- A parameter value may name the scheduled time instead of a constant, so a
  nightly job can post "the current period": ``@current_month`` and
  ``@previous_month`` (``YYYY-MM``) and ``@fire_date`` (``YYYY-MM-DD``), taken
  in the schedule's timezone at the scheduled time (not at the moment a late
  worker fires it). ``@@text`` stands for the literal ``@text``.
"""

from __future__ import annotations

import difflib
import zoneinfo
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from cronsim import CronSim, CronSimError

from engine.errors import BadInput

__all__ = [
    "CATCH_UP_LIMIT",
    "TEMPLATES",
    "Calendar",
    "Due",
    "check_templates",
    "resolve_params",
    "zone",
]

CATCH_UP_LIMIT = 100
"""``--catch-up all`` fires at most this many missed times, the latest ones."""

_MACROS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
_FIELDS = "minute hour day-of-month month day-of-week"
# cronsim looks up to 50 years ahead; this bounds a walk over missed times
# (a minute schedule missed for a year is 525,600 steps, well under a second each 100k)
_MAX_STEPS = 2_000_000


def _previous_month(d: date) -> str:
    return f"{d.year - 1}-12" if d.month == 1 else f"{d.year}-{d.month - 1:02d}"


TEMPLATES: dict[str, Callable[[date], str]] = {
    "@current_month": lambda d: f"{d.year}-{d.month:02d}",
    "@previous_month": _previous_month,
    "@fire_date": lambda d: d.isoformat(),
}
"""Parameter values resolved at each scheduled time, from its local date."""


def zone(name: str) -> zoneinfo.ZoneInfo:
    """The IANA timezone ``name``; :class:`BadInput` naming it and close valid names."""
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        close = difflib.get_close_matches(name, sorted(zoneinfo.available_timezones()), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise BadInput(
            f"unknown timezone {name!r}{hint}; expected an IANA name such as "
            "Europe/Istanbul, America/New_York or UTC"
        ) from None


@dataclass(frozen=True)
class Due:
    """What a due schedule fires now: these times, then it waits for ``next_fire_at``."""

    slots: tuple[datetime, ...]
    next_fire_at: datetime
    skipped: int = 0  # missed times beyond what the catch-up policy fires


@dataclass(frozen=True)
class Calendar:
    """A validated cron expression in a timezone (see the module docstring)."""

    cron: str
    timezone: str
    expression: str
    tz: zoneinfo.ZoneInfo

    @classmethod
    def parse(cls, cron: str, timezone: str = "UTC") -> Calendar:
        """Validate both; :class:`BadInput` names the bad value and what is valid."""
        tz = zone(timezone)
        expression = _MACROS.get(cron.strip().lower(), cron.strip())
        fields = expression.split()
        if len(fields) != 5:
            raise BadInput(
                f"invalid cron expression {cron!r}: expected 5 fields ({_FIELDS}), "
                f"e.g. '0 2 * * *', or one of {', '.join(sorted(_MACROS))}"
            )
        expression = " ".join(fields)
        try:
            next(CronSim(expression, datetime(2000, 1, 1, tzinfo=tz)))
        except CronSimError as exc:
            raise BadInput(
                f"invalid cron expression {cron!r}: {exc} ({_FIELDS}; e.g. '0 2 * * *')"
            ) from None
        except StopIteration:
            raise BadInput(f"cron expression {cron!r} never fires") from None
        return cls(cron, timezone, expression, tz)

    def after(self, instant: datetime) -> datetime:
        """The first scheduled time strictly after ``instant`` (UTC)."""
        return next(self._times(instant, None))

    def local(self, instant: datetime) -> datetime:
        return instant.astimezone(self.tz)

    def due(
        self, first: datetime, now: datetime, catch_up: str, limit: int = CATCH_UP_LIMIT
    ) -> Due:
        """The times to fire at ``now`` of a schedule whose next time is ``first`` (<= now).

        ``first`` is fired as it is (a row aged by hand need not lie on the
        calendar); the missed times after it up to ``now`` count too. With
        ``latest`` only the last of them fires; with ``all`` each fires, at
        most ``limit`` (the latest ones; the older are skipped and counted).
        The next time is the first one after ``now``.
        """
        missed: list[datetime] = [first]
        skipped = 0
        for t in self._times(first, now):
            missed.append(t)
            if len(missed) > limit:
                missed.pop(0)
                skipped += 1
        keep = missed[-1:] if catch_up == "latest" else missed
        skipped += len(missed) - len(keep)
        return Due(tuple(keep), self.after(now), skipped)

    def _times(self, start: datetime, until: datetime | None) -> Iterator[datetime]:
        """Scheduled times in (start, until], UTC, in order."""
        start = start.astimezone(UTC)
        it = CronSim(self.expression, start.astimezone(self.tz))
        last = start
        for _ in range(_MAX_STEPS):
            try:
                t = next(it).astimezone(UTC)
            except StopIteration:
                return
            # cronsim may answer a first occurrence of a repeated local time that
            # lies before a start inside the repeated hour: already past, so skipped
            if t <= last:
                continue
            if until is not None and t > until:
                return
            last = t
            yield t


def check_templates(params: Mapping[str, Any]) -> None:
    """Refuse a value starting with ``@`` that names no template (``@@`` escapes)."""
    for key, value in params.items():
        literal = not isinstance(value, str) or not value.startswith("@") or value.startswith("@@")
        if not literal and value not in TEMPLATES:
            raise BadInput(
                f"parameter {key}={value!r}: unknown fire-time value; valid: "
                f"{', '.join(sorted(TEMPLATES))} (write @@{value[1:]} for a literal {value})"
            )


def resolve_params(
    params: Mapping[str, Any], slot: datetime, tz: zoneinfo.ZoneInfo
) -> dict[str, Any]:
    """``params`` with fire-time values resolved for the scheduled time ``slot``."""
    day = slot.astimezone(tz).date()
    resolved: dict[str, Any] = {}
    for key, value in params.items():
        if isinstance(value, str) and value.startswith("@@"):
            resolved[key] = value[1:]
        elif isinstance(value, str) and value in TEMPLATES:
            resolved[key] = TEMPLATES[value](day)
        else:
            resolved[key] = value
    return resolved
