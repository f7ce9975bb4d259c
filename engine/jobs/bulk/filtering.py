"""What a bulk action acts on: a :class:`BulkFilter`, checked against the action.

A filter names a flow, a state, text the error contains, a time window
(``since`` inclusive, ``until`` exclusive: a job's creation, a dead letter's)
and tags or searchable parameters (``NAME=VALUE``, each must hold: the
generic search's, :mod:`engine.jobs.search`). Each state must be one the
action takes; a state not given means every state it takes. A bad value is
:class:`~engine.errors.BadInput` naming it and what is valid.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from engine.errors import BadInput
from engine.jobs.search import parse_pair

__all__ = [
    "ACTIONS",
    "DEAD_LETTER_ACTIONS",
    "JOB_ACTIONS",
    "STATES_BY_ACTION",
    "BulkFilter",
    "parse_when",
]

JOB_ACTIONS = ("retry", "cancel")
DEAD_LETTER_ACTIONS = ("replay", "purge")
ACTIONS = JOB_ACTIONS + DEAD_LETTER_ACTIONS

STATES_BY_ACTION: dict[str, tuple[str, ...]] = {
    "retry": ("failed", "cancelled"),
    "cancel": ("pending", "running", "waiting"),
    "replay": ("open",),
    "purge": ("open", "replayed"),  # open: a poison message; replayed: either source
}
"""The states each action takes (a job's for retry and cancel, a dead letter's otherwise)."""

_AGO = re.compile(r"(\d+)\s*([smhd])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
_MAX_TEXT = 200

Pair = tuple[str, str]


def parse_when(what: str, text: str, now: datetime | None = None) -> datetime:
    """An instant: ISO 8601 (a date, or a time; UTC when it names no zone), or a duration
    ago (``90m``, ``2h``, ``3d``). :class:`BadInput` naming the value otherwise."""
    text = text.strip()
    ago = _AGO.fullmatch(text)
    if ago:
        return (now or datetime.now(UTC)) - timedelta(**{_UNITS[ago[2]]: int(ago[1])})
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise BadInput(
            f"bad {what} {text[:40]!r}: an ISO 8601 date or time (2026-11-30, "
            "2026-11-30T08:00+01:00) or a duration ago (90m, 2h, 3d)"
        ) from None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


@dataclass(frozen=True)
class BulkFilter:
    """What a bulk action acts on; every filter given must hold (``None``, ``()``: any)."""

    flow: str | None = None
    state: str | None = None
    error: str | None = None  # text the error (a dead letter's reason or error) contains
    since: datetime | None = None
    until: datetime | None = None
    tags: tuple[Pair, ...] = ()
    params: tuple[Pair, ...] = ()

    def check(self, action: str) -> None:
        """:class:`BadInput` naming a bad value (the action, a state it does not take, ...)."""
        if action not in ACTIONS:
            raise BadInput(f"bad bulk action {action!r}: one of {', '.join(ACTIONS)}")
        states = STATES_BY_ACTION[action]
        if self.state is not None and self.state not in states:
            raise BadInput(f"bad state {self.state!r} for {action}: one of {', '.join(states)}")
        if self.error is not None and not 0 < len(self.error.strip()) <= _MAX_TEXT:
            raise BadInput(f"bad error text {self.error[:40]!r}: 1 to {_MAX_TEXT} characters")
        if self.since and self.until and self.since >= self.until:
            raise BadInput(
                f"bad time window: since {self.since.isoformat()} is not before "
                f"until {self.until.isoformat()}"
            )
        for what, pairs in (("tag", self.tags), ("param", self.params)):
            for name, value in pairs:
                parse_pair(what, f"{name}={value}")

    def as_json(self) -> dict[str, Any]:
        """The filters given, JSON-ready (what the preview records)."""
        given: dict[str, Any] = {
            "flow": self.flow,
            "state": self.state,
            "error": self.error,
            "since": None if self.since is None else self.since.isoformat(),
            "until": None if self.until is None else self.until.isoformat(),
            "tags": [f"{n}={v}" for n, v in self.tags] or None,
            "params": [f"{n}={v}" for n, v in self.params] or None,
        }
        return {k: v for k, v in given.items() if v is not None}
