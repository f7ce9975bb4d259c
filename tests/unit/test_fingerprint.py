"""Fingerprints: equal meaning gives equal text, any change of meaning changes it."""

from __future__ import annotations

import enum
import json
import random
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Context, Decimal
from typing import Any
from uuid import UUID

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from engine.jobs.fingerprint import _number as number_text
from engine.jobs.fingerprint import canonical_json, job_fingerprint, sha256_hex, step_fingerprint
from flows.example import ExampleParams

LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(min_value=-1e9, max_value=1e9, allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
JSON_LIKE = st.recursive(
    LEAVES,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=20,
)
DOCUMENTS = st.dictionaries(st.text(max_size=6), JSON_LIKE, min_size=1, max_size=5)
WIDE = Context(prec=100)


def fingerprint(value: Any) -> str:
    return step_fingerprint("job-1", "step", "0", {"value": value})


def transform(value: Any, rng: random.Random) -> Any:
    """Same meaning, other spelling: shuffled keys, numbers as int/float/Decimal."""
    if isinstance(value, dict):
        keys = list(value)
        rng.shuffle(keys)
        return {key: transform(value[key], rng) for key in keys}
    if isinstance(value, list):
        return [transform(item, rng) for item in value]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        spellings: list[Any] = [
            Decimal(value),
            Decimal(f"{value}.0"),
            Decimal(f"{value}000E-3"),
            Decimal(value).normalize(WIDE),  # 10 -> Decimal('1E+1')
        ]
        if abs(value) <= 2**53:
            spellings.append(float(value))
        return rng.choice(spellings)
    assert isinstance(value, float)
    sign, digits, exponent = Decimal(repr(value)).as_tuple()
    assert isinstance(exponent, int)
    spellings = [Decimal(repr(value)), Decimal((sign, (*digits, 0, 0), exponent - 2))]
    if value.is_integer():
        spellings.append(int(value))
    return rng.choice(spellings)


def leaf_paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(value, dict):
        return [p for key, item in value.items() for p in leaf_paths(item, (*path, key))]
    if isinstance(value, list):
        return [p for i, item in enumerate(value) for p in leaf_paths(item, (*path, i))]
    return [path]


def replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {k: replaced(v, rest, new) if k == head else v for k, v in value.items()}
    return [replaced(v, rest, new) if i == head else v for i, v in enumerate(value)]


def other_values(leaf: Any) -> list[Any]:
    """Values that differ in meaning from ``leaf``."""
    if leaf is None:
        return [0, "null", False, ""]
    if isinstance(leaf, bool):
        return [not leaf, int(leaf), str(leaf).lower()]
    if isinstance(leaf, int):
        return [leaf + 1, -leaf - 1, str(leaf)] + ([bool(leaf)] if leaf in (0, 1) else [])
    if isinstance(leaf, float):
        return [leaf + 1, repr(leaf), None]
    return [leaf + "x", None, "x" + leaf]


# -- invariance ---------------------------------------------------------------------


@given(DOCUMENTS, st.randoms(use_true_random=False))
@settings(deadline=None)
def test_fingerprint__same_meaning_other_spelling_is_equal(
    doc: dict[str, Any], rng: random.Random
) -> None:
    assert fingerprint(transform(doc, rng)) == fingerprint(doc)


@given(DOCUMENTS)
@settings(deadline=None)
def test_fingerprint__survives_a_json_round_trip_with_whitespace(doc: dict[str, Any]) -> None:
    assert fingerprint(json.loads(json.dumps(doc, indent=2))) == fingerprint(doc)


@given(DOCUMENTS)
@settings(deadline=None)
def test_canonical_json__is_compact_sorted_json_of_the_same_value(doc: dict[str, Any]) -> None:
    text = canonical_json(doc)
    assert json.loads(text) == json.loads(json.dumps(doc))
    assert canonical_json(json.loads(text)) == text


# -- sensitivity --------------------------------------------------------------------


@given(DOCUMENTS, st.data())
@settings(deadline=None)
def test_fingerprint__changing_any_leaf_changes_it(
    doc: dict[str, Any], data: st.DataObject
) -> None:
    paths = leaf_paths(doc)
    assume(paths)
    path = data.draw(st.sampled_from(paths), label="path")
    leaf: Any = doc
    for part in path:
        leaf = leaf[part]
    new = data.draw(st.sampled_from(other_values(leaf)), label="new value")
    assert fingerprint(replaced(doc, path, new)) != fingerprint(doc)


@pytest.mark.parametrize(
    ("a", "b"),
    [(True, 1), (False, 0), (1, "1"), (0.5, "0.5"), (None, "null"), (None, 0), ([1], [[1]])],
)
def test_canonical_json__different_meaning_gives_different_text(a: Any, b: Any) -> None:
    assert canonical_json(a) != canonical_json(b)


@pytest.mark.parametrize(
    ("values", "text"),
    [
        ((10, 10.0, Decimal("10.0"), Decimal("1E+1"), Decimal("10")), "10"),
        ((0.1, Decimal("0.10"), Decimal("1E-1")), "0.1"),
        ((0, 0.0, -0.0, Decimal("-0"), Decimal("0E+5")), "0"),
        ((-1.5, Decimal("-1.50")), "-1.5"),
        ((1e300, Decimal("1E+300")), "1e300"),
        ((2**70,), "1180591620717411303424"),
    ],
)
def test_canonical_json__equal_numbers_render_the_same(values: tuple[Any, ...], text: str) -> None:
    assert {canonical_json(v) for v in values} == {text}


def test_canonical_json__long_decimals_are_not_rounded() -> None:
    a = Decimal("1.00000000000000000000000000000000001")
    assert canonical_json(a) != canonical_json(Decimal(1))


@pytest.mark.parametrize(
    "value", [float("nan"), float("inf"), -float("inf"), Decimal("NaN"), Decimal("Infinity")]
)
def test_canonical_json__non_finite_numbers_are_rejected(value: Any) -> None:
    with pytest.raises(ValueError, match="non-finite"):
        canonical_json({"x": value})


def test_canonical_json__compact_sorted_utf8() -> None:
    assert canonical_json({"b": [1, None], "a": {"é": "ü"}}) == '{"a":{"é":"ü"},"b":[1,null]}'
    assert sha256_hex("é") == sha256_hex("\u00e9")


class Colour(enum.Enum):
    RED = "red"


def test_canonical_json__other_supported_types() -> None:
    uuid = UUID("12345678-1234-5678-1234-567812345678")
    assert canonical_json(uuid) == '"12345678-1234-5678-1234-567812345678"'
    assert canonical_json(Colour.RED) == '"red"'
    assert canonical_json(date(2026, 11, 1)) == '"2026-11-01"'
    assert canonical_json({3, 1, 2}) == canonical_json(frozenset({2, 3, 1})) == "[1,2,3]"
    assert canonical_json((1, "a")) == canonical_json([1, "a"])
    assert canonical_json(ExampleParams(period="2026-11")) == '{"chunks":3,"period":"2026-11"}'


def test_canonical_json__aware_datetimes_are_utc_and_naive_ones_rejected() -> None:
    paris = timezone(timedelta(hours=1))
    same_instant = (
        datetime(2026, 11, 1, 11, 0, tzinfo=paris),
        datetime(2026, 11, 1, 10, 0, tzinfo=UTC),
    )
    assert {canonical_json(d) for d in same_instant} == {'"2026-11-01T10:00:00+00:00"'}
    with pytest.raises(ValueError, match="naive datetime"):
        canonical_json(datetime(2026, 11, 1, 10, 0))


def test_canonical_json__unsupported_values_name_their_type() -> None:
    with pytest.raises(TypeError, match="type bytes"):
        canonical_json({"x": b"raw"})
    with pytest.raises(TypeError, match="keys must be str, got int"):
        canonical_json({1: "a"})


# -- job and step fingerprints ------------------------------------------------------


def test_job_fingerprint__model_and_mapping_agree() -> None:
    params = ExampleParams(period="2026-11", chunks=3)
    assert job_fingerprint("example", 1, params) == job_fingerprint(
        "example", 1, {"period": "2026-11", "chunks": 3}
    )


@pytest.mark.parametrize(
    ("flow", "version", "period"),
    [("costing", 1, "2026-11"), ("example", 2, "2026-11"), ("example", 1, "2026-12")],
)
def test_job_fingerprint__flow_version_and_params_matter(
    flow: str, version: int, period: str
) -> None:
    base = job_fingerprint("example", 1, ExampleParams(period="2026-11"))
    assert job_fingerprint(flow, version, ExampleParams(period=period)) != base


def test_step_fingerprint__every_part_matters() -> None:
    base = ("job-1", "work", "0", {"chunk": {"index": 0}})
    variants = [
        ("job-2", "work", "0", {"chunk": {"index": 0}}),
        ("job-1", "total", "0", {"chunk": {"index": 0}}),
        ("job-1", "work", "1", {"chunk": {"index": 0}}),
        ("job-1", "work", "0", {"chunk": {"index": 1}}),
    ]
    prints = {step_fingerprint(*v) for v in [base, *variants]}
    assert len(prints) == 5
    assert job_fingerprint("work", 0, {}) not in prints


@given(st.integers() | st.sampled_from([10**41 - 1, 10**41, -(10**41) + 1, -(10**41), 0]))
def test_canonical_json__an_int_is_written_as_the_number_rules_write_it(n: int) -> None:
    # the fast path for plain ints must say exactly what _number says
    assert canonical_json(n) == number_text(n)
    assert canonical_json({"v": n}) == "{" + '"v":' + number_text(n) + "}"
