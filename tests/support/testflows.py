"""Flows the runtime tests drive. Loaded with ENGINE_FLOW_MODULES=testflows.

Steps record their effects through ``ctx.conn`` in ``test_effects`` (one row
per step run, unique), so a test can check that an effect committed exactly
once and that a fenced worker committed nothing. Behaviour is steered by the
job parameters, so worker processes need no shared memory:

- ``hold_file``: on attempt 1 the step touches ``<hold_file>.started`` and then
  waits until ``<hold_file>.release`` exists (checking ``ctx``), which lets a
  test kill, stop or signal a worker mid-step;
- ``fail_times``: the step raises on its first ``fail_times`` attempts;
- ``hold_then``: ``cancel`` or ``fail``: once released, the held step raises
  ``Cancel`` or ``Fail`` instead of returning (a decision taken late);
- ``reject_while``: while this file exists, step ``fail_step`` raises
  ``Reject`` (its input data is refused until someone fixes it).
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from pydantic import BaseModel

from engine import Cancel, Fail, Flow, Reject, RetryPolicy, StepContext

log = logging.getLogger("testflows")

EFFECTS_DDL = """
CREATE TABLE IF NOT EXISTS test_effects (
    job_id      uuid    NOT NULL,
    step        text    NOT NULL,
    fanout_key  text    NOT NULL,
    attempt     integer NOT NULL,
    worker      text    NOT NULL,
    UNIQUE (job_id, step, fanout_key)
)
"""

# what a failing step's second error line quotes: kept in the database, never logged
DOCUMENT_IN_ERROR = "INV-2026-11-00042"

# In-process hooks for thread-based tests: set by the test, used by steps.
HOOKS: dict[str, threading.Barrier | threading.Event] = {}


class Params(BaseModel):
    n: int = 0
    hold_file: str = ""
    hold_step: str = "b"
    fail_times: int = 0
    fail_step: str = "b"
    hold_then: str = ""
    reject_while: str = ""


class Out(BaseModel):
    step: str
    n: int


def effect(ctx: StepContext, params: Params, step: str) -> Out:
    """Record the effect in the step's transaction; hold or fail when asked to."""
    # a step's own log line: the engine adds the step run's context to it
    log.info("step %s recording its effect", step)
    ctx.conn.execute(
        "INSERT INTO test_effects (job_id, step, fanout_key, attempt, worker) "
        "VALUES (%s, %s, %s, %s, %s)",
        (ctx.job_id, step, ctx.fanout_key, ctx.attempt, ctx.worker),
    )
    if params.hold_file and step == params.hold_step and ctx.attempt == 1:
        Path(params.hold_file + ".started").touch()
        release = Path(params.hold_file + ".release")
        while not release.exists():
            ctx.check()
            time.sleep(0.02)
        if params.hold_then == "cancel":
            raise Cancel(f"{step} decided to cancel the job")
        if params.hold_then == "fail":
            raise Fail(f"{step} decided to fail for good")
    if step == params.fail_step and params.reject_while and Path(params.reject_while).exists():
        raise Reject(f"{step} refuses its input: {params.reject_while} says the data is bad")
    if step == params.fail_step and ctx.attempt <= params.fail_times:
        # a second line as a driver's would be: it quotes a document's values
        raise ValueError(
            f"planned failure {ctx.attempt} of {params.fail_times} in {step}\n"
            f"DETAIL:  Key (document_no)=({DOCUMENT_IN_ERROR}) already exists."
        )
    return Out(step=step, n=params.n)


# -- chain: a -> b -> c --------------------------------------------------------------

# "go": the signal the state machine sends (its steps park through the store)
chain = Flow(
    "chain",
    params=Params,
    description="three steps in a row, each with an effect",
    signals=("go",),
)


class A(Out):
    pass


class B(Out):
    pass


class C(Out):
    pass


@chain.step()
def a(params: Params, ctx: StepContext) -> A:
    return A(**effect(ctx, params, "a").model_dump())


@chain.step(after=["a"])
def b(prev: A, params: Params, ctx: StepContext) -> B:
    return B(**effect(ctx, params, "b").model_dump())


@chain.step(after=["b"], retry=RetryPolicy(max_attempts=3, base_delay_s=10, jitter=0))
def c(prev: B, params: Params, ctx: StepContext) -> C:
    return C(**effect(ctx, params, "c").model_dump())


# -- diamond: a -> (left, right) -> join: the fan-in race -----------------------------

diamond = Flow(
    "diamond", params=Params, description="two branches meeting in one step", signals=("go",)
)


class Left(Out):
    pass


class Right(Out):
    pass


class Joined(BaseModel):
    total: int


@diamond.step(name="a")
def d_a(params: Params, ctx: StepContext) -> A:
    return A(**effect(ctx, params, "a").model_dump())


def _meet(ctx: StepContext) -> None:
    barrier = HOOKS.get("diamond")
    if isinstance(barrier, threading.Barrier):
        barrier.wait(timeout=30)


@diamond.step(after=["a"])
def left(prev: A, params: Params, ctx: StepContext) -> Left:
    out = effect(ctx, params, "left")
    _meet(ctx)
    return Left(**out.model_dump())


@diamond.step(after=["a"])
def right(prev: A, params: Params, ctx: StepContext) -> Right:
    out = effect(ctx, params, "right")
    _meet(ctx)
    return Right(**out.model_dump())


@diamond.step(after=["left", "right"])
def join(l_out: Left, r_out: Right, ctx: StepContext, params: Params) -> Joined:
    effect(ctx, params, "join")
    return Joined(total=l_out.n + r_out.n)


# -- fan: plan -> part (one per item) -> gather --------------------------------------


class Part(BaseModel):
    index: int


class Plan(BaseModel):
    parts: list[Part]


class PartOut(BaseModel):
    index: int
    square: int


class Sum(BaseModel):
    total: int
    count: int


fan = Flow("fan", params=Params, description="fan-out over n parts, then gather", signals=("go",))


@fan.step()
def plan(params: Params) -> Plan:
    # takes no StepContext; tests hold it between two barrier waits
    hold = HOOKS.get("plan")
    if isinstance(hold, threading.Barrier):
        hold.wait(timeout=30)  # started
        hold.wait(timeout=30)  # let go
    return Plan(parts=[Part(index=i) for i in range(params.n)])


@fan.step(map_over="plan.parts")
def part(item: Part, params: Params, ctx: StepContext) -> PartOut:
    effect(ctx, params, "part")
    return PartOut(index=item.index, square=item.index * item.index)


@fan.step(after=["part"])
def gather(parts: list[PartOut]) -> Sum:
    assert [p.index for p in parts] == list(range(len(parts))), "gathered out of order"
    return Sum(total=sum(p.square for p in parts), count=len(parts))


flows = [chain, diamond, fan]
