"""A step's inputs from its job's parameters and its upstream checkpoints.

One resolver for both places that need them: scheduling, which fingerprints
a new step run by the JSON of its inputs, and execution, which validates the
same JSON into the step's typed arguments. Upstream checkpoints the caller
already holds (``known``) spare a read; the others are read in the caller's
transaction (checkpoints are immutable once done, so no lock is needed).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

import psycopg

from engine import store
from engine.flow import Step

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
