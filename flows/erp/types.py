"""Parameter types shared by the ERP flows.

Each type validates at the boundary (CLI, API, message) and its error names the
bad value and the expected form, so ``engine submit`` can print it as is.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, Field
from pydantic_core import PydanticCustomError

__all__ = ["Period", "next_period"]

_PERIOD = re.compile(r"[0-9]{4}-(0[1-9]|1[0-2])")


def _check_period(value: str) -> str:
    if _PERIOD.fullmatch(value) is None:
        raise PydanticCustomError(
            "period_format",
            "invalid period {period}: expected YYYY-MM with a month from 01 to 12, e.g. 2026-11",
            {"period": repr(value)},
        )
    return value


def _period_schema(schema: dict[str, Any]) -> None:
    schema["pattern"] = "^[0-9]{4}-(0[1-9]|1[0-2])$"


Period = Annotated[
    str,
    AfterValidator(_check_period),
    Field(
        description="accounting period, YYYY-MM (e.g. 2026-11)",
        json_schema_extra=_period_schema,
    ),
]
"""An accounting month as ``YYYY-MM`` (month 01-12). ``26-11`` and ``2026-1`` are rejected."""


def next_period(period: str) -> str:
    """The month after ``period`` (``next_period("2026-12") == "2027-01"``)."""
    year, month = int(period[:4]), int(period[5:])
    return f"{year + month // 12:04d}-{month % 12 + 1:02d}"
