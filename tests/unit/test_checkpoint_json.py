"""What a checkpoint's JSON can carry: engine.runner.checkpoint.checkpoint_json, no services."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from pydantic import BaseModel, RootModel

from engine.errors import OutputRefused
from engine.runner.checkpoint import checkpoint_json
from engine.waits.signals import summary_json


class Line(BaseModel):
    note: str = "line"
    amount: float = 1.0


class Doc(BaseModel):
    lines: list[Line] = []
    by_store: dict[str, float] = {}
    price: Decimal = Decimal("1.10")


def refused(output: BaseModel) -> str:
    with pytest.raises(OutputRefused) as caught:
        checkpoint_json(output)
    return str(caught.value)


def test_checkpoint_json__a_good_output_is_its_json() -> None:
    doc = Doc(lines=[Line(note="caf\u00e9 \U0001f600")], by_store={"S01": 2.5})
    assert checkpoint_json(doc) == {
        "lines": [{"note": "caf\u00e9 \U0001f600", "amount": 1.0}],
        "by_store": {"S01": 2.5},
        "price": "1.10",
    }


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (
            Doc(lines=[Line(), Line(amount=float("nan"))]),
            "output field 'lines[1].amount' is NaN: JSON cannot carry it"
            " (JSON has no NaN or Infinity: use null, a finite number or a string)",
        ),
        (
            Doc(by_store={"S01": 1.0, "S02": float("-inf")}),
            "output field 'by_store.S02' is -Infinity: JSON cannot carry it"
            " (JSON has no NaN or Infinity: use null, a finite number or a string)",
        ),
        (
            Doc(lines=[Line(note="INV-42\x00")]),
            "output field 'lines[0].note' contains a NUL character ('\\x00' at index 6): "
            "JSON cannot carry it (PostgreSQL stores no NUL character: remove it)",
        ),
        (
            Doc(lines=[Line(note="x\ud800")]),
            "output field 'lines[0].note' contains a surrogate code point ('\\ud800' at index 1):"
            " JSON cannot carry it (a surrogate is half a character: use whole characters)",
        ),
        (
            Doc(by_store={"S\x0001": 1.0}),
            "output field 'by_store' has a key that contains a NUL character ('\\x00' at index 1):"
            " JSON cannot carry it (PostgreSQL stores no NUL character: remove it)",
        ),
    ],
)
def test_checkpoint_json__refused_naming_the_field(doc: Doc, message: str) -> None:
    assert refused(doc) == message


def test_checkpoint_json__a_surrogate_pair_is_refused_too() -> None:
    # jsonb would join the two escapes into one character: not the value returned
    assert "surrogate" in refused(Doc(lines=[Line(note="\ud83d\ude00")]))


def test_checkpoint_json__a_whole_output_that_is_nan_is_named_as_the_output() -> None:
    assert refused(RootModel[float](float("nan"))) == (
        "output is NaN: JSON cannot carry it "
        "(JSON has no NaN or Infinity: use null, a finite number or a string)"
    )


def test_checkpoint_json__text_that_only_looks_escaped_is_carried() -> None:
    doc = Doc(lines=[Line(note="C:\\u0000\\ud800")])
    assert checkpoint_json(doc)["lines"][0]["note"] == "C:\\u0000\\ud800"


class Loose(BaseModel):
    totals: dict  # type: ignore[type-arg]  # the README's example: an untyped dict
    extra: Any = None


@pytest.mark.parametrize(
    ("doc", "start"),
    [
        (Loose(totals={"ratio": float("nan")}), "output field 'totals.ratio' is NaN: "),
        (Loose(totals={"ratio": float("inf")}), "output field 'totals.ratio' is Infinity: "),
        (
            Loose(totals={}, extra={"lines": [{"cost": Decimal("NaN")}]}),
            "output field 'extra.lines[0].cost' is Decimal('NaN'): ",
        ),
    ],
)
def test_checkpoint_json__a_dict_or_any_field_is_refused_never_nulled(
    doc: BaseModel, start: str
) -> None:
    assert refused(doc).startswith(start), refused(doc)


@pytest.mark.parametrize(
    ("summary", "start"),
    [
        (Loose(totals={"ratio": float("nan")}), "wait summary field 'totals.ratio' is NaN: "),
        ({"totals": {"ratio": Decimal("Infinity")}}, "wait summary field 'totals.ratio' is "),
        ({"t": Loose(totals={"r": float("-inf")})}, "wait summary field 't.totals.r' is -Infinity"),
    ],
)
def test_summary_json__a_dict_or_any_field_is_refused_never_nulled(
    summary: Any, start: str
) -> None:
    with pytest.raises(OutputRefused) as caught:
        summary_json(summary)
    assert str(caught.value).startswith(start), str(caught.value)
