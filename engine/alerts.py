"""Alerts: raised once per dead letter (a step run past its cap, or a poison message).

The default sink writes a log record at ERROR naming the job, the step and
the reason; other sinks (a pager, a chat webhook) are callables given to the
worker.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("engine.alerts")


@dataclass(frozen=True)
class Alert:
    reason: str
    job_id: uuid.UUID | None = None
    step_run_id: uuid.UUID | None = None
    flow: str | None = None
    step: str | None = None


AlertSink = Callable[[Alert], None]


def log_alert(alert: Alert) -> None:
    """The default sink: one ERROR log record."""
    log.error(
        "dead letter: job %s flow %s step %s (step run %s): %s",
        alert.job_id,
        alert.flow,
        alert.step,
        alert.step_run_id,
        alert.reason,
    )
