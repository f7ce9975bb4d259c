"""Flows that wait durably. Loaded with ENGINE_FLOW_MODULES=testflows,waitflows.

- ``approval``: ``prepare`` (an effect) -> ``gate`` (waits for the signal
  ``params.signal``, with ``timeout_s`` if given; ``rewait_s`` makes it catch
  the timeout and wait again with that new timeout; ``handle_timeout`` makes
  it return ``timed_out`` instead of failing; ``summary`` is what it publishes
  for the approver, ``summary_nan`` one JSON cannot carry) -> ``finish`` (an effect); it
  declares the signal ``go`` only;
- ``nap``: ``nap`` sleeps (durably) until ``sleep_s`` after its job was
  submitted, then returns: a test moves time by ageing the job's
  ``created_at`` and the step run's ``wait_until``.

``HOOKS["before_wait"]`` (a callable), when set, runs after the gate found no
signal and before its step run is parked: a test sends the signal there.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel

from engine import Flow, SignalTimeout, StepContext, job_info
from engine.waits.wait import Wait

HOOKS: dict[str, Callable[[StepContext], Any]] = {}


class WaitParams(BaseModel):
    n: int = 0
    signal: str = "go"
    timeout_s: float | None = None
    handle_timeout: bool = False
    rewait_s: float | None = None
    sleep_s: float = 3600.0
    summary: dict[str, Any] | None = None  # what the gate publishes for its approver
    summary_nan: bool = False  # publish a summary JSON cannot carry (totals.ratio is NaN)


class Prepared(BaseModel):
    n: int


class Gate(BaseModel):
    data: Any = None
    sent_by: str | None = None
    at: datetime | None = None
    attempt: int
    timed_out: bool = False


class Finished(BaseModel):
    by: Any


def _effect(ctx: StepContext, step: str) -> None:
    ctx.conn.execute(
        "INSERT INTO test_effects (job_id, step, fanout_key, attempt, worker) "
        "VALUES (%s, %s, %s, %s, %s)",
        (ctx.job_id, step, ctx.fanout_key, ctx.attempt, ctx.worker),
    )


approval = Flow(
    "approval", params=WaitParams, description="an effect, a gate, an effect", signals=("go",)
)


@approval.step()
def prepare(params: WaitParams, ctx: StepContext) -> Prepared:
    _effect(ctx, "prepare")
    return Prepared(n=params.n)


@approval.step(after=["prepare"])
def gate(prev: Prepared, params: WaitParams, ctx: StepContext) -> Gate:
    timeout = None if params.timeout_s is None else timedelta(seconds=params.timeout_s)
    summary = {"totals": {"ratio": float("nan")}} if params.summary_nan else params.summary
    try:
        try:
            signal = ctx.wait_for_signal(params.signal, timeout=timeout, summary=summary)
        except SignalTimeout:
            if params.rewait_s is None:
                raise
            signal = ctx.wait_for_signal(params.signal, timeout=timedelta(seconds=params.rewait_s))
    except SignalTimeout:
        if not params.handle_timeout:
            raise
        return Gate(attempt=ctx.attempt, timed_out=True)
    except Wait:
        hook = HOOKS.get("before_wait")
        if hook is not None:
            hook(ctx)
        raise
    return Gate(data=signal.data, sent_by=signal.sent_by, at=signal.at, attempt=ctx.attempt)


@approval.step(after=["gate"])
def finish(g: Gate, ctx: StepContext) -> Finished:
    _effect(ctx, "finish")
    return Finished(by=g.data)


nap = Flow("nap", params=WaitParams, description="one step that sleeps durably")


class Woke(BaseModel):
    attempt: int


@nap.step(name="nap")
def nap_step(params: WaitParams, ctx: StepContext) -> Woke:
    job = job_info(ctx.conn, ctx.job_id)
    assert job is not None
    ctx.sleep_until(job.created_at + timedelta(seconds=params.sleep_s))
    return Woke(attempt=ctx.attempt)


flows = [approval, nap]
