"""Retention: finished jobs leave the live tables, and their evidence stays.

A job that ended (done, failed, cancelled) stays in the live tables for its
flow's horizon for that end state (:class:`engine.Retention`, declared with
the flow; the engine's defaults in ``Settings.retention_*_days``), or until
the date it is pinned to (``engine pin``). Then :mod:`.prune` retires it:
its HTML report is stored where reports go (S3 in production), and in one
short transaction per batch a summary row is written and its step runs,
events, tags, outbox rows, dead letters and signals are deleted (by primary
key, the job rows taken ``FOR UPDATE SKIP LOCKED``: nothing waits on a prune,
and a prune waits on nothing). An active job is never touched; a child job
goes with its top-level job, when the whole family has ended.

- :mod:`.policy`: the horizons per flow and end state, in effect now;
- :mod:`.prune`: what would go (``--dry-run``, exact counts), and retiring it;
- :mod:`.pin`: keep a job until a date, audited;
- :mod:`.pruned`: a pruned job as ``engine status`` and ``engine report`` show it.

The sweeper prunes every ``Settings.prune_interval_s`` (0: never).
"""

from engine.retention.pin import Pinned, pin_job
from engine.retention.policy import RetentionPolicy
from engine.retention.prune import PruneCounts, PruneReport, prune
from engine.retention.pruned import PrunedJob, pruned_job

__all__ = [
    "Pinned",
    "PruneCounts",
    "PruneReport",
    "PrunedJob",
    "RetentionPolicy",
    "pin_job",
    "prune",
    "pruned_job",
]
