"""The call: a step's inputs read and validated, the step called, its output checked.

What the executor (:mod:`engine.runner.execution`) and a round
(:mod:`engine.runner.rounds`) do between an attempt's start and its
checkpoint: build the :class:`~engine.runner.context.StepContext`, read the
upstream checkpoints the attempt does not know yet, validate each input
against its model, call the step, and turn what it returned into its
checkpoint's JSON (:func:`~engine.runner.checkpoint.checkpoint_json`). An
input that no longer fits its model, or an output of the wrong type, is a
:class:`~engine.flow.retry.Fail`: it would not fit on the next attempt either.
"""

from __future__ import annotations

from typing import Any

import psycopg
from pydantic import TypeAdapter, ValidationError

from engine.flow.retry import Fail
from engine.jobs.plan import raw_inputs, sources, upstream_outputs
from engine.runner.attempt import Attempt
from engine.runner.checkpoint import checkpoint_json
from engine.runner.context import StepContext
from engine.waits.children import ChildSubmitter

__all__ = ["call_step"]


def call_step(
    conn: psycopg.Connection[Any], children: ChildSubmitter, attempt: Attempt
) -> dict[str, Any]:
    """Call ``attempt``'s step on ``conn``: its output as its checkpoint stores it, checked."""
    claimed, step = attempt.claimed, attempt.step
    ctx = StepContext(
        conn=conn,
        job_id=claimed.job_id,
        step_run_id=claimed.id,
        step=claimed.step,
        fanout_key=claimed.fanout_key,
        attempt=claimed.attempt,
        max_attempts=claimed.max_attempts,
        fingerprint=claimed.fingerprint,
        worker=attempt.worker,
        stop=attempt.stop,
        children=children,
        signals=attempt.flow.signals,
        lease_token=claimed.token,
    )
    output = step.fn(**_inputs(conn, attempt, ctx))
    if not isinstance(output, step.output):
        raise Fail(
            f"step {step.name!r} returned {type(output).__name__}, expected {step.output.__name__}"
        )
    ctx.check()
    return checkpoint_json(output)


def _inputs(conn: psycopg.Connection[Any], attempt: Attempt, ctx: StepContext) -> dict[str, Any]:
    flow, step, claimed = attempt.flow, attempt.step, attempt.claimed
    outputs = upstream_outputs(conn, claimed.job_id, sources(step), attempt.known)
    kwargs: dict[str, Any] = {}
    try:
        raw = raw_inputs(step, claimed.params, outputs)
        for param, source in step.inputs.items():
            if source.kind == "params":
                kwargs[param] = flow.params.model_validate(raw[param])
            elif source.kind == "context":
                kwargs[param] = ctx
            elif source.kind == "item":
                kwargs[param] = TypeAdapter(source.annotation).validate_python(claimed.item)
            elif source.step is not None:
                model = flow.steps[source.step].output
                value = raw[param]
                kwargs[param] = (
                    [model.model_validate(v) for v in value]
                    if source.kind == "gather"
                    else model.model_validate(value)
                )
    except (ValidationError, IndexError) as exc:
        # a checkpoint that no longer fits its model (the flow changed under a
        # running job) will not fit on the next attempt either
        raise Fail(f"inputs of step {step.name!r} do not validate: {exc}") from exc
    return kwargs
