"""What the runner's seams hold when tracing is off: values that do nothing, import nothing.

An :class:`AttemptTrace` is one attempt's span as the runner sees it: made
when the attempt is (:meth:`Traces.attempt`), current while its step runs
(:meth:`AttemptTrace.current`), told each event the attempt records and how
it ended. Off, every call is an empty method of one shared object.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.store.rows import Claimed

__all__ = ["NO_TRACE", "NO_TRACES", "AttemptTrace", "Traces"]


class AttemptTrace:
    """One attempt's span; this base does nothing (tracing off)."""

    def current(self) -> AbstractContextManager[None]:
        """The span begun (the first time) and current in this thread while in the block."""
        return _NOTHING

    def body(self) -> AbstractContextManager[None]:
        """The step's own call: its statements fold into one child span per chunk."""
        return _NOTHING

    def event(self, name: str, detail: Mapping[str, Any]) -> None:
        """An event the attempt recorded (``detail`` as the event row's)."""

    def ended(self, kind: str, detail: str = "", *, lease_lost: str = "") -> None:
        """The attempt's outcome (:class:`~engine.runner.outcome.Outcome`'s kind, its detail):
        the span ends; ``lease_lost``: why the heartbeat lost its lease, if it did."""


class Traces:
    """Makes each attempt's trace for a slot; this base makes the no-op one."""

    def attempt(self, claimed: Claimed, worker: str) -> AttemptTrace:
        return NO_TRACE


# one shared, reusable block that does nothing: off, an attempt allocates nothing for it
_NOTHING: AbstractContextManager[None] = nullcontext()
NO_TRACE = AttemptTrace()
NO_TRACES = Traces()
