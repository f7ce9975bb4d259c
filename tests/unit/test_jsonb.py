"""The one check of what a ``jsonb`` column can carry: engine.store.jsonb, no services.

Every path into the database (outputs, parameters, summaries, tags, signal
data, schedules, audit details) goes through it; pydantic's JSON dump writes
``null`` for NaN in a field typed ``Any`` or ``dict`` and ``"NaN"`` for a
``Decimal('NaN')``, so the check looks at the values before that dump.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from engine.errors import BadInput, JsonRefused, OutputRefused
from engine.store import jsonb

NO_NAN = "JSON cannot carry it (JSON has no NaN or Infinity: use null, a finite number or a string)"


class Ratio(float):
    """A float subclass, as numpy's float64 is one."""


class Loose(BaseModel):
    totals: dict  # type: ignore[type-arg]
    extra: Any = None


class Inner(BaseModel):
    value: Any = None


@dataclasses.dataclass
class Point:
    x: float


class Level(enum.Enum):
    LOW = float("nan")


def refusal(value: Any, noun: str = "output") -> str:
    with pytest.raises(JsonRefused) as caught:
        jsonb.checked(value, noun)
    return str(caught.value)


def model_refusal(model: BaseModel, noun: str = "output") -> str:
    with pytest.raises(JsonRefused) as caught:
        jsonb.model_json(model, noun)
    return str(caught.value)


def test_jsonb__refused_is_bad_input_and_output_refused_is_one() -> None:
    assert issubclass(JsonRefused, BadInput)
    assert issubclass(OutputRefused, JsonRefused)


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (Loose(totals={"ratio": math.nan}), f"output field 'totals.ratio' is NaN: {NO_NAN}"),
        (Loose(totals={"ratio": math.inf}), f"output field 'totals.ratio' is Infinity: {NO_NAN}"),
        (
            Loose(totals={}, extra={"lines": [{"c": 1.0}, {"c": -math.inf}]}),
            f"output field 'extra.lines[1].c' is -Infinity: {NO_NAN}",
        ),
        (
            Loose(totals={"d": Decimal("NaN")}),
            f"output field 'totals.d' is Decimal('NaN'): {NO_NAN}",
        ),
        (
            Loose(totals={"d": Decimal("-Infinity")}),
            f"output field 'totals.d' is Decimal('-Infinity'): {NO_NAN}",
        ),
        (
            Loose(totals={"d": Decimal("sNaN")}),
            f"output field 'totals.d' is Decimal('sNaN'): {NO_NAN}",
        ),
        (Loose(totals={"r": Ratio("nan")}), f"output field 'totals.r' is NaN: {NO_NAN}"),
        (
            Loose(totals={}, extra=Inner(value=math.nan)),
            f"output field 'extra.value' is NaN: {NO_NAN}",
        ),
        (Loose(totals={}, extra=(1.0, math.nan)), f"output field 'extra[1]' is NaN: {NO_NAN}"),
        (
            Loose(totals={}, extra=Point(x=math.inf)),
            f"output field 'extra.x' is Infinity: {NO_NAN}",
        ),
        (Loose(totals={"level": Level.LOW}), f"output field 'totals.level' is NaN: {NO_NAN}"),
        (Loose(totals={"s": {math.nan}}), f"output field 'totals.s[0]' is NaN: {NO_NAN}"),
        (Loose(totals={math.inf: 1}), "output field 'totals' has a key that is Infinity"),
        (
            Loose(totals={"n": "a\x00b"}),
            "output field 'totals.n' contains a NUL character ('\\x00' at index 1): "
            "JSON cannot carry it (PostgreSQL stores no NUL character: remove it)",
        ),
        (Loose(totals={"b": b"a\x00"}), "output field 'totals.b' contains a NUL"),
    ],
)
def test_model_json__a_loose_field_json_cannot_carry_is_refused_not_nulled(
    model: BaseModel, message: str
) -> None:
    assert model_refusal(model).startswith(message), model_refusal(model)


def test_model_json__a_good_model_is_its_json_dump() -> None:
    model = Loose(totals={"d": Decimal("1.10"), "r": Ratio(0.5)}, extra=Inner(value=[1, "x"]))
    assert jsonb.model_json(model, "output") == model.model_dump(mode="json")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (math.nan, f"signal data is NaN: {NO_NAN}"),
        ({"a": [{"b": Decimal("Infinity")}]}, "signal data field 'a[0].b' is Decimal('Infinity')"),
        ({"m": Inner(value={"r": math.nan})}, "signal data field 'm.value.r' is NaN"),
        ({"k\x00": 1}, "signal data has a key that contains a NUL character"),
        (
            ["\ud83d\ude00"],
            "signal data field '[0]' contains a surrogate code point ('\\ud83d' at index 0): "
            "JSON cannot carry it (a surrogate is half a character: use whole characters)",
        ),
    ],
)
def test_checked__names_the_path_of_the_first_bad_value(value: Any, message: str) -> None:
    assert refusal(value, "signal data").startswith(message), refusal(value, "signal data")


def test_checked__good_values_pass_unchanged() -> None:
    value = {"a": [1, 2.5, "C:\\u0000", None, True], "NaN": "Infinity", "inf": "nan"}
    assert jsonb.checked(value, "data") is value


def test_checked__a_cycle_is_not_a_hang() -> None:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    loop["r"] = math.nan
    assert refusal(loop, "data").startswith("data field 'r' is NaN")


# JSON values a jsonb column carries: no NaN, no NUL, no surrogate
_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))
_KEY = _TEXT.filter(bool)  # an empty key's path would read as its parent's
_GOOD = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | _TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEY, inner, max_size=4),
    max_leaves=20,
)  # fmt: skip
_BAD = st.sampled_from([math.nan, math.inf, -math.inf, Decimal("NaN"), Ratio("inf"), "x\x00"])


def _paths(value: Any, path: str = "") -> list[tuple[str, list[str | int]]]:
    """Every place in ``value`` a leaf could be put: (its path as named, its keys)."""
    found: list[tuple[str, list[str | int]]] = []
    if isinstance(value, dict):
        for key, item in value.items():
            here = f"{path}.{key}" if path else key
            found.append((here, [key]))
            found += [(p, [key, *k]) for p, k in _paths(item, here)]
    elif isinstance(value, list):
        for index, item in enumerate(value):
            here = f"{path}[{index}]"
            found.append((here, [index]))
            found += [(p, [index, *k]) for p, k in _paths(item, here)]
    return found


@settings(max_examples=200, deadline=None)
@given(_GOOD)
def test_checked__every_json_value_passes(value: Any) -> None:
    assert jsonb.checked(value, "data") is value
    assert jsonb.model_json(Loose(totals={"v": value}), "output") == {
        "totals": {"v": value},
        "extra": None,
    }


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(_KEY, _GOOD, min_size=1, max_size=4), _BAD, st.data())
def test_checked__a_bad_value_anywhere_is_named_by_its_path(
    value: dict[str, Any], bad: Any, data: st.DataObject
) -> None:
    path, keys = data.draw(st.sampled_from(_paths(value)))
    target: Any = value
    for key in keys[:-1]:
        target = target[key]
    target[keys[-1]] = bad
    found = jsonb.uncarried(value)
    assert found is not None and found.path == path, (found, path)
    assert model_refusal(Loose(totals=value)).startswith(f"output field {'totals.' + path!r} ")
