"""The registry: explicit loading of flow modules, lookups by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine import DefinitionError, Flow, Registry, UnknownFlow
from engine.flow import registry as registry_module
from flows import example


@pytest.fixture(autouse=True)
def flowmods_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parent))


def test_load__default_finds_the_example_flow() -> None:
    registry = Registry.load()
    assert "example" in registry.names()
    assert registry.get("example") is example.flow
    assert registry.origin("example") == "flows.example"


def test_load__default_skips_helpers_and_private_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry_module, "DEFAULT_PACKAGE", "flowmods.default")
    registry = Registry.load()
    assert registry.names() == ["good"]


def test_get__unknown_flow_lists_the_known_ones() -> None:
    registry = Registry.load(["flows.example", "flowmods.dup_a"])
    with pytest.raises(UnknownFlow, match="unknown flow 'costing'; known flows: dup, example"):
        registry.get("costing")


def test_load__explicit_module_without_flow_is_an_error() -> None:
    with pytest.raises(DefinitionError, match=r"'flowmods\.helper' does not export a Flow"):
        Registry.load(["flowmods.helper"])


def test_load__explicit_module_whose_flow_is_not_a_flow_is_an_error() -> None:
    with pytest.raises(DefinitionError, match=r"'flowmods.not_a_flow' .* \(found: str\)"):
        Registry.load(["flowmods.not_a_flow"])


def test_load__module_that_cannot_be_imported_is_named() -> None:
    with pytest.raises(DefinitionError, match=r"cannot import flow module 'flowmods\.nowhere'"):
        Registry.load(["flowmods.nowhere"])


def test_load__duplicate_flow_names_name_both_modules() -> None:
    with pytest.raises(DefinitionError) as info:
        Registry.load(["flowmods.dup_a", "flowmods.dup_b"])
    message = str(info.value)
    assert "flow 'dup': defined twice" in message
    assert "'flowmods.dup_a'" in message
    assert "'flowmods.dup_b'" in message


def test_load__each_flow_is_validated() -> None:
    with pytest.raises(DefinitionError, match="flow 'cyclic': cycle between steps"):
        Registry.load(["flowmods.cyclic"])


def test_load__the_same_flow_from_two_modules_is_not_a_duplicate() -> None:
    registry = Registry.load(["flowmods.dup_a", "flowmods.dup_a"])
    assert registry.names() == ["dup"]


def test_registry__built_from_flows_directly_freezes_them() -> None:
    from flowmods._common import Out, Params

    flow = Flow("direct", params=Params)

    @flow.step()
    def only() -> Out:
        return Out()

    registry = Registry([flow])
    assert registry.flows() == [flow]
    assert "direct" in registry
    assert len(registry) == 1
    with pytest.raises(DefinitionError, match="frozen"):

        @flow.step()
        def late() -> Out:
            return Out()


def test_load__a_listed_package_stands_for_its_modules() -> None:
    # `ENGINE_FLOW_MODULES=flows,mymodule`: a user's module added to a package's flows
    registry = Registry.load(["flowmods.default", "flows.example"])
    assert registry.names() == ["example", "good"]
    assert registry.origin("good") == "flowmods.default.good"


def test_get__an_unknown_flow_suggests_the_closest_name() -> None:
    registry = Registry.load(["flows.example", "flowmods.dup_a"])
    with pytest.raises(UnknownFlow, match=r"unknown flow 'exmaple' \(did you mean 'example'\?\)"):
        registry.get("exmaple")
