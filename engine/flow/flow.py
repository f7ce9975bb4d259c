"""Flow declarations: a typed graph of steps, checked before anything runs.

A :class:`Flow` is a declaration, not a run (a run of a flow is a *job*, a run
of a step is a *step run*; both are rows, see ``engine.store``). A step is a
plain function whose inputs are found from its parameter annotations:

=========================  =====================================================
annotation                 the parameter receives
=========================  =====================================================
the flow's params model    the job's parameters                (kind ``params``)
``Out`` of a step in after that step's checkpoint                  (``upstream``)
``list[Out]``              every output of a mapped step in after (``gather``)
the element type           one item of the mapped list       (``item``, fan-out)
a registered injectable    a runtime object, e.g. the step context (``context``)
=========================  =====================================================

``signals=("approve",)`` declares the signals the flow's steps wait for: a
step may wait only for those (``ctx.wait_for_signal``), and ``engine signal``
refuses any other name, naming the declared ones. A flow that declares none
receives none. ``approvals=("approve",)`` says which of them are approvals:
:mod:`engine.waits.approvals` refuses one from its job's submitter (or an
ancestor job's), from an unknown sender, or without a reason.

``map_over="plan.chunks"`` makes a step run once per element of the list field
``chunks`` of step ``plan``'s output; ``plan`` is added to ``after`` implicitly.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
import sys
import textwrap
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType, UnionType
from typing import (
    Any,
    Literal,
    TypeGuard,
    TypeVar,
    Union,
    get_args,
    get_origin,
    get_type_hints,
    overload,
)

import networkx as nx
from pydantic import BaseModel, ValidationError

from engine.errors import DefinitionError, InvalidParameters
from engine.flow.concurrency import Concurrency
from engine.flow.label import Label
from engine.flow.retry import RetryPolicy

__all__ = [
    "INJECTABLE_TYPES",
    "Flow",
    "InputKind",
    "MapOver",
    "Step",
    "StepInput",
    "register_injectable",
]

NAME_PATTERN = "^[a-z][a-z0-9_-]*$"
_NAME = re.compile(r"[a-z][a-z0-9_-]*")
_SEARCHABLE = re.compile(r"[a-z][a-z0-9_]{0,55}")  # its tag, "param." + name, is a tag name
SIGNAL_NAME = re.compile(r"^[a-z][a-z0-9_.-]{0,62}$")
"""A signal's name: what ``engine_signals.name`` and ``Flow(signals=...)`` accept."""

INJECTABLE_TYPES: set[type[Any]] = set()
"""Types the runtime supplies by annotation (kind ``context``); see :func:`register_injectable`."""

InputKind = Literal["params", "upstream", "gather", "item", "context"]
StepFn = TypeVar("StepFn", bound=Callable[..., BaseModel])
AdmitFn = TypeVar("AdmitFn", bound=Callable[..., None])


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
class _Declared:
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


def _valid_name(name: object) -> bool:
    return isinstance(name, str) and _NAME.fullmatch(name) is not None


def type_name(tp: Any) -> str:
    """Short human name of an annotation: ``Plan``, ``list[ChunkResult]``, ``int``."""
    args = get_args(tp)
    origin = get_origin(tp)
    if origin in (Union, UnionType) and args:  # int | None, Optional[int]
        return " | ".join("None" if a is type(None) else type_name(a) for a in args)
    if origin is not None and args:
        return f"{type_name(origin)}[{', '.join(type_name(a) for a in args)}]"
    return str(getattr(tp, "__name__", tp))


def _same_type(a: Any, b: Any) -> bool:
    # typing.List[X] and list[X] are different objects that mean the same thing.
    if a == b:
        return True
    return get_origin(a) is not None and (get_origin(a), get_args(a)) == (
        get_origin(b),
        get_args(b),
    )


def _is_model(tp: Any) -> TypeGuard[type[BaseModel]]:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


class Flow:
    """A named, versioned graph of steps with a pydantic parameters model.

    Steps are added with the :meth:`step` decorator. :meth:`validate` checks
    the whole graph; :meth:`freeze` validates and forbids further steps. The
    query helpers (:attr:`steps`, :meth:`roots`, ...) validate first, so they
    only ever show a consistent graph.

    ``searchable=("region",)`` names the parameters a job of the flow is found
    by: each is tagged ``param.NAME`` with its value (each element of a list)
    in the submit's transaction, and ``engine runs --param region=north``
    finds the jobs submitted with it (an index lookup, whatever the flow). A
    parameter not declared searchable is not tagged and not found that way.
    """

    def __init__(
        self,
        name: str,
        *,
        params: type[BaseModel],
        version: int = 1,
        description: str = "",
        concurrency: Concurrency | None = None,
        signals: Sequence[str] = (),
        approvals: Sequence[str] = (),
        searchable: Sequence[str] = (),
    ) -> None:
        if not _valid_name(name):
            raise DefinitionError(
                f"invalid flow name {name!r}: expected {NAME_PATTERN}, e.g. 'costing'"
            )
        if not _is_model(params):
            raise DefinitionError(
                f"params must be a pydantic BaseModel subclass, got {params!r}", flow=name
            )
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise DefinitionError(f"version must be an integer >= 1, got {version!r}", flow=name)
        if concurrency is not None:
            if not isinstance(concurrency, Concurrency):
                raise DefinitionError(
                    f"concurrency must be an engine.Concurrency, got {concurrency!r}", flow=name
                )
            try:
                concurrency.check(params, None)
            except DefinitionError as exc:
                raise DefinitionError(str(exc), flow=name) from None
        self._signals = _check_signals(name, signals)
        self._approvals = _check_approvals(name, approvals, self._signals)
        self._searchable = _check_searchable(name, params, searchable)
        self._concurrency = concurrency
        self._name = name
        self._params = params
        self._version = version
        self._description = description
        self._declared: dict[str, _Declared] = {}
        self._steps: Mapping[str, Step] | None = None
        self._order: tuple[str, ...] = ()  # topological, computed with _steps
        self._graph: nx.DiGraph[str] | None = None
        self._frozen = False
        self._admission: Callable[..., None] | None = None

    @property
    def name(self) -> str:
        """The flow's name, e.g. ``costing``."""
        return self._name

    @property
    def version(self) -> int:
        """Bumped when the meaning of the graph or of its parameters changes."""
        return self._version

    @property
    def description(self) -> str:
        """One line for people."""
        return self._description

    @property
    def params(self) -> type[BaseModel]:
        """The pydantic model of the job parameters."""
        return self._params

    def __repr__(self) -> str:
        return f"Flow({self._name!r}, version={self._version}, steps={list(self._declared)})"

    @property
    def concurrency(self) -> Concurrency | None:
        """The concurrency key every step of the flow holds, unless a step declares its own."""
        return self._concurrency

    @property
    def signals(self) -> tuple[str, ...]:
        """The signals the flow's steps may wait for and a job of it may receive (declared)."""
        return self._signals

    @property
    def approvals(self) -> tuple[str, ...]:
        """The declared signals that are approvals (segregation of duties applies to them)."""
        return self._approvals

    @property
    def searchable(self) -> tuple[str, ...]:
        """The parameters a job of the flow is found by (``engine runs --param NAME=VALUE``)."""
        return self._searchable

    @property
    def admission(self) -> Callable[..., None] | None:
        """The admission check registered with :meth:`admit`, if any."""
        return self._admission

    # -- declaration -----------------------------------------------------------------

    def admit(self, fn: AdmitFn, /) -> AdmitFn:
        """Register ``fn(params, conn)`` as the check every submit of this flow passes first.

        :func:`engine.submit` runs it inside the submit's transaction, before
        the job is written, with the parsed parameters and that transaction's
        psycopg connection: raising :class:`engine.Refused` refuses the submit
        and writes nothing (``engine submit`` exits 2 with its message). A lock
        it takes (``FOR SHARE`` on a row the job depends on) is held until the
        job is committed, so a concurrent change of that row either sees the
        job or is seen by the check. The flow's steps re-check what they rely
        on: a job can also be reopened by ``engine retry``. See
        :mod:`engine.jobs.submit`.
        """
        if self._frozen:
            raise DefinitionError(
                "cannot add an admission check: the flow is frozen", flow=self.name
            )
        if self._admission is not None:
            raise DefinitionError("the flow has an admission check already", flow=self.name)
        if not callable(fn):
            raise DefinitionError(
                f"an admission check must be callable, got {fn!r}", flow=self.name
            )
        self._admission = fn
        return fn

    @overload
    def step(self, name: StepFn, /) -> StepFn: ...

    @overload
    def step(
        self,
        name: str | None = None,
        *,
        after: Sequence[str] = (),
        map_over: str | None = None,
        retry: RetryPolicy | None = None,
        concurrency: Concurrency | None = None,
        label: str | None = None,
    ) -> Callable[[StepFn], StepFn]: ...

    def step(
        self,
        name: str | StepFn | None = None,
        *,
        after: Sequence[str] = (),
        map_over: str | None = None,
        retry: RetryPolicy | None = None,
        concurrency: Concurrency | None = None,
        label: str | None = None,
    ) -> StepFn | Callable[[StepFn], StepFn]:
        """Register the decorated function as a step and return it unchanged.

        ``name`` defaults to the function's ``__name__``. ``after`` names the
        steps this one depends on (a single string is one name). ``map_over``
        is ``"step.field"``: run once per element of that list field; the step
        is added to ``after`` if it is not there already. Usable bare
        (``@flow.step``) or called (``@flow.step(after=["plan"])``). ``retry``
        overrides the configured retry policy (attempts, backoff) for this step.
        ``concurrency`` replaces the flow's concurrency key for this step; its
        template may also name fields of the mapped item (see
        :mod:`engine.flow.concurrency`). ``label`` (a mapped step only) names
        its runs from fields of the item, e.g. ``"{code}"`` (see
        :mod:`engine.flow.label`).
        """
        # The annotations of steps declared inside a function refer to that
        # function's local classes; get_type_hints only sees them through the
        # caller's frame (pydantic resolves forward references the same way).
        if callable(name):
            self._register(name, None, (), None, sys._getframe(1).f_locals, None)
            return name

        def decorator(fn: StepFn) -> StepFn:
            self._register(
                fn, name, after, map_over, sys._getframe(1).f_locals, retry, concurrency, label
            )
            return fn

        return decorator

    def _register(
        self,
        fn: Callable[..., BaseModel],
        name: str | None,
        after: Sequence[str],
        map_over: str | None,
        localns: Mapping[str, Any],
        retry: RetryPolicy | None,
        concurrency: Concurrency | None = None,
        label: str | None = None,
    ) -> None:
        step_name = name if name is not None else getattr(fn, "__name__", "")
        fail = self._failer(step_name)
        if self._frozen:
            raise fail(f"cannot add step {step_name!r}: the flow is frozen")
        if not _valid_name(step_name):
            raise fail(f"invalid step name {step_name!r}: expected {NAME_PATTERN}")
        if step_name in self._declared:
            raise fail(f"duplicate step name {step_name!r}")
        if concurrency is not None and not isinstance(concurrency, Concurrency):
            raise fail(
                f"step {step_name!r}: concurrency must be an engine.Concurrency, "
                f"got {concurrency!r}"
            )
        deps = (after,) if isinstance(after, str) else tuple(after)
        mapping = self._parse_map_over(step_name, map_over)
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
        if not _is_model(output):
            raise fail(
                f"step {step_name!r}: return annotation must be a pydantic BaseModel subclass, "
                f"got {type_name(output) if 'return' in hints else 'none'}"
            )
        for waited in _signals_waited_for(fn):
            if waited not in self._signals:
                raise fail(
                    f"step {step_name!r} waits for signal {waited!r}, which the flow does not "
                    f"declare: {_declared_signals(self._signals)} "
                    "(declare it: Flow(..., signals=(...)))"
                )
        self._declared[step_name] = _Declared(
            step_name,
            fn,
            tuple(dict.fromkeys(deps)),
            output,
            tuple(params),
            mapping,
            retry,
            concurrency,
            parsed_label,
        )
        self._steps = self._graph = None

    def _parse_map_over(self, step: str, map_over: str | None) -> MapOver | None:
        if map_over is None:
            return None
        source, dot, field = map_over.partition(".")
        if not dot or not source or not field or "." in field:
            raise self._failer(step)(
                f"step {step!r}: map_over={map_over!r} must be 'step.field', e.g. 'plan.chunks'"
            )
        return MapOver(source, field)

    def _failer(self, *steps: str) -> Callable[[str], DefinitionError]:
        return lambda message: DefinitionError(message, flow=self._name, steps=steps)

    # -- validation ------------------------------------------------------------------

    def validate(self) -> Flow:
        """Check the whole graph and resolve every step's inputs; return ``self``.

        Raises :class:`DefinitionError` naming the steps involved for: no
        steps, a dependency on a missing step, a cycle, a bad ``map_over``, and
        a parameter no upstream provides (or that two provide). Idempotent.
        """
        if self._steps is not None:
            return self
        declared = self._declared
        if not declared:
            raise DefinitionError("the flow has no steps; add one with @flow.step", flow=self.name)
        for decl in declared.values():
            for dep in decl.after:
                if dep not in declared:
                    raise self._failer(decl.name, dep)(
                        f"step {decl.name!r} depends on {dep!r}, which is not a step; "
                        f"steps: {', '.join(map(repr, declared))}"
                    )
        graph: nx.DiGraph[str] = nx.DiGraph()
        graph.add_nodes_from(declared)
        graph.add_edges_from((dep, d.name) for d in declared.values() for dep in d.after)
        try:
            edges = nx.find_cycle(graph)
        except nx.NetworkXNoCycle:
            pass
        else:
            path = [u for u, _ in edges] + [edges[-1][1]]
            raise self._failer(*path[:-1])(
                "cycle between steps " + " -> ".join(repr(p) for p in path)
            )
        steps = {d.name: self._resolve(d) for d in declared.values()}
        for step in steps.values():
            graph.nodes[step.name]["step"] = step
        self._steps = MappingProxyType(steps)
        self._graph = nx.freeze(graph)
        # asked by every checkpoint's scheduling: computed once per definition
        position = {name: i for i, name in enumerate(steps)}
        self._order = tuple(nx.lexicographical_topological_sort(graph, key=position.__getitem__))
        return self

    def freeze(self) -> Flow:
        """Validate, then forbid adding steps (the registry does this on load)."""
        self.validate()
        self._frozen = True
        return self

    def _item_type(self, decl: _Declared, mapping: MapOver) -> Any:
        fail = self._failer(decl.name, mapping.step)
        source = self._declared[mapping.step]
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
        if get_origin(field.annotation) is not list or len(args) != 1 or not _is_model(args[0]):
            raise fail(
                f"step {decl.name!r}: map_over {str(mapping)!r} is "
                f"{type_name(field.annotation)}, expected list[SomeModel]"
            )
        if not any(_same_type(ann, args[0]) for _, ann in decl.hints):
            raise fail(
                f"step {decl.name!r}: map_over {str(mapping)!r} yields {type_name(args[0])} "
                f"items, but no parameter of {decl.name!r} is annotated {type_name(args[0])}"
            )
        return args[0]

    def _resolve(self, decl: _Declared) -> Step:
        providers: list[tuple[str, StepInput]] = [
            (f"the flow parameters ({type_name(self.params)})", StepInput("params", self.params))
        ]
        providers += [
            (f"the runtime ({type_name(t)})", StepInput("context", t))
            for t in sorted(INJECTABLE_TYPES, key=type_name)
        ]
        item: Any = None
        if decl.map_over is not None:
            item = self._item_type(decl, decl.map_over)
            label = f"one item of {str(decl.map_over)!r} ({type_name(item)})"
            providers.append((label, StepInput("item", item, decl.map_over.step)))
        concurrency = decl.concurrency if decl.concurrency is not None else self._concurrency
        if decl.concurrency is not None:
            try:
                decl.concurrency.check(self.params, item)
            except DefinitionError as exc:
                raise self._failer(decl.name)(f"step {decl.name!r}: {exc}") from None
        if decl.label is not None and _is_model(item):
            try:
                decl.label.check(item)
            except DefinitionError as exc:
                raise self._failer(decl.name)(f"step {decl.name!r}: {exc}") from None
        for dep in decl.after:
            up = self._declared[dep]
            if up.map_over is not None:
                gathered = types.GenericAlias(list, (up.output,))
                label = f"step {dep!r}, gathered ({type_name(gathered)})"
                providers.append((label, StepInput("gather", gathered, dep)))
            else:
                label = f"step {dep!r} ({type_name(up.output)})"
                providers.append((label, StepInput("upstream", up.output, dep)))
        inputs: dict[str, StepInput] = {}
        for param, ann in decl.hints:
            found = [(label, si) for label, si in providers if _same_type(si.annotation, ann)]
            if len(found) > 1:
                raise self._failer(decl.name, *(si.step for _, si in found if si.step))(
                    f"step {decl.name!r}: parameter {param!r} ({type_name(ann)}) is ambiguous: "
                    f"provided by {' and '.join(label for label, _ in found)}"
                )
            if not found:
                raise self._failer(decl.name)(
                    f"step {decl.name!r}: parameter {param!r} of type {type_name(ann)} is not "
                    f"provided; available: {'; '.join(label for label, _ in providers)}"
                    + self._hint(decl, ann)
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

    def _hint(self, decl: _Declared, ann: Any) -> str:
        args = get_args(ann)
        for other in self._declared.values():
            mapped = other.map_over is not None
            plain = _same_type(ann, other.output)
            listed = (
                get_origin(ann) is list and len(args) == 1 and _same_type(args[0], other.output)
            )
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

    # -- queries ---------------------------------------------------------------------

    @property
    def steps(self) -> Mapping[str, Step]:
        """Resolved steps by name, in declaration order (read-only)."""
        self.validate()
        assert self._steps is not None
        return self._steps

    @property
    def graph(self) -> nx.DiGraph[str]:
        """Read-only graph: nodes are step names (attribute ``step``), edges point downstream."""
        self.validate()
        assert self._graph is not None
        return self._graph

    def _known(self, name: str) -> None:
        if name not in self.steps:
            raise self._failer(name)(
                f"no step named {name!r}; steps: {', '.join(map(repr, self.steps))}"
            )

    def roots(self) -> tuple[Step, ...]:
        """Steps with no upstream: ready at submit time (never a mapped step)."""
        return tuple(s for s in self.steps.values() if not s.after)

    def upstream(self, name: str) -> tuple[str, ...]:
        """Names of the steps ``name`` depends on directly, in declaration order."""
        self._known(name)
        return self.steps[name].after

    def downstream(self, name: str) -> tuple[str, ...]:
        """Names of the steps that depend directly on ``name``, in declaration order."""
        self._known(name)
        return tuple(s.name for s in self.steps.values() if name in s.after)

    def topological_order(self) -> tuple[str, ...]:
        """Step names, dependencies first; ties broken by declaration order."""
        self.validate()
        return self._order

    # -- parameters and description --------------------------------------------------

    def parse_params(self, values: Mapping[str, Any]) -> BaseModel:
        """Validate ``values`` with the params model, or raise :class:`InvalidParameters`.

        Each problem names the option, the bad value and the expected form.
        Unknown keys are problems too.
        """
        fields = self.params.model_fields
        valid = {n for n, f in fields.items()} | {f.alias for f in fields.values() if f.alias}
        problems = [
            f"unknown parameter {key!r}; valid parameters: {', '.join(fields)}"
            for key in values
            if key not in valid
        ]
        known = {k: v for k, v in values.items() if k in valid}
        try:
            parsed = self.params.model_validate(known)
        except ValidationError as exc:
            problems += [_problem(error) for error in exc.errors()]
        if problems:
            raise InvalidParameters(self.name, problems)
        return parsed

    def describe(self) -> str:
        """Human text for ``engine flows show NAME``: parameters, steps and edges."""
        lines = [f"flow {self.name} (version {self.version})"]
        if self.description:
            lines.append(f"  {self.description}")
        lines.append(f"parameters ({type_name(self.params)}):")
        for pname, info in self.params.model_fields.items():
            default = "required" if info.is_required() else f"default {info.get_default()!r}"
            about = f"  {info.description}" if info.description else ""
            lines.append(
                f"  --{pname.replace('_', '-')}: {type_name(info.annotation)}, {default}{about}"
            )
        if self._signals:
            lines.append(f"signals: {', '.join(self._signals)}")
        if self._approvals:
            lines.append(
                f"approvals: {', '.join(self._approvals)} (not by the submitter; a reason needed)"
            )
        if self._concurrency is not None:
            lines.append(f"concurrency: {_describe_concurrency(self._concurrency)}")
        if self._admission is not None:
            doc = (inspect.getdoc(self._admission) or "").split("\n", 1)[0]
            lines.append(f"admission: {getattr(self._admission, '__name__', '?')}  {doc}".rstrip())
        lines.append("steps:")
        for step in self.steps.values():
            fanout = f", one run per item of {str(step.map_over)!r}" if step.map_over else ""
            if step.label is not None:
                fanout += f", labelled {step.label.template!r}"
            lines.append(f"  {step.name} -> {type_name(step.output)}{fanout}")
            own = self._declared[step.name].concurrency
            if own is not None:
                lines.append(f"    concurrency: {_describe_concurrency(own)}")
            for pname, si in step.inputs.items():
                source = {
                    "params": "parameters",
                    "upstream": f"step {si.step}",
                    "gather": f"all runs of step {si.step}",
                    "item": f"one item of {step.map_over}",
                    "context": "runtime",
                }[si.kind]
                lines.append(f"    {pname}: {type_name(si.annotation)} <- {source}")
        lines.append("edges:")
        lines += [f"  {u} -> {v}" for u, v in self.graph.edges] or ["  (none)"]
        return "\n".join(lines)


def declared_signals(signals: Sequence[str] | None) -> str:
    """``valid signals: 'approve'`` or ``it declares no signals``, for messages."""
    return _declared_signals(signals or ())


def _declared_signals(signals: Sequence[str]) -> str:
    if not signals:
        return "it declares no signals"
    return "valid signals: " + ", ".join(map(repr, signals))


def _signals_waited_for(fn: Callable[..., Any]) -> list[str]:
    """The names ``fn`` passes to ``.wait_for_signal(...)`` that are known without running it.

    A string literal, or a module constant holding one (``APPROVAL_SIGNAL``);
    a name computed at run time is checked at the wait instead (the step
    context raises :class:`DefinitionError` there). A function whose source
    cannot be read is not checked here.
    """
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return []
    found: list[str] = []
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "wait_for_signal"
        ):
            continue
        arg = node.args[0] if node.args else None
        if arg is None:
            arg = next((k.value for k in node.keywords if k.arg == "name"), None)
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            found.append(arg.value)
        elif isinstance(arg, ast.Name):
            value = getattr(fn, "__globals__", {}).get(arg.id)
            if isinstance(value, str):
                found.append(value)
    return found


def _check_signals(flow: str, signals: Sequence[str]) -> tuple[str, ...]:
    if isinstance(signals, str):
        signals = (signals,)
    names = tuple(signals)
    for name in names:
        if not isinstance(name, str) or not SIGNAL_NAME.fullmatch(name):
            raise DefinitionError(
                f"invalid signal name {name!r} in signals: expected a lowercase letter, then "
                "up to 62 lowercase letters, digits, '_', '.' or '-' (e.g. 'approve')",
                flow=flow,
            )
    if len(set(names)) != len(names):
        raise DefinitionError(f"signals {names!r} names one twice", flow=flow)
    return names


def _check_approvals(
    flow: str, approvals: Sequence[str], signals: Sequence[str]
) -> tuple[str, ...]:
    names = (approvals,) if isinstance(approvals, str) else tuple(approvals)
    for name in names:
        if name not in signals:
            raise DefinitionError(
                f"approval {name!r} is not a declared signal: approvals name signals the flow "
                f"declares ({_declared_signals(signals)})",
                flow=flow,
            )
    if len(set(names)) != len(names):
        raise DefinitionError(f"approvals {names!r} names one twice", flow=flow)
    return names


def _check_searchable(
    flow: str, params: type[BaseModel], searchable: Sequence[str]
) -> tuple[str, ...]:
    """The searchable parameters: each a field of ``params``, named as a tag's name may be."""
    if isinstance(searchable, str):
        raise DefinitionError(
            f"searchable must be a sequence of parameter names, got the string {searchable!r}"
            f" (write searchable=({searchable!r},))",
            flow=flow,
        )
    names = tuple(searchable)
    fields = sorted(params.model_fields)
    for name in names:
        if name not in params.model_fields:
            raise DefinitionError(
                f"searchable parameter {name!r} is not a field of {params.__name__} "
                f"(its fields: {', '.join(fields) or 'none'})",
                flow=flow,
            )
        if not _SEARCHABLE.fullmatch(name):
            raise DefinitionError(
                f"searchable parameter {name!r}: expected a name of lower-case letters, "
                "digits and '_', starting with a letter, at most 56 characters",
                flow=flow,
            )
    if len(set(names)) != len(names):
        raise DefinitionError(f"searchable names a parameter twice: {names!r}", flow=flow)
    return names


def _describe_concurrency(c: Concurrency) -> str:
    held = "per job" if c.per_job else "per step run"
    return f"key {c.key!r}, limit {c.limit} ({held})"


def _problem(error: Mapping[str, Any]) -> str:
    """One line per pydantic error: option, value given, expected form."""
    # Spelled like the CLI option that ``engine submit`` generates for the field.
    loc = ".".join(str(part) for part in error["loc"]).replace("_", "-")
    option = f"--{loc}" if loc else "parameters"
    if error["type"] == "missing":
        return f"{option}: required, none given"
    message = str(error["msg"]).removeprefix("Value error, ")
    message = message.replace("Input should be ", "expected ", 1)
    given = error.get("input")
    if repr(given) in message:
        return f"{option}: {message}"
    return f"{option}: invalid value {given!r}: {message}"
