"""Accounting periods as values: the ``Period`` type and the one parser of a period.

Each type validates at the boundary (CLI, API, message) and its error names the
bad value and the expected form, so ``engine submit`` can print it as is. A
flow's parameters declare :data:`Period`; a command or a function that takes
a period as a plain string checks it with :func:`parse_period`, which gives
the same message.
"""

from __future__ import annotations

import difflib
import re
from typing import Annotated, Any

from pydantic import AfterValidator, Field, TypeAdapter, ValidationError
from pydantic_core import PydanticCustomError

from engine import BadInput

__all__ = [
    "Period",
    "closest_period",
    "fiscal_year_start",
    "next_period",
    "parse_period",
    "previous_period",
    "year_month",
]

_PATTERN = "[0-9]{4}-(0[1-9]|1[0-2])"
_PERIOD = re.compile(_PATTERN)


def _check_period(value: str) -> str:
    if _PERIOD.fullmatch(value) is None:
        meant = closest_period(value)
        raise PydanticCustomError(
            "period_format",
            "invalid period {period}: expected YYYY-MM with a month from 01 to 12, e.g. 2026-11"
            + ("" if meant is None else "; did you mean {meant}?"),
            {"period": repr(value), "meant": repr(meant)},
        )
    return value


def closest_period(value: str) -> str | None:
    """The period a typo most likely meant, or ``None``.

    Its digits read as a year and a month first (``2026-1``, ``202611``,
    ``26-11``, ``11/2026``); else the closest month of its year by spelling
    (``2026-13``: 2026-12, by :func:`difflib.get_close_matches`).
    """
    parts = re.findall(r"[0-9]+", value)
    if len(parts) == 1 and len(parts[0]) == 6:
        parts = [parts[0][:4], parts[0][4:]]
    if len(parts) == 2:
        year, month = parts if len(parts[0]) >= len(parts[1]) else parts[::-1]
        year = f"20{year}" if len(year) == 2 else year
        guess = f"{year}-{int(month):02d}" if len(month) <= 2 else ""
        if _PERIOD.fullmatch(guess):
            return guess
    year = next((p for p in parts if len(p) == 4), None)
    months = [] if year is None else [f"{year}-{m:02d}" for m in range(1, 13)]
    close = difflib.get_close_matches(value, months, n=1)
    return close[0] if close else None


def _period_schema(schema: dict[str, Any]) -> None:
    schema["pattern"] = f"^{_PATTERN}$"


Period = Annotated[
    str,
    AfterValidator(_check_period),
    Field(
        description="accounting period, YYYY-MM (e.g. 2026-11)",
        json_schema_extra=_period_schema,
    ),
]
"""An accounting month as ``YYYY-MM`` (month 01-12). ``26-11`` and ``2026-1`` are rejected."""

_ADAPTER: TypeAdapter[str] = TypeAdapter(Period)


def parse_period(value: str, *, option: str | None = None) -> str:
    """``value`` if it is a :data:`Period`, else :class:`engine.BadInput` naming it.

    The message is the type's own (``invalid period '2026-13': expected
    YYYY-MM ...``), after ``"{option}: "`` when ``option`` names the command
    line option it came from.
    """
    try:
        return _ADAPTER.validate_python(value)
    except ValidationError as exc:
        message = str(exc.errors()[0]["msg"])
        raise BadInput(f"{option}: {message}" if option else message) from None


def year_month(period: str) -> tuple[int, int]:
    """The year and the month of a valid ``period`` (``(2026, 11)`` for ``"2026-11"``)."""
    return int(period[:4]), int(period[5:])


def next_period(period: str) -> str:
    """The month after ``period`` (``next_period("2026-12") == "2027-01"``)."""
    year, month = year_month(period)
    return f"{year + month // 12:04d}-{month % 12 + 1:02d}"


def previous_period(period: str) -> str:
    """The month before ``period`` (``previous_period("2027-01") == "2026-12"``)."""
    year, month = year_month(period)
    return f"{year - 1:04d}-12" if month == 1 else f"{year:04d}-{month - 1:02d}"


def fiscal_year_start(period: str, start_month: int) -> str:
    """The first period of ``period``'s fiscal year, a year that starts in ``start_month``.

    ``fiscal_year_start("2026-06", 7) == "2025-07"``; with ``start_month`` 1
    (the calendar year) it is January of the period's year.
    """
    if not 1 <= start_month <= 12:
        raise ValueError(f"a fiscal year starts in a month from 1 to 12, not {start_month}")
    year, month = year_month(period)
    return f"{year if month >= start_month else year - 1:04d}-{start_month:02d}"
