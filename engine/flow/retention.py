"""How long a flow's finished jobs stay in the live tables: ``Flow(retention=...)``.

A declaration only (no I/O): :mod:`engine.retention` reads it. Each end
state has its own horizon, counted from the job's end; ``None`` keeps the
engine's default for that state (``ENGINE_RETENTION_DONE_DAYS``,
``..._FAILED_DAYS``, ``..._CANCELLED_DAYS``). Past it, the job's rows are
pruned and a summary and its HTML report stay (``engine prune``).

    Flow("posting", params=..., retention=Retention(done=timedelta(days=400)))
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from engine.errors import DefinitionError

__all__ = ["END_STATES", "Retention"]

END_STATES = ("done", "failed", "cancelled")
"""The end states a horizon is declared for (a job's status once it has ended)."""


@dataclass(frozen=True)
class Retention:
    """Horizons per end state: a finished job stays this long after it ended.

    ``None`` (the default for each) means the engine's default for that state.
    """

    done: timedelta | None = None
    failed: timedelta | None = None
    cancelled: timedelta | None = None

    def __post_init__(self) -> None:
        for state in END_STATES:
            value = getattr(self, state)
            if value is None:
                continue
            if not isinstance(value, timedelta) or value < timedelta(0):
                raise DefinitionError(
                    f"Retention({state}=...) must be a timedelta >= 0 or None "
                    f"(the engine's default), got {value!r}; e.g. timedelta(days=400)"
                )

    def horizon(self, state: str) -> timedelta | None:
        """The declared horizon of ``state`` (``done``, ``failed``, ``cancelled``), or ``None``."""
        if state not in END_STATES:
            raise ValueError(f"{state!r} is not an end state; valid: {', '.join(END_STATES)}")
        value: timedelta | None = getattr(self, state)
        return value
