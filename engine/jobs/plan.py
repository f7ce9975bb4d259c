"""Scheduling: which step runs exist, and when the job is finished.

Runs inside the transaction that checkpoints a step run, under the job's row
lock, so two upstream steps finishing at the same moment are serialised and
their common successor is created once (its step key is unique besides).

A step is *complete* when all its upstream steps are complete and all its
step runs are done. A step whose upstream steps are all complete but which has
no step runs yet is expanded now: one run, or one per item for a fan-out (zero
items make it complete at once, and its successors are considered in the same
pass). The job is done when every step is complete.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import psycopg

from engine import store
from engine.config import Settings
from engine.flow import Flow, Step
from engine.jobs.fingerprint import step_fingerprint


@dataclass(frozen=True)
class Scheduled:
    runs: list[store.NewStepRun]  # to insert in the checkpoint's transaction
    job_complete: bool


def max_attempts_for(step: Step, settings: Settings) -> int:
    return step.retry.max_attempts if step.retry is not None else settings.max_attempts


def root_runs(
    flow: Flow, job_id: uuid.UUID, params_json: dict[str, Any], settings: Settings
) -> list[store.NewStepRun]:
    """The step runs that exist from the start: one per root step."""
    return [
        _new_run(step, job_id, "", {"params": params_json}, None, settings, params_json)
        for step in flow.roots()
    ]


def schedule_ready(
    conn: psycopg.Connection[Any],
    flow: Flow,
    job_id: uuid.UUID,
    params_json: dict[str, Any],
    settings: Settings,
    counts: dict[str, store.StepCounts],
    known: Outputs | None = None,
) -> Scheduled:
    """The step runs that became ready, given ``counts`` read under the job's row lock.

    ``known`` holds checkpoints the caller already has (step -> every
    (fan-out key, output) of that step); other upstream outputs are read.
    """
    complete: dict[str, bool] = {}
    runs: list[store.NewStepRun] = []
    for name in flow.topological_order():
        step = flow.steps[name]
        upstream_complete = all(complete[u] for u in step.after)
        if name in counts:
            c = counts[name]
            complete[name] = upstream_complete and c.done == c.total
            continue
        if not upstream_complete or not step.after:
            complete[name] = False
            continue
        new = _expand(conn, flow, step, job_id, params_json, settings, known or {})
        runs += new
        complete[name] = not new
    return Scheduled(runs, all(complete.values()))


def _expand(
    conn: psycopg.Connection[Any],
    flow: Flow,
    step: Step,
    job_id: uuid.UUID,
    params_json: dict[str, Any],
    settings: Settings,
    known: Outputs,
) -> list[store.NewStepRun]:
    outputs = upstream_outputs(conn, job_id, step.after, known)
    shared = raw_inputs(step, params_json, outputs)
    if step.map_over is None:
        return [_new_run(step, job_id, "", shared, None, settings, params_json)]
    items = outputs[step.map_over.step][0][1][step.map_over.field]
    item_param = next(p for p, s in step.inputs.items() if s.kind == "item")
    return [
        _new_run(step, job_id, str(i), {**shared, item_param: item}, item, settings, params_json)
        for i, item in enumerate(items)
    ]


def _new_run(
    step: Step,
    job_id: uuid.UUID,
    fanout_key: str,
    inputs: dict[str, Any],
    item: Any,
    settings: Settings,
    params_json: dict[str, Any],
) -> store.NewStepRun:
    # the key is rendered once, here: the claim compares stored strings only
    limit = step.concurrency
    return store.NewStepRun(
        id=uuid.uuid4(),
        step=step.name,
        fanout_key=fanout_key,
        fingerprint=step_fingerprint(str(job_id), step.name, fanout_key, inputs),
        max_attempts=max_attempts_for(step, settings),
        item=item,
        concurrency_key=None if limit is None else limit.render(params_json, item),
        concurrency_limit=None if limit is None else limit.limit,
        concurrency_per_job=limit is not None and limit.per_job,
    )


# step -> every (fan-out key, output) of its done step runs
Outputs = dict[str, list[tuple[str, Any]]]

# the sources whose value comes from another step's checkpoints
UPSTREAM_KINDS = ("upstream", "gather")


def upstream_outputs(
    conn: psycopg.Connection[Any], job_id: uuid.UUID, steps: Iterable[str], known: Outputs
) -> Outputs:
    """The checkpoints of ``steps``: those in ``known``, the rest read from the job."""
    missing = sorted({s for s in steps if s not in known})
    if not missing:
        return known
    return {**known, **store.step_outputs_select(conn, job_id, missing)}


def sources(step: Step) -> set[str]:
    """The upstream steps whose checkpoints ``step`` takes as inputs."""
    return {s.step for s in step.inputs.values() if s.kind in UPSTREAM_KINDS and s.step}


def raw_inputs(step: Step, params_json: dict[str, Any], outputs: Outputs) -> dict[str, Any]:
    """Each parameter of ``step`` fed by the job or a checkpoint, as JSON.

    ``params``: the job's parameters; ``upstream``: the one output of that
    step; ``gather``: every output of a fanned-out step, in fan-out order.
    The ``item`` and ``context`` parameters are per run and left to the caller.
    """
    values: dict[str, Any] = {}
    for param, source in step.inputs.items():
        if source.kind == "params":
            values[param] = params_json
        elif source.kind == "upstream" and source.step is not None:
            values[param] = outputs[source.step][0][1]
        elif source.kind == "gather" and source.step is not None:
            values[param] = [out for _, out in outputs[source.step]]
    return values
