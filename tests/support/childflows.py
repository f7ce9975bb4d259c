"""Flows with child jobs. Loaded with ENGINE_FLOW_MODULES=testflows,childflows.

- ``kid``: one step ``work`` that, with ``hold``, first waits for the signal
  ``release`` of its job, with ``fail`` fails permanently, else returns
  ``n * 10``;
- ``brood``: ``spawn`` submits ``children`` ``kid`` jobs (``n`` = 0, 1, ...;
  the one numbered ``fail_child`` fails; every one holds with ``hold``) and
  waits for them, returning their outcomes; with ``retry_after_submit`` its
  first attempt raises ``Retry`` after submitting; then ``tally`` counts.
  Beside them ``sibling``, with ``fail_sibling``, waits for the signal
  ``boom`` of its job, then fails (and the job with it);
- ``strict``: ``spawn`` submits ``children`` ``kid`` jobs and fails, naming
  the first child that did not end well (as the close does); a kid with
  ``fail_flag`` fails while that file exists (the data a retry finds fixed).

``HOOKS["before_wait"]`` (a callable), when set, runs after ``spawn`` found
a child still active and before its step run is parked.

- ``litter``: ``plan`` fans out into ``parts`` parts; part 0 submits a ``kid``
  (and, with ``children`` > 1, more), sets ``EVENTS["submitted"]`` and keeps
  working until ``EVENTS["go_on"]`` is set (its transaction open, the child
  uncommitted in it); every other part waits for ``EVENTS["submitted"]``,
  then returns: its body runs are counted in ``BODY_RUNS`` by
  (job, fanout key). With ``keyed`` every part holds the concurrency key
  ``litter`` (limit 4);
- ``counted``: ``first`` (its body runs counted in ``BODY_RUNS`` under
  (job, "first")), then ``second``.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from engine import ChildrenTimeout, Concurrency, Fail, Flow, Retry, StepContext
from engine.waits.wait import Wait

HOOKS: dict[str, Callable[[StepContext], Any]] = {}


class KidParams(BaseModel):
    n: int
    fail: bool = False
    hold: bool = False
    fail_flag: str | None = None


class Worked(BaseModel):
    value: int


kid = Flow(
    "kid",
    params=KidParams,
    description="a child job: waits, fails or works",
    signals=("release",),
)


@kid.step()
def work(params: KidParams, ctx: StepContext) -> Worked:
    if params.hold:
        ctx.wait_for_signal("release")
    if params.fail:
        raise Fail(f"child {params.n} fails")
    if params.fail_flag is not None and Path(params.fail_flag).exists():
        raise Fail(f"child {params.n} fails while {params.fail_flag} exists")
    return Worked(value=params.n * 10)


class BroodParams(BaseModel):
    children: int = 2
    fail_child: int | None = None
    hold: bool = False
    retry_after_submit: bool = False
    timeout_s: float | None = None
    rewait_s: float | None = None  # caught the timeout: wait again, with this one
    fail_sibling: bool = False


class Outcome(BaseModel):
    key: str
    job_id: str
    status: str
    error: str | None
    output: dict[str, Any] | None


class Spawned(BaseModel):
    outcomes: list[Outcome]
    attempt: int
    timed_out: bool = False


class Tally(BaseModel):
    done: int
    failed: int


brood = Flow(
    "brood", params=BroodParams, description="a step that runs child jobs", signals=("boom",)
)


@brood.step()
def spawn(params: BroodParams, ctx: StepContext) -> Spawned:
    for n in range(params.children):
        ctx.submit_child("kid", {"n": n, "fail": n == params.fail_child, "hold": params.hold})
    if params.retry_after_submit and ctx.attempt == 1:
        raise Retry(0, "crash after submitting")
    timeout = None if params.timeout_s is None else timedelta(seconds=params.timeout_s)
    try:
        try:
            children = ctx.wait_for_children(timeout=timeout)
        except ChildrenTimeout:
            if params.rewait_s is None:
                raise
            children = ctx.wait_for_children(timeout=timedelta(seconds=params.rewait_s))
    except ChildrenTimeout:
        return Spawned(outcomes=[], attempt=ctx.attempt, timed_out=True)
    except Wait:
        hook = HOOKS.get("before_wait")
        if hook is not None:
            hook(ctx)
        raise
    outcomes = [
        Outcome(
            key=c.key, job_id=str(c.job_id), status=c.status.value, error=c.error, output=c.output
        )
        for c in children
    ]
    return Spawned(outcomes=outcomes, attempt=ctx.attempt)


class Nothing(BaseModel):
    pass


@brood.step()
def sibling(params: BroodParams, ctx: StepContext) -> Nothing:
    if params.fail_sibling:
        ctx.wait_for_signal("boom")
        raise Fail("the sibling fails")
    return Nothing()


@brood.step(after=["spawn"])
def tally(s: Spawned) -> Tally:
    return Tally(
        done=sum(o.status == "done" for o in s.outcomes),
        failed=sum(o.status == "failed" for o in s.outcomes),
    )


class StrictParams(BaseModel):
    children: int = 2
    flaky_child: int | None = None
    fail_flag: str | None = None
    hold: bool = False


strict = Flow("strict", params=StrictParams, description="a step that needs every child done")


@strict.step(name="spawn")
def spawn_strict(params: StrictParams, ctx: StepContext) -> Spawned:
    for n in range(params.children):
        flag = params.fail_flag if n == params.flaky_child else None
        ctx.submit_child("kid", {"n": n, "hold": params.hold, "fail_flag": flag})
    children = ctx.wait_for_children()
    for c in children:
        if not c.ok:
            raise Fail(f"child {c.key} job {c.job_id} {c.status.value}: {c.error}")
    outcomes = [
        Outcome(
            key=c.key, job_id=str(c.job_id), status=c.status.value, error=c.error, output=c.output
        )
        for c in children
    ]
    return Spawned(outcomes=outcomes, attempt=ctx.attempt)


# -- litter: a fan-out whose part 0 submits a child and keeps working --------------------

EVENTS: dict[str, threading.Event] = {}
BODY_RUNS: Counter[tuple[str, str]] = Counter()
_counting = threading.Lock()


class Pup(BaseModel):
    index: int


class LitterParams(BaseModel):
    parts: int = 2
    children: int = 1
    keyed: bool = False


class Litter(BaseModel):
    parts: list[Pup]


litter = Flow("litter", params=LitterParams, description="parts of which one submits a child")


@litter.step(name="plan")
def litter_plan(params: LitterParams) -> Litter:
    return Litter(parts=[Pup(index=i) for i in range(params.parts)])


def _part(index: int, params: LitterParams, ctx: StepContext) -> Pup:
    with _counting:
        BODY_RUNS[(str(ctx.job_id), ctx.fanout_key)] += 1
    if index == 0:
        for n in range(params.children):
            ctx.submit_child("kid", {"n": n})
        EVENTS["submitted"].set()
        # keeps working, its transaction (and the children in it) not committed yet
        while not EVENTS["go_on"].wait(0.05):
            ctx.check()
    else:
        EVENTS["submitted"].wait(timeout=30)
    return Pup(index=index)


@litter.step(map_over="plan.parts")
def pups(item: Pup, params: LitterParams, ctx: StepContext) -> Pup:
    return _part(item.index, params, ctx)


keyed_litter = Flow(
    "keyed_litter", params=LitterParams, description="litter whose parts hold a key"
)


@keyed_litter.step(name="plan")
def keyed_plan(params: LitterParams) -> Litter:
    return Litter(parts=[Pup(index=i) for i in range(params.parts)])


@keyed_litter.step(map_over="plan.parts", concurrency=Concurrency("litter", limit=4))
def keyed_pups(item: Pup, params: LitterParams, ctx: StepContext) -> Pup:
    return _part(item.index, params, ctx)


# -- counted: first -> second, each body run of first counted -----------------------------


class Counted(BaseModel):
    n: int = 0


counted = Flow("counted", params=Counted, description="a step whose body runs are counted")


@counted.step()
def first(params: Counted, ctx: StepContext) -> Pup:
    with _counting:
        BODY_RUNS[(str(ctx.job_id), "first")] += 1
    return Pup(index=params.n)


@counted.step(after=["first"])
def second(prev: Pup) -> Pup:
    return prev


flows = [kid, brood, strict, litter, keyed_litter, counted]
