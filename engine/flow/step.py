"""A step as declared and as resolved: its inputs, its fan-out, its output.

:class:`Step` is one node of a flow once the whole graph is checked: a plain
function, the steps it runs after, the typed inputs each parameter receives
(:class:`StepInput`), its fan-out (:class:`MapOver`), its retry policy,
concurrency key and label. :class:`Declared` is the same step before its
inputs are resolved against the flow (:mod:`.inputs`). Injectable types
(:func:`register_injectable`: the runtime's step context) are what a step
receives by annotation from the runtime rather than from a step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import UnionType
from typing import Any, Literal, TypeGuard, Union, get_args, get_origin

from pydantic import BaseModel

from engine.flow.concurrency import Concurrency
from engine.flow.label import Label
from engine.flow.retry import RetryPolicy

__all__ = [
    "INJECTABLE_TYPES",
    "Declared",
    "InputKind",
    "MapOver",
    "Step",
    "StepInput",
    "is_model",
    "register_injectable",
    "same_type",
    "type_name",
]

INJECTABLE_TYPES: set[type[Any]] = set()
"""Types the runtime supplies by annotation (kind ``context``); see :func:`register_injectable`."""

InputKind = Literal["params", "upstream", "gather", "item", "context"]


def register_injectable(tp: type[Any]) -> None:
    """Let steps receive an instance of ``tp`` (e.g. the runtime's StepContext) by annotation."""
    INJECTABLE_TYPES.add(tp)


@dataclass(frozen=True)
class StepInput:
    """Where one parameter of a step gets its value.

    ``step`` names the upstream step for kinds ``upstream`` and ``gather``, and
    the step whose list is mapped for kind ``item``; it is ``None`` otherwise.
    """

    kind: InputKind
    annotation: Any
    step: str | None = None


@dataclass(frozen=True)
class MapOver:
    """Fan-out: one step run per element of ``step``'s output field ``field``."""

    step: str
    field: str

    def __str__(self) -> str:
        return f"{self.step}.{self.field}"


@dataclass(frozen=True)
class Step:
    """One resolved node of a flow: typed inputs to one typed (pydantic) output."""

    name: str
    fn: Callable[..., BaseModel]
    after: tuple[str, ...]
    output: type[BaseModel]
    inputs: Mapping[str, StepInput] = dataclasses.field(hash=False)
    map_over: MapOver | None = None
    retry: RetryPolicy | None = None
    concurrency: Concurrency | None = None  # the step's own, else the flow's
    label: Label | None = None  # how people read a fan-out's runs (engine.flow.label)

    @property
    def is_mapped(self) -> bool:
        """True when the step runs once per item of an upstream list (fan-out)."""
        return self.map_over is not None

    def label_of(self, fanout_key: str, item: Any) -> str:
        """How people name one run of this step: its label from ``item``, else its fan-out key."""
        if self.label is None or not fanout_key:
            return fanout_key
        return self.label.render(item) or fanout_key


@dataclass(frozen=True)
class Declared:
    """A step as declared, before its inputs are resolved against the whole flow."""

    name: str
    fn: Callable[..., BaseModel]
    after: tuple[str, ...]
    output: type[BaseModel]
    hints: tuple[tuple[str, Any], ...]
    map_over: MapOver | None
    retry: RetryPolicy | None = None
    concurrency: Concurrency | None = None
    label: Label | None = None


def type_name(tp: Any) -> str:
    """Short human name of an annotation: ``Plan``, ``list[ChunkResult]``, ``int``."""
    args = get_args(tp)
    origin = get_origin(tp)
    if origin in (Union, UnionType) and args:  # int | None, Optional[int]
        return " | ".join("None" if a is type(None) else type_name(a) for a in args)
    if origin is not None and args:
        return f"{type_name(origin)}[{', '.join(type_name(a) for a in args)}]"
    return str(getattr(tp, "__name__", tp))


def same_type(a: Any, b: Any) -> bool:
    # typing.List[X] and list[X] are different objects that mean the same thing.
    if a == b:
        return True
    return get_origin(a) is not None and (get_origin(a), get_args(a)) == (
        get_origin(b),
        get_args(b),
    )


def is_model(tp: Any) -> TypeGuard[type[BaseModel]]:
    return isinstance(tp, type) and issubclass(tp, BaseModel)
