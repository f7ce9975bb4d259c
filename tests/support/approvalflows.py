"""Flows for approvals and retry rounds. Loaded with ENGINE_FLOW_MODULES=approvalflows.

- ``gated``: ``gate`` waits for the approval ``approve`` (a declared approval;
  ``note`` is a plain signal); a ``{"decision": "reject"}`` ends the job with
  ``Reject``, anything else returns the reason;
- ``gatekeeper``: ``spawn`` submits one ``gated`` child and waits for it; a
  rejected child ends it with ``Reject``, a failed one with ``Fail``;
- ``barring``: ``prepare`` bars the names it is given from approving the job
  (``ctx.bar_approvers``), then ``gate`` waits for the approval ``approve``;
- ``flaky``: ``work`` raises (an ordinary exception) while the file
  ``fail_flag`` exists, with at most 2 attempts per round and no delay.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from engine import Fail, Flow, Reject, RetryPolicy, StepContext


class GateParams(BaseModel):
    n: int = 0


class Gated(BaseModel):
    decision: str
    reason: str


gated = Flow(
    "gated",
    params=GateParams,
    description="waits for an approval",
    signals=("approve", "note"),
    approvals=("approve",),
)


@gated.step()
def gate(params: GateParams, ctx: StepContext) -> Gated:
    sig = ctx.wait_for_signal("approve")
    data = sig.data if isinstance(sig.data, dict) else {}
    decision = str(data.get("decision", "approve"))
    if decision == "reject":
        raise Reject(f"rejected by {sig.sent_by}: {data.get('reason')}")
    return Gated(decision=decision, reason=str(data.get("reason")))


gatekeeper = Flow("gatekeeper", params=GateParams, description="runs a gated child")


@gatekeeper.step()
def spawn(params: GateParams, ctx: StepContext) -> Gated:
    ctx.submit_child("gated", {"n": params.n}, key="gated")
    [child] = ctx.wait_for_children()
    if child.rejected:
        raise Reject(f"child job {child.job_id} rejected: {child.error}")
    if not child.ok:
        raise Fail(f"child job {child.job_id} {child.status.value}: {child.error}")
    assert child.output is not None
    return Gated.model_validate(child.output)


class FlakyParams(BaseModel):
    fail_flag: str


class Worked(BaseModel):
    ok: bool


flaky = Flow("flaky", params=FlakyParams, description="fails while a file exists")


@flaky.step(retry=RetryPolicy(max_attempts=2, base_delay_s=0, max_delay_s=0, jitter=0))
def work(params: FlakyParams) -> Worked:
    if Path(params.fail_flag).exists():
        raise RuntimeError(f"{params.fail_flag} exists")
    return Worked(ok=True)


class BarParams(BaseModel):
    barred: list[str]


class Barred(BaseModel):
    added: int


barring = Flow(
    "barring",
    params=BarParams,
    description="bars some names from approving it, then waits for an approval",
    signals=("approve",),
    approvals=("approve",),
)


@barring.step()
def prepare(params: BarParams, ctx: StepContext) -> Barred:
    return Barred(added=ctx.bar_approvers(params.barred))


@barring.step(after=["prepare"])
def wait(prepared: Barred, ctx: StepContext) -> Gated:
    sig = ctx.wait_for_signal("approve")
    data = sig.data if isinstance(sig.data, dict) else {}
    return Gated(decision=str(data.get("decision", "approve")), reason=str(data.get("reason")))


flows = [gated, gatekeeper, barring, flaky]
