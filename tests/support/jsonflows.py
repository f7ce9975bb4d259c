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
  holding a NUL or a lone surrogate.
"""

from __future__ import annotations

from pydantic import BaseModel
from testflows import Params, effect

from engine import Flow, RetryPolicy, StepContext


class BadParams(Params):
    bad: str = ""
    bad_times: int = 1_000
    ratio: float = 0.0  # a parameter a caller may pass as NaN (refused at submit)


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


flows = [measure, measure_ctx]
