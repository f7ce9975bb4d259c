"""Concurrency key declarations: checked when the flow is loaded, rendered per step run."""

from __future__ import annotations

import uuid

import pytest
from pydantic import BaseModel

from engine import Concurrency, DefinitionError, Flow
from engine.config import Settings
from engine.jobs.plan import root_runs


class Params(BaseModel):
    period: str
    store: str | None = None


class Item(BaseModel):
    code: str
    brand: str


class Plan(BaseModel):
    items: list[Item]


class Out(BaseModel):
    ok: bool = True


def test_concurrency__unknown_flow_parameter_is_a_definition_error_naming_it() -> None:
    with pytest.raises(DefinitionError) as err:
        Flow("costing", params=Params, concurrency=Concurrency("period:{perid}", limit=1))
    message = str(err.value)
    assert "flow 'costing'" in message
    assert "unknown field 'perid'" in message
    assert "valid fields: period, store" in message


def test_concurrency__step_key_of_an_unmapped_step_cannot_name_item_fields() -> None:
    flow = Flow("f", params=Params)

    @flow.step(concurrency=Concurrency("store:{code}"))
    def one(params: Params) -> Out:
        return Out()

    with pytest.raises(DefinitionError) as err:
        flow.validate()
    assert "step 'one'" in str(err.value)
    assert "unknown field 'code'" in str(err.value)
    assert err.value.steps == ("one",)


def test_concurrency__mapped_step_key_may_name_the_items_fields() -> None:
    flow = Flow("f", params=Params, concurrency=Concurrency("period:{period}"))

    @flow.step()
    def plan(params: Params) -> Plan:
        return Plan(items=[])

    @flow.step(map_over="plan.items", concurrency=Concurrency("store:{period}:{code}", limit=4))
    def work(item: Item, params: Params) -> Out:
        return Out()

    flow.validate()
    assert flow.steps["plan"].concurrency == Concurrency("period:{period}")  # the flow's
    own = flow.steps["work"].concurrency
    assert own is not None and own.limit == 4
    assert own.render({"period": "2026-11", "store": None}, {"code": "ST001", "brand": "B"}) == (
        "store:2026-11:ST001"
    )
    assert "concurrency: key 'store:{period}:{code}', limit 4 (per step run)" in flow.describe()


def test_concurrency__a_field_of_both_params_and_item_is_ambiguous() -> None:
    class StoreItem(BaseModel):
        store: str

    class StorePlan(BaseModel):
        stores: list[StoreItem]

    flow = Flow("f", params=Params)

    @flow.step()
    def plan(params: Params) -> StorePlan:
        return StorePlan(stores=[])

    @flow.step(map_over="plan.stores", concurrency=Concurrency("store:{store}"))
    def work(item: StoreItem) -> Out:
        return Out()

    with pytest.raises(DefinitionError, match="field 'store' is ambiguous"):
        flow.validate()


@pytest.mark.parametrize(
    ("template", "why"),
    [
        ("period:{}", "{} is not allowed"),
        ("period:{0}", "{0} is not allowed"),
        ("period:{period.year}", "{period.year} is not allowed"),
        ("period:{period!r}", "{period!r} is not allowed"),
        ("period:{period:>8}", "{period:>8} is not allowed"),
        ("period:{period", "is malformed"),
        ("", "must be a non-empty template"),
    ],
)
def test_concurrency__malformed_templates_are_refused(template: str, why: str) -> None:
    with pytest.raises(DefinitionError, match="concurrency key") as err:
        Concurrency(template)
    assert why in str(err.value)


@pytest.mark.parametrize("limit", [0, -1, True, 1.5, "2"])
def test_concurrency__limit_must_be_a_positive_integer(limit: object) -> None:
    with pytest.raises(DefinitionError, match=r"concurrency limit must be an integer >= 1, got"):
        Concurrency("period:{period}", limit=limit)  # type: ignore[arg-type]


def test_concurrency__not_a_concurrency_object_is_refused() -> None:
    with pytest.raises(DefinitionError, match=r"must be an engine\.Concurrency"):
        Flow("f", params=Params, concurrency="period:{period}")  # type: ignore[arg-type]


def test_concurrency__key_and_limit_are_rendered_when_the_step_run_is_created() -> None:
    flow = Flow("f", params=Params, concurrency=Concurrency("period:{period}/{store}", limit=2))

    @flow.step()
    def one(params: Params) -> Out:
        return Out()

    flow.freeze()
    [run] = root_runs(flow, uuid.uuid4(), {"period": "2026-11", "store": None}, Settings())
    assert (run.concurrency_key, run.concurrency_limit, run.concurrency_per_job) == (
        "period:2026-11/",
        2,
        False,
    )


def test_concurrency__a_flow_without_a_key_renders_none() -> None:
    flow = Flow("f", params=Params)

    @flow.step()
    def one(params: Params) -> Out:
        return Out()

    flow.freeze()
    [run] = root_runs(flow, uuid.uuid4(), {"period": "2026-11", "store": None}, Settings())
    assert (run.concurrency_key, run.concurrency_limit) == (None, None)


def test_concurrency__the_erp_book_flows_share_the_period_key_per_job() -> None:
    from flows import close, costing, posting

    keys = {f.concurrency for f in (close.flow, costing.flow, posting.flow)}
    assert keys == {Concurrency("period:{period}", limit=1, per_job=True)}


def test_concurrency__flows_sharing_a_key_must_agree_on_its_limit() -> None:
    from engine import Registry

    def flow_with(name: str, limit: int) -> Flow:
        flow = Flow(name, params=Params, concurrency=Concurrency("period:{period}", limit=limit))

        @flow.step()
        def one(params: Params) -> Out:
            return Out()

        return flow

    Registry([flow_with("a", 1), flow_with("b", 1)])  # the same declaration: shared
    with pytest.raises(DefinitionError) as err:
        Registry([flow_with("a", 1), flow_with("b", 2)])
    assert "flow 'b'" in str(err.value)
    assert "concurrency key 'period:{period}' with limit 2" in str(err.value)
    assert "flow 'a' declares it with limit 1" in str(err.value)
