"""Retry policy and the explicit control flow a step may raise.

A step that raises an ordinary exception is retried with exponential backoff
and jitter until its attempts reach the cap; then it is dead-lettered and the
job fails. A step steers this with:

- ``Retry(delay_s)``: try again after ``delay_s`` (counts as an attempt);
- ``Fail(reason)``: do not retry; dead-letter now (a fault: an alert is recorded);
- ``Reject(reason)``: the input data is refused: fail the job now, once, with
  ``reason``; no retry, no dead letter, no alert (the data is at fault, not
  the flow or the engine);
- ``Cancel(reason)``: cancel the whole job.
"""

from __future__ import annotations

import random

from pydantic import BaseModel, ConfigDict, Field


class StepControl(Exception):
    """Base of the exceptions a step raises on purpose to steer its own run."""


class Retry(StepControl):
    """Try this step run again after ``delay_s`` seconds (policy delay when ``None``)."""

    def __init__(self, delay_s: float | None = None, reason: str = "") -> None:
        self.delay_s = delay_s
        self.reason = reason
        super().__init__(reason or f"retry requested (delay {delay_s} s)")


class Fail(StepControl):
    """A permanent failure: no more attempts; the step run is dead-lettered."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class Reject(StepControl):
    """The step's input data is refused: the job fails once with ``reason``.

    For data the step can never use as it is, whoever runs it (a source file
    that changed or vanished, that is not in its stated encoding): a retry
    would refuse it again, and there is nothing for an operator's pager in
    the flow or the engine. The step run ends (status ``dead``, its error
    kept) with a ``rejected`` event, the job fails with ``reason``, the
    rest of the job is cancelled, and nothing is dead-lettered or alerted.
    Nothing the step wrote commits. The job is marked ``rejected`` (a parent
    sees :attr:`engine.Child.rejected`), and ``engine retry`` refuses it: a
    retry would only repeat the decision; once the data is fixed, submit a
    new job. Fenced like ``Fail`` (invariant 16).
    """

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class Cancel(StepControl):
    """Cancel the whole job; nothing this step wrote commits."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class RetryPolicy(BaseModel):
    """Exponential backoff with jitter, capped in attempts and in delay."""

    model_config = ConfigDict(frozen=True)

    max_attempts: int = Field(default=5, ge=1, le=100)
    base_delay_s: float = Field(default=2.0, ge=0)
    max_delay_s: float = Field(default=900.0, ge=0)
    multiplier: float = Field(default=2.0, ge=1)
    jitter: float = Field(default=0.5, ge=0, le=1, description="share of the delay randomised")

    def delay_s(self, attempt: int, rng: random.Random | None = None) -> float:
        """Delay before the attempt after ``attempt`` (1-based) failed.

        The un-jittered delay is ``base * multiplier**(attempt-1)``, capped at
        ``max_delay_s``; a ``jitter`` share of it is drawn uniformly, so many
        step runs failing together do not come back together.
        """
        raw = min(self.max_delay_s, self.base_delay_s * self.multiplier ** max(0, attempt - 1))
        spread = raw * self.jitter
        return raw - spread + (rng or random).uniform(0, spread)


def attempt_label(attempts: int, max_attempts: int, attempt_base: int = 0, retries: int = 0) -> str:
    """How a step run's attempts read: ``attempt 3 of 5``, ``attempt 1 of 5 (retry 2)``.

    ``engine retry`` starts a retry round (``retries`` + 1): the attempts used
    before it (``attempt_base``) are not counted again, so the cap shown is the
    step's own budget, never a growing one ("2 of 6", "3 of 7").
    """
    label = f"attempt {attempts - attempt_base} of {max_attempts - attempt_base}"
    return f"{label} (retry {retries})" if retries else label
