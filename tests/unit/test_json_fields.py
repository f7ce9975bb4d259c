"""``json_fields``: a result value's fields, JSON-ready, written once for every ``as_json``."""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path

from engine.infra.json_fields import json_fields


class _Colour(enum.Enum):
    RED = "red"


@dataclass(frozen=True)
class _Result:
    id: uuid.UUID
    at: datetime
    day: date
    ended: datetime | None
    where: Path
    colour: _Colour
    data: dict[str, object]
    outbox_ids: tuple[int, ...] = ()


_ID = uuid.UUID("00000000-0000-4000-8000-000000000001")
_AT = datetime(2026, 12, 7, 5, 30, tzinfo=UTC)


def _result() -> _Result:
    return _Result(
        _ID, _AT, date(2026, 12, 7), None, Path("/tmp/x"), _Colour.RED, {"k": [1, "a"]}, (1, 2)
    )


def test_json_fields__ids_paths_and_times_as_text_enums_as_values() -> None:
    assert json_fields(_result()) == {
        "id": str(_ID),
        "at": "2026-12-07T05:30:00+00:00",
        "day": "2026-12-07",
        "ended": None,
        "where": "/tmp/x",
        "colour": "red",
        "data": {"k": [1, "a"]},
        "outbox_ids": (1, 2),
    }


def test_json_fields__renames_and_omits_fields() -> None:
    got = json_fields(_result(), rename={"id": "job_id"}, omit=("outbox_ids", "data"))
    assert list(got) == ["job_id", "at", "day", "ended", "where", "colour"]
    assert got["job_id"] == str(_ID)
