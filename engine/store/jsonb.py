"""What a ``jsonb`` column can carry: the one check every path into the database goes through.

JSON has no NaN and no infinities: ``json.dumps`` writes ``NaN``, which
PostgreSQL refuses, and pydantic's JSON dump writes ``null`` for a float in
a field typed ``Any`` or ``dict`` and ``"NaN"`` for a ``Decimal('NaN')``, a
silent change of value. ``jsonb`` (and ``text``) refuse a NUL character, and
a surrogate code point is no character (UTF-8 has none; a pair of them would
come back joined into one). Left to the server, such a value fails the
whole statement, with a driver message quoting the data, and the
transaction it was in.

So a step's output, a job's parameters (a child's too), a wait's summary, a
tag, a signal's data, a schedule's parameters and an audit entry's detail
are checked here before anything is written: :func:`model_json` for a
pydantic model (its values are looked at *before* pydantic's JSON dump, then
the dump is checked too), :func:`checked` for plain data. Either raises
:class:`~engine.errors.JsonRefused` (a :class:`~engine.errors.BadInput`: the
CLI exits 2) naming the field by its path and what would do instead, e.g.
"output field 'totals.ratio' is NaN: JSON cannot carry it (JSON has no NaN
or Infinity: use null, a finite number or a string)".
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, TypeVar

from pydantic import BaseModel
from pydantic_core import to_json

from engine.errors import JsonRefused

__all__ = ["Uncarried", "checked", "model_json", "uncarried"]

T = TypeVar("T")

# in JSON text as json.dumps writes it (ASCII): a NUL or a surrogate, escaped (or a
# string holding a backslash and such letters, which the walk then clears)
_SUSPECT = re.compile(r"\\u(?:0000|d[89a-f])")
# in JSON text as pydantic writes it with inf_nan_mode="constants": a float's NaN or
# infinity (a Decimal's in quotes, a dict key's as "nan", "inf"), a NUL, or text holding such
_MARKS = (b"NaN", b"Infinity", b'"inf"', b'"-inf"', b'"nan"', b"\\u0000")
# in a string: what jsonb refuses
_REFUSED = re.compile("[\x00\ud800-\udfff]")

_NO_NAN = "JSON has no NaN or Infinity: use null, a finite number or a string"
_NO_NUL = "PostgreSQL stores no NUL character: remove it"
_NO_SURROGATE = "a surrogate is half a character: use whole characters"


@dataclass(frozen=True)
class Uncarried:
    """The first value JSON cannot carry: where (``totals.ratio``, ``lines[3].note``) and why.

    ``what`` never quotes the value: it may be a document's.
    """

    path: str  # "" for the whole value
    what: str  # "is NaN", "contains a NUL character ('\\x00' at index 6)"
    instead: str = _NO_NAN  # what would do

    def describe(self, noun: str) -> str:
        """The message: "output field 'totals.ratio' is NaN: JSON cannot carry it (...)"."""
        subject = f"{noun} field {self.path!r}" if self.path else noun
        return f"{subject} {self.what}: JSON cannot carry it ({self.instead})"


def checked(value: T, noun: str, *, error: Callable[[str], Exception] = JsonRefused) -> T:
    """``value``, unchanged, if a ``jsonb`` column can carry all of it; else ``error``.

    ``value`` is plain data (dicts, lists, numbers, strings; a pydantic model,
    a dataclass, a ``Decimal``, a set or an enum inside is looked into);
    ``noun`` names it in the message ("signal 'go' data", "audit detail").
    """
    found = uncarried(value)
    if found is not None:
        raise error(found.describe(noun))
    return value


def model_json(
    model: BaseModel, noun: str, *, error: Callable[[str], Exception] = JsonRefused
) -> Any:
    """``model.model_dump(mode="json")``, or ``error`` naming the first value JSON cannot carry.

    Its values are checked as they are (pydantic's JSON dump would have made a
    NaN ``null`` or ``"NaN"`` already), then the dump (a serializer may make one).
    """
    for data in (model.model_dump(), model.model_dump(mode="json")):
        found = _walk(data, "", set()) if _suspect(data) else None
        if found is not None:
            raise error(found.describe(noun))
    return data


def uncarried(data: Any) -> Uncarried | None:
    """The first value of ``data`` that a ``jsonb`` column cannot carry; ``None`` when none.

    The common case runs in C: one dump refusing NaN and the infinities (a
    ``Decimal``, a model or a set asks back, :func:`_probe`), one search of
    its text; the walk that names the field runs only on suspicion.
    """
    try:
        text = json.dumps(data, allow_nan=False, default=_probe)
    except (ValueError, TypeError, _Suspect):
        suspect = True
    else:
        suspect = _SUSPECT.search(text) is not None
    return _walk(data, "", set()) if suspect else None


def _suspect(dumped: Any) -> bool:
    """May ``dumped`` (a model's dump: no model left in it) hold what JSON cannot carry?

    One dump in Rust that writes NaN and the infinities as such (a
    ``Decimal``'s as its text, a dict key's as ``"nan"``, ``"inf"``), a NUL
    escaped, and fails on a surrogate; a few searches of its text. Text that
    only looks like it makes the walk look closer, and clear it.
    """
    try:
        text = to_json(dumped, inf_nan_mode="constants", fallback=_nothing)
    except Exception:  # e.g. a lone surrogate, which has no UTF-8: the walk names it
        return True
    return any(mark in text for mark in _MARKS)


def _nothing(value: Any) -> None:
    return None  # a value with no JSON form: the JSON dump will say so


class _Suspect(Exception):
    """Raised by :func:`_probe` inside ``json.dumps``: look closer."""


def _probe(value: Any) -> Any:
    """What ``json.dumps`` should look at in place of a value it has no JSON for."""
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise _Suspect
        return 0
    if isinstance(value, BaseModel):
        return value.model_dump()
    if isinstance(value, set | frozenset):
        return list(value)
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, bytes | bytearray) and b"\x00" in value:
        raise _Suspect
    return None  # a date, a UUID, ...: its JSON form is pydantic's, and carried


def _number(value: float | Decimal) -> str | None:
    """How a number JSON cannot carry is named ("NaN", "Decimal('-Infinity')"), else ``None``."""
    if isinstance(value, Decimal):
        return None if value.is_finite() else f"Decimal({str(value)!r})"
    if math.isfinite(value):
        return None
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def _walk(value: Any, path: str, seen: set[int]) -> Uncarried | None:
    if isinstance(value, float | Decimal):
        number = _number(value)
        return None if number is None else Uncarried(path, f"is {number}")
    if isinstance(value, str):
        return _string(value, path, "contains")
    if isinstance(value, bytes | bytearray):
        return Uncarried(path, "contains a NUL byte", _NO_NUL) if b"\x00" in value else None
    if isinstance(value, enum.Enum):
        return _walk(value.value, path, seen)
    if isinstance(value, BaseModel):
        value = value.model_dump()
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    elif isinstance(value, Mapping) and not isinstance(value, dict):
        value = dict(value)
    if not isinstance(value, dict | list | tuple | set | frozenset) or id(value) in seen:
        return None  # a cycle has no JSON form: its dump says so
    seen.add(id(value))
    try:
        if isinstance(value, dict):
            return _walk_dict(value, path, seen)
        for index, item in enumerate(value):
            found = _walk(item, f"{path}[{index}]", seen)
            if found is not None:
                return found
        return None
    finally:
        seen.discard(id(value))


def _walk_dict(value: dict[Any, Any], path: str, seen: set[int]) -> Uncarried | None:
    for key, item in value.items():
        if isinstance(key, float | Decimal) and _number(key) is not None:
            return Uncarried(path, f"has a key that is {_number(key)}")
        bad = _string(str(key), path, "has a key that contains")
        if bad is not None:
            return bad
        found = _walk(item, f"{path}.{key}" if path else str(key), seen)
        if found is not None:
            return found
    return None


def _string(text: str, path: str, verb: str) -> Uncarried | None:
    found = _REFUSED.search(text)
    if found is None:
        return None
    char = found.group()
    if char == "\x00":
        return Uncarried(
            path, f"{verb} a NUL character ('\\x00' at index {found.start()})", _NO_NUL
        )
    return Uncarried(
        path,
        f"{verb} a surrogate code point ({char!a} at index {found.start()})",
        _NO_SURROGATE,
    )
