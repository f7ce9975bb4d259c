"""Flow declarations: every DefinitionError case, and the example flow's graph."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Optional

import networkx as nx
import pytest
from pydantic import BaseModel

from engine import DefinitionError, Flow, InvalidParameters, MapOver, StepInput
from engine.flow import register_injectable
from engine.flow.step import INJECTABLE_TYPES, type_name
from flows import example


class Params(BaseModel):
    n: int = 1


class A(BaseModel):
    value: int = 0


class B(BaseModel):
    value: int = 0


class Item(BaseModel):
    x: int


class Items(BaseModel):
    items: list[Item]
    count: int = 0
    numbers: list[int] = []


def new_flow() -> Flow:
    return Flow("test", params=Params)


# -- declaration errors (raised by the decorator) -----------------------------------


@pytest.mark.parametrize("name", ["Costing", "1costing", "cost ing", "", "costing.v2", "a\n"])
def test_flow__invalid_name_is_rejected(name: str) -> None:
    with pytest.raises(DefinitionError, match="invalid flow name"):
        Flow(name, params=Params)


def test_flow__signals_are_declared_and_shown() -> None:
    flow = Flow("test", params=Params, signals=("approve", "reject"))

    @flow.step
    def only(params: Params) -> A:
        return A()

    assert flow.signals == ("approve", "reject")
    assert "signals: approve, reject" in flow.describe()
    assert Flow("test", params=Params, signals="approve").signals == ("approve",)
    assert new_flow().signals == (), "a flow that declares none receives none"


GO = "go"


def test_step__waiting_for_an_undeclared_signal_is_a_definition_error_at_declaration() -> None:
    from engine import StepContext

    flow = Flow("test", params=Params, signals=("approve",))
    with pytest.raises(
        DefinitionError,
        match=r"step 'gate' waits for signal 'aprove', which the flow does not declare: "
        r"valid signals: 'approve'",
    ):

        @flow.step
        def gate(params: Params, ctx: StepContext) -> A:
            ctx.wait_for_signal("aprove")
            return A()

    with pytest.raises(DefinitionError, match=r"signal 'go'.*it declares no signals"):

        @new_flow().step
        def constant(params: Params, ctx: StepContext) -> A:
            ctx.wait_for_signal(GO)  # a module constant is checked too
            return A()

    @flow.step
    def fine(params: Params, ctx: StepContext) -> A:
        ctx.wait_for_signal("approve")
        return A()


@pytest.mark.parametrize(
    ("signals", "message"),
    [
        (("Approve!",), "invalid signal name 'Approve!' in signals"),
        (("approve", "approve"), "names one twice"),
        ((7,), "invalid signal name 7"),
    ],
)
def test_flow__invalid_signals_are_a_definition_error(
    signals: tuple[str, ...], message: str
) -> None:
    with pytest.raises(DefinitionError, match=message):
        Flow("test", params=Params, signals=signals)


def test_flow__params_must_be_a_model() -> None:
    with pytest.raises(DefinitionError, match="BaseModel"):
        Flow("test", params=dict)  # type: ignore[arg-type]


def test_step__duplicate_name_names_the_step() -> None:
    flow = new_flow()

    @flow.step()
    def load() -> A:
        return A()

    with pytest.raises(DefinitionError, match="duplicate step name 'load'") as info:

        @flow.step("load")
        def other() -> A:
            return A()

    assert info.value.steps == ("load",)
    assert info.value.flow == "test"


def test_step__unannotated_parameter_names_step_and_parameter() -> None:
    flow = new_flow()
    with pytest.raises(DefinitionError, match="step 'load': parameter 'params' has no type"):

        @flow.step()
        def load(params) -> A:  # type: ignore[no-untyped-def]
            return A()


@pytest.mark.parametrize("returns", [dict[str, int], int, None, Params | None, "A | B"])
def test_step__return_annotation_must_be_a_model(returns: object) -> None:
    flow = new_flow()

    def load() -> A:
        return A()

    load.__annotations__["return"] = returns
    with pytest.raises(DefinitionError, match="step 'load': return annotation must be a pydantic"):
        flow.step()(load)


def test_step__missing_return_annotation_is_rejected() -> None:
    flow = new_flow()
    with pytest.raises(DefinitionError, match="got none"):

        @flow.step()
        def load(params: Params):  # type: ignore[no-untyped-def]
            return A()


def test_step__var_args_are_rejected() -> None:
    flow = new_flow()
    with pytest.raises(DefinitionError, match=r"\*args is not allowed"):

        @flow.step()
        def load(*args: Params) -> A:
            return A()


def test_step__map_over_needs_step_dot_field() -> None:
    flow = new_flow()
    with pytest.raises(DefinitionError, match=r"must be 'step\.field'"):

        @flow.step(map_over="plan")
        def work(item: Item) -> A:
            return A()


def test_step__unresolvable_annotation_says_so() -> None:
    flow = new_flow()
    with pytest.raises(DefinitionError, match="cannot resolve its annotations"):

        @flow.step()
        def load(params: NotDefinedAnywhere) -> A:  # type: ignore[name-defined]  # noqa: F821
            return A()


# -- graph errors (raised by validate) ----------------------------------------------


def test_validate__empty_flow_is_rejected() -> None:
    with pytest.raises(DefinitionError, match="no steps"):
        new_flow().validate()


def test_validate__missing_dependency_names_it_and_lists_existing_steps() -> None:
    flow = new_flow()

    @flow.step()
    def load() -> A:
        return A()

    @flow.step(after=["lod"])
    def post(a: A) -> B:
        return B()

    with pytest.raises(DefinitionError) as info:
        flow.validate()
    message = str(info.value)
    assert "step 'post' depends on 'lod', which is not a step" in message
    assert "steps: 'load', 'post'" in message
    assert info.value.steps == ("post", "lod")


def test_validate__cycle_message_shows_the_path() -> None:
    flow = new_flow()

    @flow.step(after=["b"])
    def a(x: B) -> A:
        return A()

    @flow.step(after=["a"])
    def b(x: A) -> B:
        return B()

    with pytest.raises(DefinitionError, match="cycle between steps") as info:
        flow.validate()
    assert "'a' -> 'b' -> 'a'" in str(info.value) or "'b' -> 'a' -> 'b'" in str(info.value)
    assert set(info.value.steps) == {"a", "b"}


def test_validate__self_dependency_is_a_cycle() -> None:
    flow = new_flow()

    @flow.step(after=["a"])
    def a() -> A:
        return A()

    with pytest.raises(DefinitionError, match="cycle between steps 'a' -> 'a'"):
        flow.validate()


def test_validate__input_no_upstream_provides_lists_what_is_available() -> None:
    flow = new_flow()

    @flow.step()
    def load() -> A:
        return A()

    @flow.step(after=["load"])
    def post(a: A, item: Item) -> B:
        return B()

    with pytest.raises(DefinitionError) as info:
        flow.validate()
    message = str(info.value)
    assert "step 'post': parameter 'item' of type Item is not provided" in message
    assert "the flow parameters (Params)" in message
    assert "step 'load' (A)" in message


def test_validate__input_from_a_step_not_in_after_hints_to_add_it() -> None:
    flow = new_flow()

    @flow.step()
    def load() -> A:
        return A()

    @flow.step()
    def post(a: A) -> B:
        return B()

    with pytest.raises(DefinitionError, match="step 'load' produces it; add it to after"):
        flow.validate()


def test_validate__ambiguous_input_names_both_steps() -> None:
    flow = new_flow()

    @flow.step()
    def first() -> A:
        return A()

    @flow.step()
    def second() -> A:
        return A()

    @flow.step(after=["first", "second"])
    def post(a: A) -> B:
        return B()

    with pytest.raises(DefinitionError, match="ambiguous") as info:
        flow.validate()
    assert "step 'first' (A) and step 'second' (A)" in str(info.value)
    assert set(info.value.steps) == {"post", "first", "second"}


def _flow_mapping_over(field: str, param_type: type[BaseModel] = Item) -> Flow:
    flow = new_flow()

    @flow.step()
    def plan() -> Items:
        return Items(items=[])

    def work(item: Item) -> A:
        return A()

    work.__annotations__["item"] = param_type
    flow.step(map_over=f"plan.{field}")(work)
    return flow


def test_validate__map_over_unknown_field_lists_fields() -> None:
    with pytest.raises(DefinitionError, match="Items has no field 'itemz'; fields: items, count"):
        _flow_mapping_over("itemz").validate()


def test_validate__map_over_non_list_field_is_rejected() -> None:
    with pytest.raises(DefinitionError, match=r"'plan.count' is int, expected list\[SomeModel\]"):
        _flow_mapping_over("count").validate()


def test_validate__map_over_list_of_non_models_is_rejected() -> None:
    with pytest.raises(DefinitionError, match=r"is list\[int\], expected list\[SomeModel\]"):
        _flow_mapping_over("numbers").validate()


def test_validate__map_over_element_must_match_a_parameter() -> None:
    with pytest.raises(DefinitionError, match="yields Item items, but no parameter of 'work'"):
        _flow_mapping_over("items", param_type=A).validate()


def test_validate__map_over_missing_step_is_a_missing_dependency() -> None:
    flow = new_flow()

    @flow.step(map_over="plan.items")
    def work(item: Item) -> A:
        return A()

    with pytest.raises(DefinitionError, match="'work' depends on 'plan', which is not a step"):
        flow.validate()


def test_validate__nested_fan_out_is_rejected() -> None:
    flow = _flow_mapping_over("items")

    class More(BaseModel):
        items: list[Item]

    @flow.step(after=["work"])
    def gather(parts: list[A]) -> More:
        return More(items=[])

    assert flow.steps["gather"].inputs["parts"] == StepInput("gather", list[A], "work")

    @flow.step(map_over="work.items")
    def again(item: Item) -> B:
        return B()

    with pytest.raises(DefinitionError, match="nested fan-out is not supported"):
        flow.validate()


def test_validate__plain_annotation_of_a_mapped_output_hints_list() -> None:
    flow = _flow_mapping_over("items")

    @flow.step(after=["work"])
    def total(result: A) -> B:
        return B()

    with pytest.raises(DefinitionError, match=r"'work' is mapped .* annotate list\[A\]") as info:
        flow.validate()
    assert "parameter 'result' of type A" in str(info.value)


def test_validate__gather_of_an_unmapped_step_hints_plain_annotation() -> None:
    flow = new_flow()

    @flow.step()
    def load() -> A:
        return A()

    @flow.step(after=["load"])
    def post(all_a: list[A]) -> B:
        return B()

    with pytest.raises(
        DefinitionError, match="'load' is not mapped and produces one A; annotate A"
    ):
        flow.validate()


# -- what a valid declaration gives --------------------------------------------------


def test_step__returns_the_function_unchanged() -> None:
    flow = new_flow()

    def load(params: Params) -> A:
        return A(value=params.n)

    assert flow.step()(load) is load
    assert load(Params(n=4)) == A(value=4)


def test_step__bare_decorator_works_like_the_called_one() -> None:
    flow = new_flow()

    @flow.step
    def load() -> A:
        return A()

    assert list(flow.steps) == ["load"]
    assert flow.steps["load"].inputs == {}


def test_step__classes_local_to_a_function_resolve_with_postponed_annotations() -> None:
    class Local(BaseModel):
        y: int = 0

    flow = new_flow()

    @flow.step()
    def make() -> Local:
        return Local()

    @flow.step(after=["make"])
    def use(local: Local) -> A:
        return A()

    assert flow.steps["use"].inputs["local"] == StepInput("upstream", Local, "make")


def test_map_over__adds_its_source_to_after_implicitly() -> None:
    flow = _flow_mapping_over("items")
    work = flow.steps["work"]
    assert work.after == ("plan",)
    assert work.map_over == MapOver("plan", "items")
    assert work.is_mapped
    assert work.inputs["item"] == StepInput("item", Item, "plan")
    assert [s.name for s in flow.roots()] == ["plan"]


@pytest.fixture
def injectable() -> Iterator[type]:
    class Context:
        pass

    register_injectable(Context)
    yield Context
    INJECTABLE_TYPES.discard(Context)


def test_validate__registered_injectable_is_a_context_input(injectable: type) -> None:
    flow = new_flow()

    def load(ctx: object, params: Params) -> A:
        return A()

    load.__annotations__["ctx"] = injectable
    flow.step()(load)
    assert flow.steps["load"].inputs["ctx"] == StepInput("context", injectable)
    assert flow.steps["load"].inputs["params"] == StepInput("params", Params)


def test_validate__is_idempotent_and_freeze_forbids_new_steps() -> None:
    flow = new_flow()

    @flow.step()
    def load() -> A:
        return A()

    assert flow.validate() is flow.validate()
    steps = flow.steps
    assert flow.freeze().steps is steps
    with pytest.raises(DefinitionError, match="frozen"):

        @flow.step()
        def late() -> B:
            return B()


def test_example__roots_order_and_queries() -> None:
    flow = example.flow
    assert [s.name for s in flow.roots()] == ["plan"]
    assert flow.topological_order() == ("plan", "work", "total")
    assert list(flow.steps) == ["plan", "work", "total"]
    assert flow.upstream("total") == ("work",)
    assert flow.downstream("plan") == ("work",)
    assert flow.downstream("total") == ()
    with pytest.raises(DefinitionError, match="no step named 'nope'"):
        flow.upstream("nope")


def test_example__inputs_are_resolved_from_annotations() -> None:
    steps = example.flow.steps
    assert steps["plan"].inputs == {"params": StepInput("params", example.ExampleParams)}
    assert steps["work"].inputs == {"chunk": StepInput("item", example.Chunk, "plan")}
    assert steps["total"].inputs == {
        "results": StepInput("gather", list[example.ChunkResult], "work"),
        "params": StepInput("params", example.ExampleParams),
    }
    assert steps["total"].output is example.Total
    assert not steps["total"].is_mapped


def test_example__graph_is_read_only_and_carries_steps() -> None:
    graph = example.flow.graph
    assert set(graph.edges) == {("plan", "work"), ("work", "total")}
    assert graph.nodes["work"]["step"] is example.flow.steps["work"]
    with pytest.raises(nx.NetworkXError):
        graph.add_edge("total", "plan")


def test_example__describe_mentions_every_step_and_edge() -> None:
    text = example.flow.describe()
    for name in ("plan", "work", "total", "--period", "--chunks", "plan -> work", "work -> total"):
        assert name in text
    assert "results: list[ChunkResult] <- all runs of step work" in text
    assert "one run per item of 'plan.chunks'" in text


def test_example__steps_compute_by_hand() -> None:
    params = example.ExampleParams(period="2026-11", chunks=3)
    plan = example.plan(params)
    results = [example.work(chunk) for chunk in plan.chunks]
    total = example.total(results, params)
    assert total == example.Total(period="2026-11", chunks=3, total=sum(range(1, 31)))


# -- parameters ------------------------------------------------------------------------


def test_parse_params__valid_values_are_parsed() -> None:
    params = example.flow.parse_params({"period": "2026-11", "chunks": "5"})
    assert params == example.ExampleParams(period="2026-11", chunks=5)


@pytest.mark.parametrize(
    ("period", "meant"),
    [
        ("2026-13", "2026-12"),
        ("26-11", "2026-11"),
        ("2026-1", "2026-01"),
        ("2026-00", "2026-10"),
        ("2026-11 ", "2026-11"),
    ],
)
def test_parse_params__bad_period_names_value_and_form(period: str, meant: str) -> None:
    with pytest.raises(InvalidParameters) as info:
        example.flow.parse_params({"period": period})
    assert info.value.problems == [
        f"--period: invalid period {period!r}: expected YYYY-MM with a month from 01 to 12, "
        f"e.g. 2026-11; did you mean {meant!r}?"
    ]


def test_parse_params__a_period_with_no_likely_meaning_suggests_nothing() -> None:
    with pytest.raises(InvalidParameters) as info:
        example.flow.parse_params({"period": "Nov"})
    assert info.value.problems[0].endswith("e.g. 2026-11")


def test_parse_params__unknown_key_is_named_with_the_valid_ones() -> None:
    with pytest.raises(InvalidParameters) as info:
        example.flow.parse_params({"period": "2026-11", "store": "S1"})
    assert info.value.problems == ["unknown parameter 'store'; valid parameters: period, chunks"]


def test_parse_params__every_problem_is_reported() -> None:
    with pytest.raises(InvalidParameters) as info:
        example.flow.parse_params({"chunks": 101})
    assert info.value.problems == [
        "--period: required, none given",
        "--chunks: invalid value 101: expected less than or equal to 100",
    ]


@pytest.mark.parametrize(
    ("annotation", "shown"),
    [
        (int | None, "int | None"),
        (Optional[int], "int | None"),  # noqa: UP045 (the old spelling must read the same)
        (list[int], "list[int]"),
        (dict[str, int | None], "dict[str, int | None]"),
    ],
)
def test_type_name__optional_parameters_read_as_python(annotation: object, shown: str) -> None:
    # `engine flows show` printed `UnionType[int, NoneType]` for `int | None`
    assert type_name(annotation) == shown


class Region(BaseModel):
    region: str
    codes: list[str] = []


def test_flow_searchable__names_fields_of_its_params_only() -> None:
    with pytest.raises(DefinitionError, match="'nowhere' is not a field of Region"):
        Flow("bad", params=Region, searchable=("nowhere",))
    with pytest.raises(DefinitionError, match="write searchable=\\('region',\\)"):
        Flow("bad", params=Region, searchable="region")
    with pytest.raises(DefinitionError, match="names a parameter twice"):
        Flow("bad", params=Region, searchable=("region", "region"))
    assert Flow("good", params=Region).searchable == ()
