"""The horizons in effect: each flow's declaration, else the engine's defaults.

A job of a flow this process does not load (an old flow, removed) is kept
by the defaults: what it keeps is never decided by a declaration it cannot see.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta

from engine.config import Settings
from engine.flow import Flow
from engine.flow.retention import END_STATES

__all__ = ["RetentionPolicy"]

_DAY_S = 86_400.0


@dataclass(frozen=True)
class RetentionPolicy:
    """Horizons in seconds: ``defaults`` per end state, and each flow's own (``None``: default)."""

    defaults: dict[str, float]
    flows: dict[str, dict[str, float | None]] = field(default_factory=dict)

    @classmethod
    def of(cls, settings: Settings, flows: Iterable[Flow] = ()) -> RetentionPolicy:
        """The engine's defaults from ``settings``, and what each of ``flows`` declares."""
        defaults = {
            "done": settings.retention_done_days * _DAY_S,
            "failed": settings.retention_failed_days * _DAY_S,
            "cancelled": settings.retention_cancelled_days * _DAY_S,
        }
        own: dict[str, dict[str, float | None]] = {}
        for flow in flows:
            declared = {s: _seconds(flow.retention.horizon(s)) for s in END_STATES}
            if any(v is not None for v in declared.values()):
                own[flow.name] = declared
        return cls(defaults, own)

    def horizon(self, flow: str, state: str) -> timedelta:
        """How long a job of ``flow`` that ended ``state`` stays."""
        declared = self.flows.get(flow, {}).get(state)
        return timedelta(seconds=self.defaults[state] if declared is None else declared)

    def as_json(self) -> dict[str, object]:
        """The policy in days, for ``engine prune --json``."""
        return {
            "defaults_days": {s: v / _DAY_S for s, v in self.defaults.items()},
            "flows_days": {
                f: {s: None if v is None else v / _DAY_S for s, v in h.items()}
                for f, h in sorted(self.flows.items())
            },
        }


def _seconds(value: timedelta | None) -> float | None:
    return None if value is None else value.total_seconds()
