"""A result value's fields, JSON-ready: what ``--json`` prints and the console returns.

The API returns frozen dataclasses (a submit, a signal, a schedule, a run's
row...), and each says what it is as JSON through ``as_json``: its fields
under their names, an id or a path as text, a time in ISO 8601, an enum as
its value. :func:`json_fields` writes that once; an ``as_json`` names only
what differs (a field renamed or left out, a value derived).
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Collection, Mapping
from dataclasses import fields
from datetime import date, datetime
from pathlib import PurePath
from typing import Any

__all__ = ["json_fields", "json_value"]


def json_value(value: Any) -> Any:
    """``value`` JSON-ready: a UUID or a path as text, a time or a date in ISO 8601, an enum
    as its value; anything else (``None``, numbers, text, JSON data) as it is."""
    if isinstance(value, uuid.UUID | PurePath):
        return str(value)
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, enum.Enum):
        return value.value
    return value


def json_fields(
    value: Any, *, rename: Mapping[str, str] | None = None, omit: Collection[str] = ()
) -> dict[str, Any]:
    """The fields of the dataclass instance ``value``, in their order, each :func:`json_value`:
    under the name ``rename`` gives it, if any; those in ``omit`` left out."""
    names = rename or {}
    return {
        names.get(f.name, f.name): json_value(getattr(value, f.name))
        for f in fields(value)
        if f.name not in omit
    }
