"""Version 2 of the ``rolling`` test flow: version 1's steps and a new ``audit`` step."""

from __future__ import annotations

from pydantic import BaseModel
from rolling_common import Params, Part, Plan, Total, effect

from engine import Flow, StepContext

flow = Flow("rolling", params=Params, version=2, description="the new deploy's flow")


class Audit(BaseModel):
    ok: bool


@flow.step()
def plan(params: Params, ctx: StepContext) -> Plan:
    effect(ctx, 2, "plan")
    return Plan(parts=[Part(part=i) for i in range(params.parts)])


@flow.step(map_over="plan.parts")
def work(part: Part, ctx: StepContext) -> Part:
    effect(ctx, 2, "work")
    return part


@flow.step(after=["work"])
def total(done: list[Part], ctx: StepContext) -> Total:
    effect(ctx, 2, "total")
    return Total(parts=len(done))


@flow.step(after=["total"])
def audit(total: Total, params: Params, ctx: StepContext) -> Audit:
    effect(ctx, 2, "audit")
    return Audit(ok=total.parts == params.parts)
