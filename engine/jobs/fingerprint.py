"""Fingerprints: sha256 of a canonical JSON form of what identifies a job or step run.

Two submits of the same job must give the same fingerprint however their
parameters were spelled (key order, whitespace, ``10`` or ``Decimal('10.0')``),
and any change of meaning must give a different one. Canonical form:

- objects with keys sorted, no whitespace, non-ASCII kept, encoded as UTF-8;
- numbers as their exact decimal value with no trailing zeros, so equal numbers
  give equal text (``10``, ``10.0``, ``Decimal('1E+1')`` -> ``10``); a float is
  taken as its shortest repr (``0.1`` -> ``0.1``, like ``Decimal('0.10')``);
  NaN and infinities are rejected;
- booleans stay booleans (``True`` is not ``1``), ``None`` is ``null``, a number
  is never its string;
- pydantic models as ``model_dump(mode="python")``; dates and aware datetimes
  as ISO 8601 (datetimes converted to UTC); a naive datetime is rejected,
  since the same text would mean different instants on different machines;
  UUIDs as strings, enums as their value, sets sorted by canonical element.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import UTC, date, datetime
from decimal import Decimal
from enum import Enum
from typing import Any
from uuid import UUID

from pydantic import BaseModel

__all__ = ["canonical_json", "job_fingerprint", "sha256_hex", "step_fingerprint"]

# Beyond this decimal exponent numbers are written in scientific form, so a
# value such as 1E+100000 cannot turn into 100,000 digits of text.
_MAX_PLAIN_EXPONENT = 40


def canonical_json(value: Any) -> str:
    """The canonical JSON text of ``value`` (see the module docstring).

    Raises ``ValueError`` for NaN, infinities and naive datetimes, and
    ``TypeError`` naming the type for anything not listed there.
    """
    return _encode(value)


def sha256_hex(text: str) -> str:
    """Hex sha256 of ``text`` encoded as UTF-8."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def job_fingerprint(
    flow_name: str,
    flow_version: int,
    params: BaseModel | Mapping[str, Any],
    scheduled_for: datetime | None = None,
    child_of: tuple[UUID, str] | None = None,
) -> str:
    """Fingerprint of a job: at most one active job per fingerprint.

    A job a schedule fires has its scheduled time as one more component
    (absent otherwise, so other jobs keep their fingerprints): each time of a
    schedule is its own job, and the same parameters submitted by hand are
    another one. A child job has its parent step run and its key (``child_of``):
    each child of each step run is its own job, whatever its parameters.
    """
    identity: dict[str, Any] = {
        "kind": "job",
        "flow": flow_name,
        "version": flow_version,
        "params": params,
    }
    if scheduled_for is not None:
        identity["scheduled_for"] = scheduled_for
    if child_of is not None:
        identity["parent_step_run"] = child_of[0]
        identity["child_key"] = child_of[1]
    return sha256_hex(canonical_json(identity))


def step_fingerprint(job_id: str, step: str, fanout_key: str, inputs: Mapping[str, Any]) -> str:
    """Fingerprint of a step run: the job, the step, its fan-out key and its inputs."""
    return sha256_hex(
        canonical_json(
            {"kind": "step", "job": job_id, "step": step, "fanout": fanout_key, "inputs": inputs}
        )
    )


# below this magnitude an int is written as Python writes it (see _number)
_PLAIN_INT = 10 ** (_MAX_PLAIN_EXPONENT + 1)


def _encode(value: Any) -> str:
    # The exact types first (the common case: JSON from model_dump), then the
    # rest by isinstance, where order matters: bool before int (bool is an
    # int), Enum before its base type, datetime before date (a datetime is a date).
    kind = type(value)
    if kind is str:
        return json.dumps(value, ensure_ascii=False)
    if kind is int and -_PLAIN_INT < value < _PLAIN_INT:
        return str(value)
    if kind is dict:
        return _object(value)
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, Enum):
        return _encode(value.value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, int | float | Decimal):
        return _number(value)
    if isinstance(value, BaseModel):
        return _encode(value.model_dump(mode="python"))
    if isinstance(value, Mapping):
        return _object(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(_encode(v) for v in value) + "]"
    if isinstance(value, set | frozenset):
        return "[" + ",".join(sorted(_encode(v) for v in value)) + "]"
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"naive datetime {value.isoformat()!r}: attach a timezone")
        return json.dumps(value.astimezone(UTC).isoformat())
    if isinstance(value, date):
        return json.dumps(value.isoformat())
    if isinstance(value, UUID):
        return json.dumps(str(value))
    raise TypeError(f"cannot fingerprint a value of type {type(value).__qualname__}: {value!r}")


def _object(value: Mapping[Any, Any]) -> str:
    items = []
    for key in value:
        if not isinstance(key, str):
            raise TypeError(f"object keys must be str, got {type(key).__name__}: {key!r}")
        items.append((key, value[key]))
    items.sort(key=lambda item: item[0])
    return "{" + ",".join(f"{_encode(k)}:{_encode(v)}" for k, v in items) + "}"


def _number(value: int | float | Decimal) -> str:
    # A float goes through its shortest repr: Decimal(0.1) would be the binary
    # value 0.1000000000000000055..., which nobody means by 0.1.
    number = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    if not number.is_finite():
        raise ValueError(f"cannot fingerprint non-finite number {value!r}")
    sign, digits, exponent = number.as_tuple()
    assert isinstance(exponent, int)  # finite, checked above
    # Strip trailing zeros by hand: Decimal.normalize() would round to the
    # context precision and so make distinct long numbers equal.
    text = "".join(map(str, digits)).lstrip("0")
    if not text:
        return "0"  # 0, 0.0, -0.0, 0E+3 are all zero
    stripped = text.rstrip("0")
    exponent += len(text) - len(stripped)
    minus = "-" if sign else ""
    adjusted = exponent + len(stripped) - 1
    if abs(adjusted) > _MAX_PLAIN_EXPONENT:
        mantissa = stripped[0] + ("." + stripped[1:] if len(stripped) > 1 else "")
        return f"{minus}{mantissa}e{adjusted}"
    if exponent >= 0:
        return minus + stripped + "0" * exponent
    point = len(stripped) + exponent
    if point > 0:
        return f"{minus}{stripped[:point]}.{stripped[point:]}"
    return f"{minus}0.{'0' * -point}{stripped}"
