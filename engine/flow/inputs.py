"""Resolving a declared step's inputs against its whole flow: which value each parameter gets.

Each parameter of a step is matched by its annotation to exactly one
provider: the flow's parameters, the runtime's injectables, one item of the
list it maps over, an upstream step's output, or a mapped upstream step's
outputs gathered (``list[Out]``). None or two is a :class:`DefinitionError`
naming the step, the parameter and what is available, with a hint for a near
miss. Called by :meth:`engine.flow.flow.Flow.validate` for every step.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, get_args, get_origin

from pydantic import BaseModel

from engine.errors import DefinitionError
from engine.flow.concurrency import Concurrency
from engine.flow.step import (
    INJECTABLE_TYPES,
    Declared,
    MapOver,
    Step,
    StepInput,
    is_model,
    same_type,
    type_name,
)

__all__ = ["Graph", "hint", "item_type", "resolve"]


@dataclass(frozen=True)
class Graph:
    """What resolving needs of a flow: its parameters, its key, its declared steps."""

    params: type[BaseModel]
    concurrency: Concurrency | None
    declared: Mapping[str, Declared]
    failer: Callable[..., Callable[[str], DefinitionError]]


def resolve(flow: Graph, decl: Declared) -> Step:
    """``decl`` resolved: each parameter to the one input that provides its type, else refused
    naming what is available (and a hint when a near miss is in the flow)."""
    providers: list[tuple[str, StepInput]] = [
        (f"the flow parameters ({type_name(flow.params)})", StepInput("params", flow.params))
    ]
    providers += [
        (f"the runtime ({type_name(t)})", StepInput("context", t))
        for t in sorted(INJECTABLE_TYPES, key=type_name)
    ]
    item: Any = None
    if decl.map_over is not None:
        item = item_type(flow, decl, decl.map_over)
        label = f"one item of {str(decl.map_over)!r} ({type_name(item)})"
        providers.append((label, StepInput("item", item, decl.map_over.step)))
    concurrency = decl.concurrency if decl.concurrency is not None else flow.concurrency
    if decl.concurrency is not None:
        try:
            decl.concurrency.check(flow.params, item)
        except DefinitionError as exc:
            raise flow.failer(decl.name)(f"step {decl.name!r}: {exc}") from None
    if decl.label is not None and is_model(item):
        try:
            decl.label.check(item)
        except DefinitionError as exc:
            raise flow.failer(decl.name)(f"step {decl.name!r}: {exc}") from None
    for dep in decl.after:
        up = flow.declared[dep]
        if up.map_over is not None:
            gathered = types.GenericAlias(list, (up.output,))
            label = f"step {dep!r}, gathered ({type_name(gathered)})"
            providers.append((label, StepInput("gather", gathered, dep)))
        else:
            label = f"step {dep!r} ({type_name(up.output)})"
            providers.append((label, StepInput("upstream", up.output, dep)))
    inputs: dict[str, StepInput] = {}
    for param, ann in decl.hints:
        found = [(label, si) for label, si in providers if same_type(si.annotation, ann)]
        if len(found) > 1:
            raise flow.failer(decl.name, *(si.step for _, si in found if si.step))(
                f"step {decl.name!r}: parameter {param!r} ({type_name(ann)}) is ambiguous: "
                f"provided by {' and '.join(label for label, _ in found)}"
            )
        if not found:
            raise flow.failer(decl.name)(
                f"step {decl.name!r}: parameter {param!r} of type {type_name(ann)} is not "
                f"provided; available: {'; '.join(label for label, _ in providers)}"
                + hint(flow, decl, ann)
            )
        inputs[param] = found[0][1]
    return Step(
        decl.name,
        decl.fn,
        decl.after,
        decl.output,
        MappingProxyType(inputs),
        decl.map_over,
        decl.retry,
        concurrency,
        decl.label,
    )


def item_type(flow: Graph, decl: Declared, mapping: MapOver) -> Any:
    """The element type of the list ``decl`` maps over; refused unless a list of models one
    of its parameters takes, from an unmapped step."""
    fail = flow.failer(decl.name, mapping.step)
    source = flow.declared[mapping.step]
    if source.map_over is not None:
        raise fail(
            f"step {decl.name!r}: cannot map over {str(mapping)!r}: step {mapping.step!r} "
            "is itself mapped (nested fan-out is not supported; gather it first)"
        )
    field = source.output.model_fields.get(mapping.field)
    if field is None:
        raise fail(
            f"step {decl.name!r}: map_over {str(mapping)!r}: {type_name(source.output)} "
            f"has no field {mapping.field!r}; fields: {', '.join(source.output.model_fields)}"
        )
    args = get_args(field.annotation)
    if get_origin(field.annotation) is not list or len(args) != 1 or not is_model(args[0]):
        raise fail(
            f"step {decl.name!r}: map_over {str(mapping)!r} is "
            f"{type_name(field.annotation)}, expected list[SomeModel]"
        )
    if not any(same_type(ann, args[0]) for _, ann in decl.hints):
        raise fail(
            f"step {decl.name!r}: map_over {str(mapping)!r} yields {type_name(args[0])} "
            f"items, but no parameter of {decl.name!r} is annotated {type_name(args[0])}"
        )
    return args[0]


def hint(flow: Graph, decl: Declared, ann: Any) -> str:
    """A hint for a parameter no input provides, when a step of the flow nearly does."""
    args = get_args(ann)
    for other in flow.declared.values():
        mapped = other.map_over is not None
        plain = same_type(ann, other.output)
        listed = get_origin(ann) is list and len(args) == 1 and same_type(args[0], other.output)
        if other.name == decl.name or not (plain or listed):
            continue
        if mapped and plain:
            return (
                f" (hint: step {other.name!r} is mapped and runs once per item; "
                f"annotate list[{type_name(ann)}] to gather its outputs)"
            )
        if listed and not mapped:
            return (
                f" (hint: step {other.name!r} is not mapped and produces one "
                f"{type_name(args[0])}; annotate {type_name(args[0])})"
            )
        if other.name not in decl.after:
            return f" (hint: step {other.name!r} produces it; add it to after)"
    return ""
