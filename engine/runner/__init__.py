"""One step run: claim -> lease -> run -> checkpoint (fenced) | fail | park.

The life of a step run on a worker's slot, with the module that keeps each
invariant of DESIGN.md. What the slot's collaborators share is one frozen
value built by the slot (:mod:`.services`); each claimed step run that runs
is one :class:`~.attempt.Attempt` (its flow, step, lease, known outputs and
timing) that records its own events, and the collaborators take it:

- :mod:`.claim`: a message in, one conditional statement decides who runs it
  (invariant 2); a refusal costs no attempt (14).
- :mod:`.lease`: the heartbeat renews the lease by the database clock (3, 4)
  and tells the step to stop when it is lost; an attempt's lease keeps when
  its step ran, which the events ending it record (the report's timeline).
- :mod:`.timing`: when an attempt's step ran, on the database's clock; the
  attempt writes it, the heartbeat only reads it.
- :mod:`.delivery`: the slot's ``StepRunner``: messages, batches, giving a
  lease back (12), and the eager successor run next; :mod:`.refusal`: a
  delivery not claimed, left where it should be (a refusal costs nothing).
- :mod:`.execution`: the ``Executor`` runs an attempt inside one
  transaction on the slot's connection; :mod:`.call`: its inputs read and
  validated, the step called, its output checked.
- :mod:`.checkpoint`: the output written only if the lease token still
  matches (fencing, 5), and what it leads to as a ``FollowUp`` value: the
  step runs made ready, the eager successor, the job's end. A checkpoint
  that loses a lock wait is tried again with the output in hand, while the
  lease holds (:meth:`.execution.Executor._checkpoint`): the body is not
  run again for it.
- :mod:`.failures`: retried with backoff, dead-lettered with an alert, or
  recorded as fenced; every decision fenced like a checkpoint (11, 16). A
  step run whose body ran but could not commit through no fault of its own
  is released at no charge (18), counted, and charged an attempt with an
  alert past ``ENGINE_FREE_RELEASES_MAX`` (20): a body runs again only for
  a reason that is counted. :mod:`.dead_letter`: a step run dead-lettered
  and its job failed, written once for the slot and the sweeper.

The engine does not make its step runs wait on each other: job rows are
locked ``FOR NO KEY UPDATE`` (:mod:`engine.store`, the one lock order), so a
step that submitted a child job (whose foreign key share-locks the job row)
and keeps working holds nothing its siblings' checkpoints need.
- :mod:`.park`: a step that waits holds nothing (``engine.waits``).
- :mod:`.group` and :mod:`.rounds`: quick step runs share one commit, each in
  its own savepoint or its own guarded checkpoint (a ``Round`` holds the
  attempts it checkpoints together).
- :mod:`.context`: ``StepContext``, what a running step gets from the engine.
"""

from engine.runner.claim import claim
from engine.runner.delivery import StepRunner
from engine.runner.execution import Executor
from engine.runner.failures import error_record
from engine.runner.outcome import Continuation, Outcome

__all__ = ["Continuation", "Executor", "Outcome", "StepRunner", "claim", "error_record"]
