"""Version 1 of the ``rolling`` test flow: plan -> work (one run per part) -> total."""

from __future__ import annotations

from rolling_common import Params, Part, Plan, Total, effect

from engine import Flow, StepContext

flow = Flow("rolling", params=Params, version=1, description="the old deploy's flow")


@flow.step()
def plan(params: Params, ctx: StepContext) -> Plan:
    effect(ctx, 1, "plan")
    return Plan(parts=[Part(part=i) for i in range(params.parts)])


@flow.step(map_over="plan.parts")
def work(part: Part, ctx: StepContext) -> Part:
    effect(ctx, 1, "work")
    return part


@flow.step(after=["work"])
def total(done: list[Part], ctx: StepContext) -> Total:
    effect(ctx, 1, "total")
    return Total(parts=len(done))
