"""What a running step gets from the engine: annotate a parameter with ``StepContext``.

``ctx.conn`` is the step's fenced transaction: whatever the step writes through
it commits together with its checkpoint, and only if the lease token is still
current (invariant 5). A costing step's rows therefore commit if and only if
its checkpoint does. ``ctx.check()`` raises when the lease was lost or the job
cancelled; long steps call it between chunks of work. ``ctx.wait_for_signal``
and ``ctx.sleep_until`` wait durably, holding no lease (:mod:`engine.waits`);
``ctx.submit_child`` and ``ctx.wait_for_children`` run child jobs and wait for
them the same way (:mod:`engine.waits.children`). ``ctx.tag`` gives the job
searchable keys (a document number it posted), committed with the checkpoint;
``ctx.bar_approvers`` names people who may not approve the job (who prepared
what it decides on), kept the same way.
"""

from __future__ import annotations

import itertools
import re
import threading
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import psycopg
from pydantic import BaseModel

from engine import store, tracing
from engine.errors import BadInput, DefinitionError, EngineError, JobCancelled, LeaseLost
from engine.flow import register_injectable
from engine.flow.signals import declared_signals
from engine.store import jsonb
from engine.waits.approvals import BARRED_TAG
from engine.waits.children import Child, ChildrenTimeout, ChildSubmitter, wait_for_children
from engine.waits.signals import Signal, SignalTimeout, summary_json, wait_for_signal
from engine.waits.wait import sleep_until

if TYPE_CHECKING:
    from engine.flow import Flow
    from engine.jobs.submit import Submitted


_TAG_NAME = re.compile(r"[a-z][a-z0-9_.-]{0,62}")
MAX_TAG_VALUE = 200
"""Characters a tag's value may have (a document number, a store code: short keys)."""


@dataclass
class StopSignal:
    """Set by the heartbeat (lease lost), by cancellation or by shutdown."""

    event: threading.Event = field(default_factory=threading.Event)
    reason: str = ""
    cancelled: bool = False
    lease_lost: bool = False  # the heartbeat found the lease gone (a span event)

    def set(self, reason: str, *, cancelled: bool = False, lease_lost: bool = False) -> None:
        self.reason = reason
        self.cancelled = cancelled
        self.lease_lost = lease_lost
        self.event.set()

    def is_set(self) -> bool:
        return self.event.is_set()


@dataclass(frozen=True)
class StepContext:
    """The engine's side of a running step run."""

    conn: psycopg.Connection[Any]
    job_id: uuid.UUID
    step_run_id: uuid.UUID
    step: str
    fanout_key: str
    attempt: int
    max_attempts: int
    fingerprint: str
    worker: str
    stop: StopSignal = field(default_factory=StopSignal, compare=False)
    children: ChildSubmitter | None = field(default=None, compare=False)
    signals: tuple[str, ...] = ()  # the flow's declared signals: the ones it may wait for
    # the lease the step runs under: what it hands on (a child job) needs it live
    lease_token: uuid.UUID | None = field(default=None, compare=False)
    _child_index: Iterator[int] = field(default_factory=itertools.count, compare=False)
    # the deadlines of the waits this run passed, in order (None: it returned)
    _past: list[datetime | None] = field(default_factory=list, compare=False)

    @property
    def stopping(self) -> bool:
        """True once the step should stop (lease lost, job cancelled, worker shutting down)."""
        return self.stop.is_set()

    def check(self) -> None:
        """Raise :class:`LeaseLost` or :class:`JobCancelled` if the step must stop.

        Long steps call it between chunks of work: traced, each chunk's statements are
        one child span of the attempt's, which ends here (:mod:`engine.tracing`).
        """
        tracing.chunk_checked()
        if self.stop.is_set():
            if self.stop.cancelled:
                raise JobCancelled(self.stop.reason)
            raise LeaseLost(self.stop.reason)

    def bar_approvers(self, *names: str | Iterable[str]) -> int:
        """Bar ``names`` from sending this job's approval signals (segregation of duties).

        Kept as the job's tags under :data:`engine.waits.approvals.BARRED_TAG`,
        in the step's fenced transaction: committed with its checkpoint. An
        approval sent by one of them is refused like one from the submitter
        (rule ``barred``, :mod:`engine.waits.approvals`). Returns the names added.
        """
        return self.tag(BARRED_TAG, *names)

    def tag(self, name: str, *values: str | Iterable[str]) -> int:
        """Tag the job with searchable ``values`` under ``name``: ``ctx.tag("document", "SI-1")``.

        Written in the step's fenced transaction with one statement, however
        many values (each a string, or an iterable of strings): the tags commit
        with the step's checkpoint, or not at all if the step fails or loses
        its lease. A value the job carries already under ``name`` is ignored,
        so a rerun tags nothing twice. The runs search finds the job by them
        (``document`` is the runs page's document number). Returns the tags
        added. A name that is not a lower-case word, or a value that is empty
        or longer than :data:`MAX_TAG_VALUE`, is :class:`~engine.errors.BadInput`
        naming it; one holding what PostgreSQL cannot store (a NUL character, a
        surrogate) is :class:`~engine.errors.JsonRefused` naming it by number.
        """
        if not isinstance(name, str) or not _TAG_NAME.fullmatch(name):
            raise BadInput(
                f"invalid tag name {name!r}: a lower-case word of letters, digits, "
                "'_', '.' or '-' starting with a letter (e.g. 'document')"
            )
        flat: list[str] = []
        for value in values:
            flat.extend([value] if isinstance(value, str) else value)
        for number, value in enumerate(flat, 1):
            if not isinstance(value, str) or not value or len(value) > MAX_TAG_VALUE:
                raise BadInput(
                    f"invalid value {value!r} of tag {name!r}: a non-empty string of at most "
                    f"{MAX_TAG_VALUE} characters"
                )
            jsonb.checked(value, f"tag {name!r} value {number}")
        if not flat:
            return 0
        return store.tag_insert_many(self.conn, self.job_id, name, flat)

    def wait_for_signal(
        self,
        name: str,
        timeout: timedelta | None = None,
        *,
        summary: BaseModel | Mapping[str, Any] | None = None,
    ) -> Signal:
        """The job's signal ``name`` (its data, sender, time), waiting durably for it.

        If it has not come, the step stops here (nothing it wrote commits), its
        step run waits holding no lease and no attempt, and the step runs again
        from its start when the signal comes. After ``timeout`` (``None``:
        never) that rerun's call raises :class:`~engine.waits.signals.SignalTimeout`;
        the step may catch it and wait again, with a new deadline.

        ``summary`` (a pydantic model or a dict of JSON-able values) is what
        the person who sends the signal needs to decide: the park stores it
        with the wait, in its fenced transaction; the approvals inbox
        (:func:`engine.waits.inbox.awaiting_approval`) and the run report show
        it, and the report keeps it after the wake. A value JSON cannot carry
        raises :class:`~engine.errors.OutputRefused` naming its field.

        ``name`` must be one of the flow's declared signals
        (``Flow(..., signals=...)``), else :class:`~engine.errors.DefinitionError`
        naming them (the step fails at once: a retry would not declare it).
        """
        if name not in self.signals:
            raise DefinitionError(
                f"step {self.step!r} waits for signal {name!r}, which its flow does not "
                f"declare: {declared_signals(self.signals)} (declare it: Flow(..., signals=(...)))",
                steps=(self.step,),
            )
        past = tuple(self._past)
        published = summary_json(summary)  # refused before anything, wait or not
        try:
            got = wait_for_signal(
                self.conn, self.job_id, self.step_run_id, name, timeout, past, published
            )
        except SignalTimeout as exc:
            self._past.append(exc.deadline)
            raise
        self._past.append(None)
        return got

    def sleep_until(self, until: datetime) -> None:
        """Return once the database clock passed ``until``; wait durably until then.

        Like :meth:`wait_for_signal`: the step stops here and runs again from
        its start once ``until`` has passed (woken by the sweeper).
        """
        sleep_until(self.conn, until, tuple(self._past))
        self._past.append(None)

    def submit_child(
        self,
        flow: str | Flow,
        params: Mapping[str, Any] | BaseModel,
        *,
        key: str | None = None,
    ) -> Submitted:
        """Submit a child job of this step run, in the step's transaction; once per key.

        ``key`` names the child within this step run (default: its index,
        ``"0"``, ``"1"``, ... in the order of the calls). A rerun of the step
        gets the child submitted under that key before (``created=False``),
        whatever its status. Follow with :meth:`wait_for_children`.
        """
        if self.children is None:
            raise EngineError("this step context cannot submit child jobs (no worker behind it)")
        name = str(next(self._child_index)) if key is None else key
        if self.lease_token is not None and not store.lease_live(
            self.conn, self.step_run_id, self.lease_token
        ):
            # a lapsed lease holds nothing (its key's slot may be another job's
            # now), so it hands nothing on; its park would be refused anyway
            raise LeaseLost(
                f"step run {self.step_run_id} may not submit child {name!r}: its lease lapsed"
            )
        parent = store.ChildOf(self.job_id, self.step_run_id, name)
        return self.children.submit(self.conn, parent, flow, params)

    def wait_for_children(self, timeout: timedelta | None = None) -> list[Child]:
        """The outcomes of this step run's children, once every one has ended.

        Until then the step stops here and what it wrote so far (the children
        it submitted) commits with its step run parked, holding no lease, worker
        slot or attempt (it keeps its concurrency key's slot, which its children
        share); each child's end runs the step again from its start. After
        ``timeout`` (``None``: never) a rerun's call raises
        :class:`~engine.waits.children.ChildrenTimeout`. A failed child is an
        outcome like any other (``child.ok`` is false): the step decides; it may
        also catch the timeout and wait again, with a new deadline.
        """
        past = tuple(self._past)
        try:
            got = wait_for_children(self.conn, self.step_run_id, timeout, past)
        except ChildrenTimeout as exc:
            self._past.append(exc.deadline)
            raise
        self._past.append(None)
        return got


register_injectable(StepContext)
