"""The flow ``engine simulate`` runs: three steps in a row, each with one effect.

It lives in ``engine`` (not ``flows/``) because the engine must not import the
ERP's flows. Each step sleeps a seeded, pseudo-random time in short slices,
calling ``ctx.check()`` between them so a kill or a lost lease lands mid-step,
then records its effect in ``sim_effects`` through ``ctx.conn``: the row
commits with the step's fenced checkpoint or not at all, and the table's
unique key ``(job_id, step)`` turns a second effect into an error the
simulator's oracles would see.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

from pydantic import BaseModel, Field

from engine.flow import Flow
from engine.runner.context import StepContext
from engine.store.named import NamedQueries
from engine.store.queries import load

__all__ = ["STEPS", "SimParams", "flow", "step_seconds"]

_sql = NamedQueries(load(str(Path(__file__).with_name("simulate.sql"))))

STEPS = ("reserve", "post", "notify")
"""The steps of the simulation flow, in order."""

_SLICE_S = 0.05


class SimParams(BaseModel):
    """One simulated job: its number, the run's seed and the step duration range."""

    n: int = Field(ge=0)
    seed: int = 0
    min_ms: int = Field(default=150, ge=0, le=60_000)
    max_ms: int = Field(default=600, ge=0, le=60_000)


class Done(BaseModel):
    step: str
    n: int
    attempt: int


class Reserved(Done):
    pass


class Posted(Done):
    pass


class Notified(Done):
    pass


def step_seconds(params: SimParams, step: str) -> float:
    """How long ``step`` of job ``params.n`` works: the same on every attempt and run."""
    rng = random.Random(f"{params.seed}:{params.n}:{step}")
    low, high = sorted((params.min_ms, params.max_ms))
    return rng.uniform(low, high) / 1000


def _work(ctx: StepContext, params: SimParams, step: str) -> Done:
    deadline = time.monotonic() + step_seconds(params, step)
    while (left := deadline - time.monotonic()) > 0:
        ctx.check()
        time.sleep(min(_SLICE_S, left))
    ctx.check()
    _sql.run(
        ctx.conn,
        "sim_effect_insert",
        {"job_id": ctx.job_id, "step": step, "attempt": ctx.attempt, "worker": ctx.worker},
    )
    return Done(step=step, n=params.n, attempt=ctx.attempt)


flow = Flow(
    "simulate",
    params=SimParams,
    description="three steps in a row with one effect each (engine simulate)",
)


@flow.step()
def reserve(params: SimParams, ctx: StepContext) -> Reserved:
    return Reserved(**_work(ctx, params, "reserve").model_dump())


@flow.step(after=["reserve"])
def post(prev: Reserved, params: SimParams, ctx: StepContext) -> Posted:
    return Posted(**_work(ctx, params, "post").model_dump())


@flow.step(after=["post"])
def notify(prev: Posted, params: SimParams, ctx: StepContext) -> Notified:
    return Notified(**_work(ctx, params, "notify").model_dump())
