"""What a ``jsonb`` column can carry, checked before a statement is sent.

JSON has no NaN and no infinities (``json.dumps`` writes ``NaN``, which
PostgreSQL refuses; pydantic's JSON writes ``null``, a silent change of
value), and ``jsonb`` refuses a NUL character and a surrogate code point in
a string or a key (a surrogate is no character: UTF-8 has none; a pair of
them would come back joined into one). Left to the server, such a value
fails the whole statement, with a driver message quoting the data, and the
transaction it was in; :func:`uncarried` finds it first and names where.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

__all__ = ["Uncarried", "uncarried"]

# in JSON text as json.dumps writes it (ASCII): a NUL or a surrogate, escaped (or a
# string holding a backslash and such letters, which the walk then clears)
_SUSPECT = re.compile(r"\\u(?:0000|d[89a-f])")
# in a string: what jsonb refuses
_REFUSED = re.compile("[\x00\ud800-\udfff]")


@dataclass(frozen=True)
class Uncarried:
    """The first value JSON cannot carry: where (``totals.ratio``, ``lines[3].note``) and why.

    ``what`` never quotes the value: it may be a document's.
    """

    path: str  # "" for the whole value
    what: str  # "is NaN", "contains a NUL character ('\\x00' at index 6)"

    def describe(self, noun: str) -> str:
        """For ``noun`` "output": "output field 'totals.ratio' is NaN: JSON cannot carry it"."""
        subject = f"{noun} field {self.path!r}" if self.path else noun
        return f"{subject} {self.what}: JSON cannot carry it"


def uncarried(data: Any) -> Uncarried | None:
    """The first value of ``data`` (JSON types, as ``model_dump(mode="json")`` gives) that a
    ``jsonb`` column cannot carry; ``None`` when there is none.

    The common case runs in C: one dump refusing NaN and the infinities, one
    search of its text; the walk that names the field runs only on suspicion.
    """
    try:
        suspect = _SUSPECT.search(json.dumps(data, allow_nan=False)) is not None
    except ValueError:
        suspect = True
    return _walk(data, "") if suspect else None


def _walk(value: Any, path: str) -> Uncarried | None:
    if isinstance(value, float) and not math.isfinite(value):
        number = "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
        return Uncarried(path, f"is {number}")
    if isinstance(value, str):
        bad = _refused_character(value)
        return None if bad is None else Uncarried(path, f"contains {bad}")
    if isinstance(value, dict):
        for key, item in value.items():
            bad = _refused_character(str(key))
            if bad is not None:
                return Uncarried(path, f"has a key that contains {bad}")
            found = _walk(item, f"{path}.{key}" if path else str(key))
            if found is not None:
                return found
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = _walk(item, f"{path}[{index}]")
            if found is not None:
                return found
    return None


def _refused_character(text: str) -> str | None:
    found = _REFUSED.search(text)
    if found is None:
        return None
    char = found.group()
    what = "a NUL character" if char == "\x00" else "a surrogate code point"
    return f"{what} ({char!a} at index {found.start()})"
