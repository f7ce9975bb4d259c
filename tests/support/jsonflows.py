"""Flows whose step returns an output JSON cannot carry, for the checkpoint's refusal.

Loaded with ENGINE_FLOW_MODULES=jsonflows (next to testflows). The job
parameter ``bad`` names what the step's output holds in place of a good value:

- ``nan``: ``totals.ratio`` is ``float('nan')``;
- ``inf``: ``totals.ratio`` is ``float('inf')``;
- ``nul``: ``totals.label`` holds a NUL character (``'\\x00'``);
- ``surrogate``: ``lines[1].note`` holds a lone surrogate (``'\\ud800'``).

- ``measure``: one step that takes no StepContext (a round's member), bad on
  every attempt, two attempts at most;
- ``measure_ctx``: one step that records its effect through ``ctx`` (a group
  commit's member), bad on its first ``bad_times`` attempts (a step that is
  not deterministic may return a finite value next time); with ``bad`` =
  ``raise_nul`` or ``raise_surrogate`` it raises instead, its error message
  holding a NUL or a lone surrogate;
- ``measure_loose``: one step whose output's fields are typed ``dict`` and
  ``Any`` (pydantic's JSON dump writes ``null`` for NaN there): ``bad`` =
  ``nan``, ``inf`` put it in ``totals.ratio`` (a ``dict``), ``deep_inf`` in
  ``extra.lines[1].cost`` (``Any``), ``decimal_nan`` a ``Decimal('NaN')``
  there (whose JSON dump is the string ``"NaN"``), ``subclass`` a float
  subclass's NaN in ``totals.ratio``;
- ``spawn_bad``: one step that submits a child ``measure`` job whose
  parameter ``options.r`` is NaN (a ``dict`` parameter);
- ``tag_bad``: one step that tags its job with a value holding a NUL;
- ``wait_bad``: one step that waits for the signal ``go`` publishing a
  summary whose ``totals.ratio`` is bad: ``bad`` = ``any_nan`` a model's
  ``Any`` field holding NaN, ``decimal_inf`` a dict's ``Decimal('Infinity')``.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from pydantic import BaseModel
from testflows import Params, effect

from engine import Flow, RetryPolicy, StepContext


class BadParams(Params):
    bad: str = ""
    bad_times: int = 1_000
    ratio: float = 0.0  # a parameter a caller may pass as NaN (refused at submit)
    options: dict[str, Any] = {}  # loose parameters: NaN here is no float field's


class Totals(BaseModel):
    ratio: float
    label: str


class Line(BaseModel):
    note: str


class Measured(BaseModel):
    totals: Totals
    lines: list[Line]


# what the step's error message holds instead, for ``bad`` = ``raise_nul``, ``raise_surrogate``
RAISED = {"raise_nul": "before\x00after", "raise_surrogate": "caf\ud800"}

# the field each kind of bad value lands in
FIELDS = {
    "nan": "totals.ratio",
    "inf": "totals.ratio",
    "nul": "totals.label",
    "surrogate": "lines[1].note",
}


def measured(bad: str) -> Measured:
    ratio = {"nan": float("nan"), "inf": float("inf")}.get(bad, 0.5)
    label = "before\x00after" if bad == "nul" else "margin"
    second = "caf\ud800" if bad == "surrogate" else "second"
    return Measured(
        totals=Totals(ratio=ratio, label=label), lines=[Line(note="first"), Line(note=second)]
    )


TWO = RetryPolicy(max_attempts=2, base_delay_s=0, jitter=0)

measure = Flow("measure", params=BadParams, description="one pure step; its output may be bad")


@measure.step(name="measure", retry=TWO)
def measure_pure(params: BadParams) -> Measured:
    return measured(params.bad)


measure_ctx = Flow(
    "measure_ctx", params=BadParams, description="one step with an effect; its output may be bad"
)


@measure_ctx.step(name="measure", retry=TWO)
def measure_effect(params: BadParams, ctx: StepContext) -> Measured:
    effect(ctx, params, "measure")
    bad = params.bad if ctx.attempt <= params.bad_times else ""
    if bad in RAISED:
        raise ValueError(f"document INV-42 has a bad note: {RAISED[bad]!s}")
    return measured(bad)


class Ratio(float):
    """A float subclass (as numpy's float64 is one)."""


class Loose(BaseModel):
    totals: dict  # type: ignore[type-arg]  # untyped on purpose: the README's example
    extra: Any = None


LOOSE_FIELDS = {
    "nan": "totals.ratio",
    "inf": "totals.ratio",
    "deep_inf": "extra.lines[1].cost",
    "decimal_nan": "extra.lines[1].cost",
    "subclass": "totals.ratio",
}


def loose(bad: str) -> Loose:
    ratio: float = {"nan": float("nan"), "inf": float("inf"), "subclass": Ratio("nan")}.get(
        bad, 0.5
    )
    cost: Any = {"deep_inf": float("-inf"), "decimal_nan": Decimal("NaN")}.get(bad, 2.5)
    return Loose(totals={"ratio": ratio}, extra={"lines": [{"cost": 1.0}, {"cost": cost}]})


measure_loose = Flow(
    "measure_loose", params=BadParams, description="one step whose output is loosely typed"
)


@measure_loose.step(name="measure", retry=TWO)
def measure_loosely(params: BadParams) -> Loose:
    return loose(params.bad)


class Spawned(BaseModel):
    child: str


spawn_bad = Flow("spawn_bad", params=BadParams, description="submits a child with NaN params")


@spawn_bad.step(name="spawn", retry=TWO)
def spawn(params: BadParams, ctx: StepContext) -> Spawned:
    child = ctx.submit_child("measure", {"options": {"r": float("nan")}}, key="bad")
    return Spawned(child=str(child.job_id))


tag_bad = Flow("tag_bad", params=BadParams, description="tags its job with a NUL character")


@tag_bad.step(name="tag", retry=TWO)
def tag(params: BadParams, ctx: StepContext) -> Spawned:
    ctx.tag("document", "INV-1", "INV\x002")
    return Spawned(child="")


wait_bad = Flow(
    "wait_bad",
    params=BadParams,
    description="waits for 'go' with a summary JSON cannot carry",
    signals=("go",),
)

SUMMARY_FIELDS = {"any_nan": "totals.ratio", "decimal_inf": "totals.ratio"}


@wait_bad.step(name="gate", retry=TWO)
def gate(params: BadParams, ctx: StepContext) -> Spawned:
    summary: BaseModel | dict[str, Any] = {"totals": {"ratio": 0.5}}
    if params.bad == "any_nan":
        summary = Loose(totals={"ratio": float("nan")})
    elif params.bad == "decimal_inf":
        summary = {"totals": {"ratio": Decimal("Infinity")}}
    ctx.wait_for_signal("go", summary=summary)
    return Spawned(child="")


flows = [measure, measure_ctx, measure_loose, spawn_bad, tag_bad, wait_bad]
