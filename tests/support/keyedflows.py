"""Flows with concurrency keys, for the tests of ``engine.flow.concurrency``.

Loaded with ENGINE_FLOW_MODULES=keyedflows (or next to testflows). Each step
records its effect and holds like :mod:`testflows` (``hold_file``), so a test
can keep a holder running, kill it, or let it finish.

- ``keyed``: one step ``b`` under ``group:{group}``, limit 1;
- ``keyed_pair``: one step ``b`` under ``pair:{group}``, limit 2;
- ``keyed_chain``: ``a`` -> ``b``, only ``b`` under ``chain:{group}``, limit 1 (an
  eager successor);
- ``keyed_jobs``: plan -> part (fan-out) -> gather under ``jobs:{group}``,
  limit 1 per job: one job's parts run side by side, another job's wait;
- ``keyed_items``: plan -> part, the part keyed by its item's ``store`` field;
- ``keyed_gate``: one step ``b`` under ``gate:{group}``, limit 1, that holds,
  then waits for the signal ``go`` (a waiting step run keeps its slot);
- ``keyed_parent``: one step ``spawn`` under ``fam:{group}``, limit 1 per job,
  that submits one child (``keyed_parent`` with ``n - 1`` while ``n > 0``, then
  ``keyed_kid``) and waits for it: a child inherits its ancestors' slots;
- ``keyed_kid``: one step ``b`` under ``fam:{group}``, limit 1 per job, that
  holds like the others (``hold_file``);
- ``keyed_brood``: one step ``spawn`` under ``fam:{group}``, limit 1 per job,
  that submits two ``keyed_kid`` and waits for them (the kids take turns: each
  is another job of the key; the parent's hold does not count against them);
- ``keyed_spawner``: one step ``spawn`` under ``spawn:{group}``, limit 1, that
  records its effect (holding when ``hold_step`` is ``spawn``), then submits
  one ``keyed_kid`` and waits for it.
"""

from __future__ import annotations

from pydantic import BaseModel
from testflows import Out, Params, effect

from engine import Concurrency, Flow, StepContext


class KeyParams(Params):
    group: str = "g"


class A(Out):
    pass


class B(Out):
    pass


keyed = Flow("keyed", params=KeyParams, concurrency=Concurrency("group:{group}", limit=1))


@keyed.step()
def b(params: KeyParams, ctx: StepContext) -> B:
    return B(**effect(ctx, params, "b").model_dump())


keyed_pair = Flow("keyed_pair", params=KeyParams, concurrency=Concurrency("pair:{group}", limit=2))


@keyed_pair.step(name="b")
def pair_b(params: KeyParams, ctx: StepContext) -> B:
    return B(**effect(ctx, params, "b").model_dump())


keyed_chain = Flow("keyed_chain", params=KeyParams)


@keyed_chain.step(name="a")
def chain_a(params: KeyParams, ctx: StepContext) -> A:
    return A(**effect(ctx, params, "a").model_dump())


@keyed_chain.step(name="b", after=["a"], concurrency=Concurrency("chain:{group}", limit=1))
def chain_b(prev: A, params: KeyParams, ctx: StepContext) -> B:
    return B(**effect(ctx, params, "b").model_dump())


class Part(BaseModel):
    index: int
    store: str


class Plan(BaseModel):
    parts: list[Part]


class PartOut(BaseModel):
    index: int


class Gathered(BaseModel):
    count: int


keyed_jobs = Flow(
    "keyed_jobs",
    params=KeyParams,
    concurrency=Concurrency("jobs:{group}", limit=1, per_job=True),
)


@keyed_jobs.step(name="plan")
def jobs_plan(params: KeyParams) -> Plan:
    return Plan(parts=[Part(index=i, store=f"S{i % 2}") for i in range(params.n)])


@keyed_jobs.step(name="part", map_over="plan.parts")
def jobs_part(item: Part, params: KeyParams, ctx: StepContext) -> PartOut:
    effect(ctx, params, "part")
    return PartOut(index=item.index)


@keyed_jobs.step(name="gather", after=["part"])
def jobs_gather(parts: list[PartOut]) -> Gathered:
    return Gathered(count=len(parts))


keyed_items = Flow("keyed_items", params=KeyParams)


@keyed_items.step(name="plan")
def items_plan(params: KeyParams) -> Plan:
    return Plan(parts=[Part(index=i, store=f"S{i % 2}") for i in range(params.n)])


@keyed_items.step(
    name="part", map_over="plan.parts", concurrency=Concurrency("store:{group}:{store}", limit=1)
)
def items_part(item: Part, params: KeyParams, ctx: StepContext) -> PartOut:
    effect(ctx, params, "part")
    return PartOut(index=item.index)


keyed_gate = Flow(
    "keyed_gate",
    params=KeyParams,
    concurrency=Concurrency("gate:{group}", limit=1),
    signals=("go",),
)


@keyed_gate.step(name="b")
def gate_b(params: KeyParams, ctx: StepContext) -> B:
    out = effect(ctx, params, "b")
    ctx.wait_for_signal("go")
    return B(**out.model_dump())


FAMILY = Concurrency("fam:{group}", limit=1, per_job=True)

keyed_parent = Flow("keyed_parent", params=KeyParams, concurrency=FAMILY)


@keyed_parent.step(name="spawn")
def parent_spawn(params: KeyParams, ctx: StepContext) -> Gathered:
    child = "keyed_parent" if params.n > 0 else "keyed_kid"
    kid = {"group": params.group, "n": max(params.n - 1, 0), "hold_file": params.hold_file}
    ctx.submit_child(child, kid, key="kid")
    kids = ctx.wait_for_children()
    return Gathered(count=sum(k.ok for k in kids))


keyed_kid = Flow("keyed_kid", params=KeyParams, concurrency=FAMILY)


@keyed_kid.step(name="b")
def kid_b(params: KeyParams, ctx: StepContext) -> B:
    return B(**effect(ctx, params, "b").model_dump())


keyed_brood = Flow("keyed_brood", params=KeyParams, concurrency=FAMILY)


@keyed_brood.step(name="spawn")
def brood_spawn(params: KeyParams, ctx: StepContext) -> Gathered:
    for i in range(2):
        ctx.submit_child("keyed_kid", {"group": params.group, "n": i}, key=f"kid{i}")
    kids = ctx.wait_for_children()
    return Gathered(count=sum(k.ok for k in kids))


keyed_spawner = Flow(
    "keyed_spawner", params=KeyParams, concurrency=Concurrency("spawn:{group}", limit=1)
)


@keyed_spawner.step(name="spawn")
def spawner_spawn(params: KeyParams, ctx: StepContext) -> Gathered:
    effect(ctx, params, "spawn")
    ctx.submit_child("keyed_kid", {"group": params.group}, key="kid")
    kids = ctx.wait_for_children()
    return Gathered(count=sum(k.ok for k in kids))


flows = [
    keyed,
    keyed_pair,
    keyed_chain,
    keyed_jobs,
    keyed_items,
    keyed_gate,
    keyed_parent,
    keyed_kid,
    keyed_brood,
    keyed_spawner,
]
