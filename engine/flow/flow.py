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

The flow keeps its steps and checks the whole graph; the parts have a module
each: a step as declared and resolved (:mod:`.step`), reading a function into
a step (:mod:`.declare`), matching its inputs (:mod:`.inputs`), signals
(:mod:`.signals`), parameters (:mod:`.params`), the text of ``engine flows
show`` (:mod:`.describe`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeVar, overload

from pydantic import BaseModel

from engine.errors import DefinitionError
from engine.flow.concurrency import Concurrency
from engine.flow.declare import NAME_PATTERN, StepOptions, declare_step, failer, valid_name
from engine.flow.describe import describe
from engine.flow.inputs import Graph, resolve
from engine.flow.params import check_searchable, parse_params
from engine.flow.retention import Retention
from engine.flow.retry import RetryPolicy
from engine.flow.signals import check_approvals, check_signals
from engine.flow.step import (
    INJECTABLE_TYPES,
    Declared,
    InputKind,
    MapOver,
    Step,
    StepInput,
    is_model,
    register_injectable,
)

if TYPE_CHECKING:
    import networkx as nx

__all__ = [
    "INJECTABLE_TYPES",
    "Flow",
    "InputKind",
    "MapOver",
    "Step",
    "StepInput",
    "register_injectable",
]

StepFn = TypeVar("StepFn", bound=Callable[..., BaseModel])
AdmitFn = TypeVar("AdmitFn", bound=Callable[..., None])


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

    ``retention=Retention(done=timedelta(days=400))`` keeps its finished jobs
    longer (or shorter) than the engine's defaults before ``engine prune``
    retires them to a summary and their report (:mod:`engine.flow.retention`).
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
        retention: Retention | None = None,
    ) -> None:
        if not valid_name(name):
            raise DefinitionError(
                f"invalid flow name {name!r}: expected {NAME_PATTERN}, e.g. 'costing'"
            )
        if not is_model(params):
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
        if retention is not None and not isinstance(retention, Retention):
            raise DefinitionError(
                f"retention must be an engine.Retention, got {retention!r}", flow=name
            )
        self._retention = retention or Retention()
        self._signals = check_signals(name, signals)
        self._approvals = check_approvals(name, approvals, self._signals)
        self._searchable = check_searchable(name, params, searchable)
        self._concurrency = concurrency
        self._name = name
        self._params = params
        self._version = version
        self._description = description
        self._declared: dict[str, Declared] = {}
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
    def retention(self) -> Retention:
        """How long its finished jobs stay in the live tables, per end state (``engine prune``)."""
        return self._retention

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
            self._register(name, StepOptions(), sys._getframe(1).f_locals)
            return name
        options = StepOptions(name, after, map_over, retry, concurrency, label)

        def decorator(fn: StepFn) -> StepFn:
            self._register(fn, options, sys._getframe(1).f_locals)
            return fn

        return decorator

    def _register(
        self, fn: Callable[..., BaseModel], options: StepOptions, localns: Mapping[str, Any]
    ) -> None:
        step_name = options.step_name(fn)
        if self._frozen:
            raise self._failer(step_name)(f"cannot add step {step_name!r}: the flow is frozen")
        if step_name in self._declared:
            raise self._failer(step_name)(f"duplicate step name {step_name!r}")
        self._declared[step_name] = declare_step(self._name, self._signals, fn, options, localns)
        self._steps = self._graph = None

    def _failer(self, *steps: str) -> Callable[[str], DefinitionError]:
        return failer(self._name, *steps)

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
        import networkx as nx  # imported when a graph is first built, not by `import engine`

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
        graph_of = Graph(self._params, self._concurrency, declared, self._failer)
        steps = {d.name: resolve(graph_of, d) for d in declared.values()}
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
        return parse_params(self._name, self._params, values)

    def describe(self) -> str:
        """Human text for ``engine flows show NAME``: parameters, steps and edges."""
        return describe(self, {n: d.concurrency for n, d in self._declared.items()})
