"""What the two versions of the ``rolling`` test flow share: parameters, outputs, the effect.

``rolling_v1`` and ``rolling_v2`` declare the same flow name with different
versions, as two deploys of one flow module would; a worker loads one of them
(``ENGINE_FLOW_MODULES=rolling_v1``). Every step records which version's code
ran it in ``test_effects`` (step ``v1.plan``, ``v2.audit``...), in the step's
own transaction, so a test can tell which worker ran what, and how often.
"""

from __future__ import annotations

from pydantic import BaseModel

from engine import StepContext


class Params(BaseModel):
    n: int = 0
    parts: int = 3


class Part(BaseModel):
    part: int


class Plan(BaseModel):
    parts: list[Part]


class Total(BaseModel):
    parts: int


def effect(ctx: StepContext, version: int, step: str) -> None:
    ctx.conn.execute(
        "INSERT INTO test_effects (job_id, step, fanout_key, attempt, worker) "
        "VALUES (%s, %s, %s, %s, %s)",
        (ctx.job_id, f"v{version}.{step}", ctx.fanout_key, ctx.attempt, ctx.worker),
    )
