"""The chaos run's newer paths: keys, waits, child jobs, rounds of pure steps.

- ``chaos_keyed``: holds ``chaos:{slot}`` (limit 1 per job) from its first
  step to its last. ``gate`` parks on the signal ``go`` (the harness sends it
  a round later, so the step run waits keeping its slot), ``brood`` submits
  ``kids`` ``chaos_kid`` jobs (same key: they inherit the parent's slot) and
  parks on them, ``tally`` is pure (the round path, keyed).
- ``chaos_close``: a close-like parent under the same key. ``books`` runs
  child ``a`` then child ``b`` (``b`` submitted once ``a`` ended well, as the
  month-end close runs posting then costing) and fails naming a child that
  did not end well; ``seal`` is pure. With ``fail_kid`` its child ``a``
  fails while no row of ``chaos_gates`` opens it: the harness then opens the
  gate and ``engine retry``-es the parent, which must end done.
- ``chaos_kid``: one step ``work``, keyed like its parent.
- ``chaos_pure``: ``split`` -> ``square`` (one step run per item) -> ``total``,
  every step pure (no StepContext): on the PostgreSQL transport they run in
  rounds, checkpointed together. ``square`` holds its own key
  ``chaos-pure:{slot}``, limit 1 per step run.

Every step that takes a context records one effect in ``chaos_effects`` as
its last act (after its waits: a park commits what the step wrote, and the
effect must commit once, with the checkpoint). A step's own failures all say
"planned" (the ``uncharged`` oracle counts any other failure as a charge the
step's code did not cause).
"""

from __future__ import annotations

import random
import time

from pydantic import BaseModel, Field

from engine import Concurrency, Fail, Flow, StepContext

from .chaosflow import Item, Part, Plan, _work

GATES_DDL = """
CREATE TABLE IF NOT EXISTS chaos_gates (
    n  integer PRIMARY KEY,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""

KEY = Concurrency("chaos:{slot}", limit=1, per_job=True)
PLANNED = "planned"  # every failure a chaos step raises on purpose says it


class KeyedParams(BaseModel):
    n: int = Field(ge=0, description="job number, unique in a run")
    slot: str = Field(default="k0", max_length=20)
    kids: int = Field(default=1, ge=0, le=4)
    fail_kid: bool = False  # chaos_close: child a fails until its gate is open
    min_ms: int = Field(default=50, ge=0, le=60_000)
    max_ms: int = Field(default=300, ge=0, le=60_000)


class KidParams(BaseModel):
    n: int = Field(ge=0)
    slot: str = Field(default="k0", max_length=20)
    key: str = "0"
    fail: bool = False
    min_ms: int = Field(default=50, ge=0, le=60_000)
    max_ms: int = Field(default=300, ge=0, le=60_000)


class Gate(BaseModel):
    n: int
    sent_by: str | None = None


class Brood(BaseModel):
    n: int
    kids: list[str]


class Sum(BaseModel):
    n: int
    kids: int


class Worked(BaseModel):
    n: int
    key: str


def _seconds(n: int, step: str, low_ms: int, high_ms: int, key: str = "") -> float:
    low, high = sorted((low_ms, high_ms))
    return random.Random(f"{n}:{step}:{key}").uniform(low, high) / 1000


# -- chaos_kid ----------------------------------------------------------------------------

kid = Flow(
    "chaos_kid",
    params=KidParams,
    description="chaos run: a child job under its parent's key",
    concurrency=KEY,
)


@kid.step()
def work(params: KidParams, ctx: StepContext) -> Worked:
    if params.fail:
        row = ctx.conn.execute("SELECT 1 FROM chaos_gates WHERE n = %s", (params.n,)).fetchone()
        if row is None:
            raise Fail(f"{PLANNED} failure of child {params.key} of job {params.n} (gate shut)")
    _work(ctx, _seconds(params.n, "kid", params.min_ms, params.max_ms, params.key))
    return Worked(n=params.n, key=params.key)


def _kid_params(params: KeyedParams, key: str, fail: bool = False) -> dict[str, object]:
    return {
        "n": params.n,
        "slot": params.slot,
        "key": key,
        "fail": fail,
        "min_ms": params.min_ms,
        "max_ms": params.max_ms,
    }


# -- chaos_keyed --------------------------------------------------------------------------

keyed = Flow(
    "chaos_keyed",
    params=KeyedParams,
    description="chaos run: a keyed job that parks on a signal, then on its children",
    concurrency=KEY,
    signals=("go",),
)


@keyed.step()
def gate(params: KeyedParams, ctx: StepContext) -> Gate:
    got = ctx.wait_for_signal("go")
    _work(ctx, _seconds(params.n, "gate", params.min_ms, params.max_ms))
    return Gate(n=params.n, sent_by=got.sent_by)


@keyed.step(after=["gate"])
def brood(gate: Gate, params: KeyedParams, ctx: StepContext) -> Brood:
    for i in range(params.kids):
        ctx.submit_child(kid, _kid_params(params, str(i)), key=str(i))
    ended = ctx.wait_for_children() if params.kids else []
    bad = [c for c in ended if not c.ok]
    if bad:
        raise Fail(f"{PLANNED}: child {bad[0].key} job {bad[0].job_id} {bad[0].status.value}")
    _work(ctx, _seconds(params.n, "brood", params.min_ms, params.max_ms))
    return Brood(n=params.n, kids=sorted(c.key for c in ended))


@keyed.step(after=["brood"])
def tally(brood: Brood, params: KeyedParams) -> Sum:
    time.sleep(_seconds(params.n, "tally", 0, params.min_ms))
    return Sum(n=params.n, kids=len(brood.kids))


# -- chaos_close --------------------------------------------------------------------------

close = Flow(
    "chaos_close",
    params=KeyedParams,
    description="chaos run: a close-like parent whose children run one after the other",
    concurrency=KEY,
)


@close.step()
def books(params: KeyedParams, ctx: StepContext) -> Brood:
    done = []
    for key in ("a", "b"):
        fail = params.fail_kid and key == "a"
        ctx.submit_child(kid, _kid_params(params, key, fail=fail), key=key)
        child = {c.key: c for c in ctx.wait_for_children()}[key]
        if not child.ok:
            raise Fail(
                f"{PLANNED} failure of the close {params.n}: child {key} job {child.job_id} "
                f"{child.status.value}: {child.error}"
            )
        done.append(key)
    _work(ctx, _seconds(params.n, "books", params.min_ms, params.max_ms))
    return Brood(n=params.n, kids=done)


@close.step(after=["books"])
def seal(books: Brood, params: KeyedParams) -> Sum:
    time.sleep(_seconds(params.n, "seal", 0, params.min_ms))
    return Sum(n=params.n, kids=len(books.kids))


# -- chaos_pure ---------------------------------------------------------------------------


class PureParams(BaseModel):
    n: int = Field(ge=0)
    fan: int = Field(default=2, ge=1, le=20)
    slot: str = Field(default="k0", max_length=20)
    max_ms: int = Field(default=80, ge=0, le=10_000)


class Total(BaseModel):
    n: int
    parts: int
    sum: int


pure = Flow("chaos_pure", params=PureParams, description="chaos run: pure steps, run in rounds")


@pure.step()
def split(params: PureParams) -> Plan:
    time.sleep(_seconds(params.n, "split", 0, params.max_ms))
    return Plan(items=[Item(index=i) for i in range(params.fan)])


@pure.step(map_over="split.items", concurrency=Concurrency("chaos-pure:{slot}", limit=1))
def square(item: Item, params: PureParams) -> Part:
    time.sleep(_seconds(params.n, "square", 0, params.max_ms, str(item.index)))
    return Part(item=item.index * item.index)


@pure.step(after=["square"])
def total(parts: list[Part], params: PureParams) -> Total:
    return Total(n=params.n, parts=len(parts), sum=sum(p.item for p in parts))


flows = [keyed, close, kid, pure]
