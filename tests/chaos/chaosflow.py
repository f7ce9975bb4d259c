"""The chaos run's own flow: ``begin`` -> ``work`` (one step run per item) -> ``end``.

Each step works for a time drawn from its job and step (the same on every
attempt and run), in slices that call ``ctx.check()`` and send one cheap
statement, so a kill or a pause lands mid-step inside an open transaction
that is never idle for long. It then records one effect in ``chaos_effects``
through ``ctx.conn``: the row commits with the step's fenced checkpoint or
not at all. The table has no unique key on purpose, so a second effect is
counted by the oracles instead of being refused.

``nap_ms`` makes ``end`` first wait durably (``ctx.sleep_until``) until that
long after its step run first started: it rests ``waiting``, holding no
lease, slot or attempt, until the sweeper wakes it, whatever the faults
meanwhile (the oracles count the attempt it gives back, and a wait left
past its deadline as stranded).

``fail_first`` makes ``begin`` raise on its first attempts and ``last_ms``
makes the attempt after them long: the harness SIGTERMs the worker during
that attempt, the last one allowed when ``fail_first = max_attempts - 1``.
"""

from __future__ import annotations

import random
import time
from datetime import timedelta

from pydantic import BaseModel, Field

from engine import Flow, StepContext

EFFECTS_DDL = """
CREATE TABLE IF NOT EXISTS chaos_effects (
    job_id      uuid        NOT NULL,
    step        text        NOT NULL,
    fanout_key  text        NOT NULL,
    attempt     integer     NOT NULL,
    worker      text        NOT NULL,
    at          timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""

_SLICE_S = 0.05


class ChaosParams(BaseModel):
    n: int = Field(ge=0, description="job number, unique in a run")
    fan: int = Field(default=2, ge=1, le=20, description="step runs of `work`")
    min_ms: int = Field(default=150, ge=0, le=60_000)
    max_ms: int = Field(default=600, ge=0, le=60_000)
    fail_first: int = Field(default=0, ge=0, description="attempts of `begin` that raise")
    last_ms: int = Field(default=0, ge=0, le=600_000, description="`begin` after the failures")
    nap_ms: int = Field(default=0, ge=0, le=60_000, description="`end` waits this long first")


class Item(BaseModel):
    index: int


class Plan(BaseModel):
    items: list[Item]


class Part(BaseModel):
    item: int


class Total(BaseModel):
    n: int
    parts: int


def step_seconds(params: ChaosParams, step: str, key: str = "") -> float:
    """How long one step run works: a function of the job, the step and its item only."""
    low, high = sorted((params.min_ms, params.max_ms))
    return random.Random(f"{params.n}:{step}:{key}").uniform(low, high) / 1000


def _work(ctx: StepContext, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        ctx.check()
        ctx.conn.execute("SELECT 1")  # never idle in transaction between slices
        time.sleep(min(_SLICE_S, left))
    ctx.check()
    ctx.conn.execute(
        "INSERT INTO chaos_effects (job_id, step, fanout_key, attempt, worker)"
        " VALUES (%s, %s, %s, %s, %s)",
        (ctx.job_id, ctx.step, ctx.fanout_key, ctx.attempt, ctx.worker),
    )


flow = Flow("chaos", params=ChaosParams, description="chaos run: timed steps with one effect each")


@flow.step()
def begin(params: ChaosParams, ctx: StepContext) -> Plan:
    if ctx.attempt <= params.fail_first:
        raise RuntimeError(f"planned failure of attempt {ctx.attempt} of {params.fail_first}")
    seconds = step_seconds(params, "begin")
    if params.fail_first and params.last_ms:
        seconds = params.last_ms / 1000
    _work(ctx, seconds)
    return Plan(items=[Item(index=i) for i in range(params.fan)])


@flow.step(map_over="begin.items")
def work(item: Item, params: ChaosParams, ctx: StepContext) -> Part:
    _work(ctx, step_seconds(params, "work", str(item.index)))
    return Part(item=item.index)


@flow.step(after=["work"])
def end(parts: list[Part], params: ChaosParams, ctx: StepContext) -> Total:
    if params.nap_ms:
        row = ctx.conn.execute(
            "SELECT started_at FROM engine_step_runs WHERE id = %s", (ctx.step_run_id,)
        ).fetchone()
        assert row is not None
        started = row["started_at"] if isinstance(row, dict) else row[0]
        ctx.sleep_until(started + timedelta(milliseconds=params.nap_ms))
    _work(ctx, step_seconds(params, "end"))
    return Total(n=params.n, parts=len(parts))
