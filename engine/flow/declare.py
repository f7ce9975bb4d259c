"""Declaring a step: a plain function read into a :class:`~engine.flow.step.Declared` step.

``@flow.step`` reads the function's name, its parameters' annotations (each
must have one), its return annotation (a pydantic model), its ``map_over``
and ``label``, and the signals its source waits for (declared by the flow),
and refuses each mistake with a message naming the step. Inputs are matched
to providers later, when the whole flow is known (:mod:`.inputs`).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, get_type_hints

from pydantic import BaseModel

from engine.errors import DefinitionError
from engine.flow.concurrency import Concurrency
from engine.flow.label import Label
from engine.flow.retry import RetryPolicy
from engine.flow.signals import declared_signals, signals_waited_for
from engine.flow.step import Declared, MapOver, is_model, type_name

__all__ = [
    "NAME_PATTERN",
    "StepOptions",
    "declare_step",
    "failer",
    "parse_map_over",
    "valid_name",
]

NAME_PATTERN = "^[a-z][a-z0-9_-]*$"
_NAME = re.compile(r"[a-z][a-z0-9_-]*")


def valid_name(name: object) -> bool:
    """Whether ``name`` is a valid flow or step name (:data:`NAME_PATTERN`)."""
    return isinstance(name, str) and _NAME.fullmatch(name) is not None


def failer(flow: str, *steps: str) -> Callable[[str], DefinitionError]:
    """A maker of :class:`DefinitionError` naming ``flow`` and ``steps``."""
    return lambda message: DefinitionError(message, flow=flow, steps=steps)


@dataclass(frozen=True)
class StepOptions:
    """What ``@flow.step(...)`` was given besides the function (see :meth:`engine.Flow.step`)."""

    name: str | None = None
    after: Sequence[str] = ()
    map_over: str | None = None
    retry: RetryPolicy | None = None
    concurrency: Concurrency | None = None
    label: str | None = None

    def step_name(self, fn: Callable[..., Any]) -> str:
        """The step's name: the one given, else the function's."""
        return self.name if self.name is not None else getattr(fn, "__name__", "")


def declare_step(
    flow: str,
    signals: Sequence[str],
    fn: Callable[..., BaseModel],
    options: StepOptions,
    localns: Mapping[str, Any],
) -> Declared:
    """The step ``fn`` as declared (its name, dependencies, typed parameters, output, fan-out,
    policy, key and label), each refused with a message naming it."""
    after, map_over, concurrency, label = (
        options.after,
        options.map_over,
        options.concurrency,
        options.label,
    )
    step_name = options.step_name(fn)
    fail = failer(flow, step_name)
    if not valid_name(step_name):
        raise fail(f"invalid step name {step_name!r}: expected {NAME_PATTERN}")
    if concurrency is not None and not isinstance(concurrency, Concurrency):
        raise fail(
            f"step {step_name!r}: concurrency must be an engine.Concurrency, got {concurrency!r}"
        )
    deps = (after,) if isinstance(after, str) else tuple(after)
    mapping = parse_map_over(flow, step_name, map_over)
    if label is not None and mapping is None:
        raise fail(
            f"step {step_name!r}: label={label!r} names the runs of a fan-out; "
            "the step has no map_over"
        )
    try:
        parsed_label = None if label is None else Label(label)
    except DefinitionError as exc:
        raise fail(f"step {step_name!r}: {exc}") from None
    if mapping is not None and mapping.step not in deps:
        deps = (*deps, mapping.step)
    try:
        hints = get_type_hints(fn, localns=dict(localns))
    except (NameError, TypeError) as exc:
        raise fail(
            f"step {step_name!r}: cannot resolve its annotations ({exc}); "
            "define the types before the step"
        ) from exc
    params: list[tuple[str, Any]] = []
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise fail(f"step {step_name!r}: *{param.name} is not allowed; name each input")
        if param.name not in hints:
            raise fail(
                f"step {step_name!r}: parameter {param.name!r} has no type annotation; "
                "annotate it with the params model, an upstream output or list[Output]"
            )
        params.append((param.name, hints[param.name]))
    output = hints.get("return")
    if not is_model(output):
        raise fail(
            f"step {step_name!r}: return annotation must be a pydantic BaseModel subclass, "
            f"got {type_name(output) if 'return' in hints else 'none'}"
        )
    for waited in signals_waited_for(fn):
        if waited not in signals:
            raise fail(
                f"step {step_name!r} waits for signal {waited!r}, which the flow does not "
                f"declare: {declared_signals(signals)} "
                "(declare it: Flow(..., signals=(...)))"
            )
    return Declared(
        step_name,
        fn,
        tuple(dict.fromkeys(deps)),
        output,
        tuple(params),
        mapping,
        options.retry,
        concurrency,
        parsed_label,
    )


def parse_map_over(flow: str, step: str, map_over: str | None) -> MapOver | None:
    """``"step.field"`` as a :class:`MapOver`; refused naming the expected form."""
    if map_over is None:
        return None
    source, dot, field = map_over.partition(".")
    if not dot or not source or not field or "." in field:
        raise failer(flow, step)(
            f"step {step!r}: map_over={map_over!r} must be 'step.field', e.g. 'plan.chunks'"
        )
    return MapOver(source, field)
