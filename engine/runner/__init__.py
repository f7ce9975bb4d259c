"""Running step runs: delivery (claim, refusals, give-back) and execution (fenced, to a checkpoint).

``delivery`` turns a message into a claim or a refusal; ``execution`` runs a
claimed step run under its lease to its checkpoint, retry or dead letter.
"""

from engine.runner.delivery import StepRunner, claim
from engine.runner.execution import Executor
from engine.runner.failures import error_record
from engine.runner.outcome import Continuation, Outcome

__all__ = ["Continuation", "Executor", "Outcome", "StepRunner", "claim", "error_record"]
