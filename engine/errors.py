"""The engine's one exception tree.

::

    EngineError                      everything the engine raises on purpose
    ├── ConfigError                  a setting is missing or inconsistent
    ├── DefinitionError              a flow declaration is invalid (names the steps)
    ├── BadInput                     user input rejected; the CLI exits 2
    │   ├── UnknownFlow              no registered flow has that name
    │   ├── InvalidParameters        flow parameters failed validation
    │   ├── NoSuchJob                no job has that id (or starts with that prefix)
    │   ├── AmbiguousJobId           a job id prefix more than one job starts with
    │   │                            (names a few of them)
    │   ├── Refused                  the request is valid but the data's state
    │   │   │                        forbids it now (a flow's admission check,
    │   │   │                        a retry of a rejected job)
    │   │   ├── ApprovalRefused      an approval signal from an unknown sender, from
    │   │   │                        the submitter of the job (or of an ancestor
    │   │   │                        job), or without a reason (audited)
    │   │   └── PreviewClosed        a bulk action's preview expired or was applied
    │   │                            already (run --dry-run again)
    │   ├── MalformedMessage         a queue message is not a step message envelope
    │   │                            (the worker dead-letters it and stays up)
    │   └── JsonRefused              a value the database's JSON cannot carry (NaN,
    │       │                        an infinity, a NUL, a surrogate); names the field
    │       └── OutputRefused        a step returned an output (or a wait summary)
    │                                its JSON cannot carry; the step run fails as if
    │                                its code raised
    ├── JobFailed                    a job a command waited for did not end done;
    │                                the CLI exits 1
    ├── ChecksFailed                 a check found broken identities (names each);
    │                                the CLI exits 1
    ├── ReleasesSpent                a step run released at no charge more times
    │                                than ENGINE_FREE_RELEASES_MAX: the next release
    │                                charges its attempt (says why; alerted)
    ├── MigrationError               migrations could not be applied
    │   └── MigrationChecksumMismatch  an applied migration file was edited
    ├── StoreError                   a database driver error, wrapped once in
    │   │                            ``engine.store`` (the original is ``__cause__``)
    │   ├── DatabaseUnavailable      PostgreSQL cannot be reached (the CLI exits 3;
    │   │                            a worker waits it out)
    │   └── Contention               a lock wait timed out, a deadlock, a
    │       │                        serialisation failure or a prepared statement
    │       │                        a pooler lost: a lost race, try again
    │       └── Busy                 an operator command waited past its lock
    │                                timeout; nothing changed (names the likely
    │                                holders; the CLI exits 3)
    ├── TransportError               a queue call failed after the client's retries
    │   └── SqsError                 an SQS call (the botocore error is ``__cause__``)
    ├── AlertSendFailed              an alert sink did not take an alert (the
    │                                dispatcher sends it again later)
    ├── ReportStoreError             a report could not be stored (S3 refused or was
    │                                unreachable; names the bucket; the CLI exits 3)
    ├── Unhealthy                    ``engine worker --check`` found a check failing
    │                                (names each); the CLI exits 3
    └── StepInterrupted              a running step must stop (``ctx.check()``)
        ├── LeaseLost                another worker may own the step run now; also
        │                            raised by a checkpoint whose fenced write
        │                            matched zero rows (the attempt commits nothing)
        └── JobCancelled             the job was cancelled

The exceptions a step raises on purpose to steer its run (``Retry``, ``Fail``,
``Reject``, ``Cancel``) are not errors; they live in :mod:`engine.flow.retry`.
Outside the tree on purpose: :class:`engine.infra.faults.FaultInjected`, which
stands for a bug (a plain ``Exception``) at a chaos run's fault point. Driver
errors (psycopg) are translated into ``StoreError`` in :mod:`engine.store` only.

Messages name the bad value and what would be valid. They never contain a
secret: URLs are masked with :func:`engine.infra.secrets.mask_url` before they are
put in a message.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable


class EngineError(Exception):
    """Base class of every error the engine raises on purpose."""


class ConfigError(EngineError):
    """A setting is missing, malformed or inconsistent with another one."""


class DefinitionError(EngineError):
    """A flow declaration is invalid.

    ``flow`` and ``steps`` name where the problem is, so a message such as
    "flow 'costing': cycle between steps 'a' -> 'b' -> 'a'" can be acted upon.
    """

    def __init__(self, message: str, *, flow: str = "", steps: Iterable[str] = ()) -> None:
        self.flow = flow
        self.steps = tuple(steps)
        prefix = f"flow {flow!r}: " if flow else ""
        super().__init__(prefix + message)


class BadInput(EngineError):
    """Input from a user or a caller was rejected (the CLI exits 2)."""


def checked(value: object, pattern: re.Pattern[str], what: str, expected: str) -> str:
    """``value`` if it is a string ``pattern`` matches whole; else :class:`BadInput`
    ``invalid <what> <value>: expected <expected>``."""
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise BadInput(f"invalid {what} {value!r}: expected {expected}")
    return value


class UnknownFlow(BadInput):
    """No registered flow has the requested name."""

    def __init__(self, name: str, known: Iterable[str]) -> None:
        self.name = name
        self.known = tuple(sorted(known))
        known_text = ", ".join(self.known) or "(none registered)"
        close = difflib.get_close_matches(name, self.known, n=1)
        self.suggestion = close[0] if close else None
        hint = f" (did you mean {self.suggestion!r}?)" if self.suggestion else ""
        super().__init__(f"unknown flow {name!r}{hint}; known flows: {known_text}")


class InvalidParameters(BadInput):
    """The parameters of a submit do not validate against the flow's model."""

    def __init__(self, flow: str, problems: list[str]) -> None:
        self.flow = flow
        self.problems = problems
        super().__init__(f"invalid parameters for flow {flow!r}: " + "; ".join(problems))


class NoSuchJob(BadInput):
    """No job has the given id (``prefix``: no job's id starts with it)."""

    def __init__(self, job_id: object, *, prefix: bool = False) -> None:
        self.job_id = job_id
        super().__init__(
            f"no job id starts with {job_id!r}" if prefix else f"no job with id {job_id}"
        )


class AmbiguousJobId(BadInput):
    """More than one job's id starts with the given prefix; ``candidates`` are a few of them."""

    def __init__(self, prefix: str, candidates: Iterable[str], *, more: bool) -> None:
        self.prefix = prefix
        self.candidates = list(candidates)
        listed = "; ".join(self.candidates) + ("; ..." if more else "")
        super().__init__(f"job id prefix {prefix!r} is ambiguous: {listed} (give more of the id)")


class Refused(BadInput):
    """A well-formed request that the current state of the data forbids (the CLI exits 2).

    Raised by a flow's admission check (:meth:`engine.Flow.admit`) inside the
    submit's transaction, so nothing is written; the message says what state
    is missing and how to reach it.
    """


class PreviewClosed(Refused):
    """A bulk action's preview that may no longer be applied: it expired, or it was applied
    already (the CLI exits 2). See :mod:`engine.jobs.bulk`."""


class ApprovalRefused(Refused):
    """An approval signal that segregation of duties refuses (the CLI exits 2).

    ``rule``: ``sender`` (no sender known), ``submitter`` (the sender
    submitted the job or one of its ancestors, admins included) or
    ``reason`` (the signal's data gives no non-empty ``reason``). Nothing of
    the signal is written; the refusal is in the audit trail
    (``signal_refused``). See :mod:`engine.waits.approvals`.
    """

    def __init__(
        self, message: str, *, job_id: object, signal: str, sender: str | None, rule: str
    ) -> None:
        self.job_id = job_id
        self.signal = signal
        self.sender = sender
        self.rule = rule
        super().__init__(message)


class MalformedMessage(BadInput):
    """A message body that is not a valid envelope (its reason is recorded)."""


class JobFailed(EngineError):
    """A job the caller waited for ended failed or cancelled (the CLI exits 1).

    The command has shown how the job ended already, so the CLI adds no message.
    """


class JsonRefused(BadInput):
    """A value the database's JSON (or text) cannot carry, refused before it is written.

    NaN and the infinities, as a float, a float subclass or a ``Decimal``
    (JSON has no such numbers; pydantic's JSON dump would write ``null``, a
    silent change of value), and in a string or a key a NUL character or a
    surrogate code point (PostgreSQL refuses both). The message names the
    field by its path (``params field 'totals.ratio' is NaN``) and what would
    do instead; :mod:`engine.store.jsonb` is the one check.
    """


class OutputRefused(JsonRefused):
    """A step's output (or its wait's summary) holds a value JSON cannot carry; names the field.

    Raised before anything is written, by the step run's own attempt: it fails
    as if its code had raised, retried under its policy (a step that is not
    deterministic may return a finite value next time), never stored as
    ``null`` and never failing a neighbour's checkpoint in a round or a group.
    """


class ReleasesSpent(EngineError):
    """A step run was given back at no charge its bound's number of times: this one is charged.

    Its message says how many and why the last one came (a lock wait on the
    checkpoint's job row, a deadlock...): the error its attempt records, and
    its alert's line (invariant 20).
    """


class ChecksFailed(EngineError):
    """A check command found problems (the CLI exits 1); ``problems`` names each one."""

    def __init__(self, subject: str, problems: Iterable[str]) -> None:
        self.subject = subject
        self.problems = tuple(problems)
        super().__init__(
            f"{subject}: {len(self.problems)} check(s) failed: " + "; ".join(self.problems)
        )


class MigrationError(EngineError):
    """Migrations could not be applied."""


class MigrationChecksumMismatch(MigrationError):
    """A migration that was already applied has been edited since."""


class StoreError(EngineError):
    """A database error, wrapped once at the store boundary.

    The driver's exception is kept as ``__cause__``.
    """


class DatabaseUnavailable(StoreError):
    """PostgreSQL cannot be reached: refused, not accepting connections, or gone."""


class Contention(StoreError):
    """A lost race in the database: lock timeout, deadlock, serialisation failure, or a
    prepared statement a pooler's server session did not have (not done, try again)."""


class Busy(Contention):
    """An operator command gave up waiting for a lock: nothing changed, try again."""


class TransportError(EngineError):
    """A queue call failed after the client's own retries (the original is ``__cause__``)."""


class SqsError(TransportError):
    """An SQS call failed after botocore's retries (the original is ``__cause__``)."""


class AlertSendFailed(EngineError):
    """An alert sink did not take an alert; the message holds no URL or secret."""


class ReportStoreError(EngineError):
    """A report could not be written where reports go (the botocore error is ``__cause__``)."""


class Unhealthy(EngineError):
    """A health check of ``engine worker --check`` failed; the message names each."""


class StepInterrupted(EngineError):
    """A running step must stop; nothing it wrote through the engine commits."""


class LeaseLost(StepInterrupted):
    """The lease was lost (expired and reclaimed, or released): the step is fenced."""


class JobCancelled(StepInterrupted):
    """The job was cancelled while the step ran."""
