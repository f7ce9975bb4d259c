"""Fan-out labels: ``@flow.step(map_over=..., label="{code}")`` names runs by their item."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from engine import DefinitionError, Flow


class P(BaseModel):
    period: str = "2026-11"


class Store(BaseModel):
    code: str
    brand: str


class Plan(BaseModel):
    stores: list[Store]


class Cost(BaseModel):
    total: int


def _flow(label: str, *, mapped: bool = True) -> Flow:
    flow = Flow("labelled", params=P)

    @flow.step()
    def plan(params: P) -> Plan:
        return Plan(stores=[])

    if mapped:

        @flow.step(map_over="plan.stores", label=label)
        def cost(store: Store) -> Cost:
            return Cost(total=0)
    else:

        @flow.step(after=["plan"], label=label)
        def cost(p: Plan) -> Cost:
            return Cost(total=0)

    return flow.validate()


def test_label__a_fanout_run_is_named_by_its_item_and_keeps_its_key_without_one() -> None:
    step = _flow("{brand}/{code}").steps["cost"]
    assert step.label_of("0", {"code": "ST001", "brand": "BR1"}) == "BR1/ST001"
    assert step.label_of("7", None) == "7", "an item without the fields keeps its position"
    assert step.label_of("", {"code": "ST001"}) == "", "a run that is not a fan-out has no key"
    assert "one run per item of 'plan.stores', labelled '{brand}/{code}'" in (
        _flow("{brand}/{code}").describe()
    )
    plan = _flow("{code}").steps["plan"]
    assert plan.label_of("3", {"code": "ST001"}) == "3", "no label declared: the key"


@pytest.mark.parametrize(
    ("label", "mapped", "message"),
    [
        ("{store}", True, r"unknown field 'store'.*\(Store\); valid fields: brand, code"),
        ("{code!r}", True, r"only field names in braces"),
        ("ST", True, r"names no field of the item"),
        ("{code}", False, r"step 'cost': label='\{code\}' names the runs of a fan-out"),
    ],
)
def test_label__a_bad_label_fails_the_flow_naming_what_is_valid(
    label: str, mapped: bool, message: str
) -> None:
    with pytest.raises(DefinitionError, match=message):
        _flow(label, mapped=mapped)
