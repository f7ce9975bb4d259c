"""The chaos run's size and timings, from ``CHAOS_*`` variables (or ``python -m`` flags).

The workers run with short leases so that recovery is quick, and the
recovery bound is computed from those same settings (:meth:`ChaosConfig.bound`).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from typing import Any

TRANSPORTS = ("postgres", "sqs")

FAULT_KINDS = (
    "kill",  # SIGKILL a worker mid-step, start a replacement
    "pause",  # SIGSTOP a worker mid-step past its lease, then SIGCONT
    "term",  # SIGTERM a worker mid-step, start a replacement
    "terminate",  # pg_terminate_backend of one worker's sessions
    "outage",  # ALLOW_CONNECTIONS false + every session terminated, for seconds
    "duplicate",  # extra copies of step messages, and duplicate submits
    "sqs_errors",  # botocore hooks answer SQS calls with errors for a window (SQS only)
    "rollback",  # submits inside a psycopg transaction that rolls back
    "deploy",  # a worker whose ENGINE_FLOW_MODULES lacks a flow, beside full ones
    "point_kill",  # a worker killed at a named fault point (engine/infra/faults.py)
    "submit_kill",  # an `engine submit` killed after its commit, or after publishing
    "term_last",  # SIGTERM during the last attempt a step run is allowed
    "schedule",  # a worker killed at a schedule's fault point while it fires; each time fires once
    "partition",  # a worker behind a fault proxy: silent blackhole, latency or resets (proxy.py)
)
# what the partition fault switches a worker's proxy to; "blackhole" with the proxy
# standing in for the worker's TCP bounds, "silent" with no bound able to see it
PARTITION_MODES = ("blackhole", "silent", "latency", "reset")
SQS_ONLY = frozenset({"sqs_errors"})

FLOW_MODULES = (
    "flows.costing",
    "flows.posting",
    "tests.chaos.chaosflow",
    "tests.chaos.keyflows",
)
PGBOUNCER_LOGIN_RETRY_S = 15.0
PERIOD = "2026-11"
NEXT_PERIOD = "2026-12"


def _env(name: str, default: Any) -> Any:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    if isinstance(default, bool):
        return raw.strip().lower() in ("1", "true", "yes", "on")
    if isinstance(default, tuple):
        return tuple(p.strip() for p in raw.split(",") if p.strip())
    return type(default)(raw)


@dataclass(frozen=True)
class ChaosConfig:
    """Every knob of a chaos run; ``CHAOS_<NAME>`` sets each from the environment."""

    transports: tuple[str, ...] = TRANSPORTS
    seed: int = 1
    scenarios: int = 1  # seeds per transport: seed, seed + 1, ...
    rounds: int = 12  # one fault each; the kinds come round in a seeded order
    faults: tuple[str, ...] = FAULT_KINDS
    workers: int = 3
    concurrency: int = 2
    jobs_per_round: int = 2
    # the ERP data (engine seed), small
    stores: int = 4
    items: int = 30
    chunk_size: int = 100
    # worker settings (ENGINE_*)
    lease_s: float = 2.0
    heartbeat_s: float = 0.5
    visibility_s: int = 4
    sweep_interval_s: float = 0.5
    poll_wait_s: float = 0.5
    republish_after_s: float = 3.0
    retry_base_delay_s: float = 0.2
    retry_max_delay_s: float = 1.0
    max_attempts: int = 6
    shutdown_grace_s: float = 1.0
    idle_in_transaction_s: float = 3.0
    lock_timeout_s: float = 5.0
    sqs_api_max_attempts: int = 3
    connect_timeout_s: int = 2
    # TCP bounds of every engine connection (engine.store.db.conninfo): short, so that a
    # partitioned worker notices within seconds
    tcp_user_timeout_s: float = 3.0
    tcp_keepalives_idle_s: int = 1
    tcp_keepalives_interval_s: int = 1
    tcp_keepalives_count: int = 2
    # faults
    step_min_ms: int = 150
    step_max_ms: int = 600
    slow_commit: float = 0.25  # share of commits paused at before_commit (widens ERP steps)
    slow_commit_s: float = 0.4
    outage_min_s: float = 2.0
    outage_max_s: float = 5.0
    sqs_error_rate: float = 0.2
    partition_modes: tuple[str, ...] = PARTITION_MODES
    latency_min_ms: int = 200
    latency_max_ms: int = 1500
    # the pooler scenario: one more scenario per listed transport (seed ``seed``), every
    # worker and engine command through PgBouncer in transaction pooling ("none": none)
    pooler: tuple[str, ...] = ("postgres",)
    pooler_size: int = 10  # server sessions: fewer than the fleet's transactions queues them
    margin_s: float = 3.0
    drain_s: float = 180.0  # hard cap on waiting for the jobs after the faults stop
    keep_db: bool = False
    verbose: bool = False
    extra: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, **overrides: Any) -> ChaosConfig:
        values = {
            name: _env(f"CHAOS_{name.upper()}", default)
            for name, default in cls().__dict__.items()
            if name != "extra"
        }
        config = cls(**values)
        return replace(config, **{k: v for k, v in overrides.items() if v is not None})

    def check(self) -> None:
        unknown = sorted(set(self.faults) - set(FAULT_KINDS))
        if unknown:
            raise ValueError(f"CHAOS_FAULTS: unknown {unknown}; valid: {', '.join(FAULT_KINDS)}")
        bad = sorted(set(self.transports) - set(TRANSPORTS))
        if bad:
            raise ValueError(f"CHAOS_TRANSPORTS: unknown {bad}; valid: {', '.join(TRANSPORTS)}")
        modes = sorted(set(self.partition_modes) - set(PARTITION_MODES))
        if modes:
            raise ValueError(
                f"CHAOS_PARTITION_MODES: unknown {modes}; valid: {', '.join(PARTITION_MODES)}"
            )
        pooled = sorted(set(self.pooler) - set(TRANSPORTS) - {"none"})
        if pooled:
            raise ValueError(f"CHAOS_POOLER: unknown {pooled}; valid: {', '.join(TRANSPORTS)}")
        if self.rounds < 1 or self.scenarios < 1 or self.workers < 1:
            raise ValueError("CHAOS_ROUNDS, CHAOS_SCENARIOS and CHAOS_WORKERS must be >= 1")

    def pooled(self) -> tuple[str, ...]:
        """The transports that get a pooler scenario (among those the run covers)."""
        return tuple(t for t in self.pooler if t in self.transports)

    def kinds(self, transport: str) -> tuple[str, ...]:
        return tuple(k for k in self.faults if transport == "sqs" or k not in SQS_ONLY)

    def worker_env(self) -> dict[str, str]:
        """The ENGINE_* settings of every chaos worker (heartbeat < lease and < visibility)."""
        return {
            "ENGINE_LEASE_S": str(self.lease_s),
            "ENGINE_HEARTBEAT_S": str(self.heartbeat_s),
            "ENGINE_VISIBILITY_S": str(self.visibility_s),
            "ENGINE_SWEEP_INTERVAL_S": str(self.sweep_interval_s),
            "ENGINE_POLL_WAIT_S": str(self.poll_wait_s),
            "ENGINE_REPUBLISH_AFTER_S": str(self.republish_after_s),
            "ENGINE_RETRY_BASE_DELAY_S": str(self.retry_base_delay_s),
            "ENGINE_RETRY_MAX_DELAY_S": str(self.retry_max_delay_s),
            "ENGINE_MAX_ATTEMPTS": str(self.max_attempts),
            "ENGINE_SHUTDOWN_GRACE_S": str(self.shutdown_grace_s),
            "ENGINE_IDLE_IN_TRANSACTION_TIMEOUT_S": str(self.idle_in_transaction_s),
            "ENGINE_LOCK_TIMEOUT_S": str(self.lock_timeout_s),
            "ENGINE_STATEMENT_TIMEOUT_S": "30",
            "ENGINE_CONNECT_TIMEOUT_S": str(self.connect_timeout_s),
            "ENGINE_TCP_USER_TIMEOUT_S": str(self.tcp_user_timeout_s),
            "ENGINE_TCP_KEEPALIVES_IDLE_S": str(self.tcp_keepalives_idle_s),
            "ENGINE_TCP_KEEPALIVES_INTERVAL_S": str(self.tcp_keepalives_interval_s),
            "ENGINE_TCP_KEEPALIVES_COUNT": str(self.tcp_keepalives_count),
            "ENGINE_REPORT_ON_END": "false",
            "ENGINE_SQS_API_MAX_ATTEMPTS": str(self.sqs_api_max_attempts),
            "ERP_POSTING_CHUNK_SIZE": str(self.chunk_size),
            **self.extra,
        }

    def bound(self, transport: str, pooled: bool = False) -> dict[str, float]:
        """The recovery bound, term by term; ``bound_s`` is their sum.

        From the moment a fault takes work away (a kill, a stop, a SIGTERM, a
        session killed, the end of an outage), a step run it held must be
        finished by another attempt within:

        - ``lease``: its lease lapses (or, after SIGTERM, the grace period ends
          and it is released, whichever is longer);
        - ``sweep``: a sweeper sees the expired lease and announces it;
        - ``receive``: a worker receives that message (a long poll; SQS counts
          whole seconds, at least one);
        - ``zombie_locks``: a stopped worker's open transaction holds its row
          locks until the server ends it (idle-in-transaction timeout);
        - ``step``: the next attempt runs the step (its longest time, plus a
          paused commit);
        - ``backoff``: the attempt that failed because of the fault waits its
          retry delay (capped);
        - ``sqs_retries``: botocore's backoff on injected SQS errors
          (throttling backs off 1 s, then 2 s, ... for each retry allowed);
        - ``margin``: process scheduling on a loaded machine;
        - ``pooler_login_retry`` (the pooler scenario): PgBouncer's wait before it
          logs in to the server again after a failed login (an outage).
        """
        receive = self.poll_wait_s
        sqs_retries = 0.0
        if transport == "sqs":
            receive = float(max(1, math.ceil(self.poll_wait_s)))
            if "sqs_errors" in self.faults:
                sqs_retries = float(sum(2**i for i in range(self.sqs_api_max_attempts - 1)))
        terms = {
            "lease": max(self.lease_s, self.shutdown_grace_s),
            "sweep": self.sweep_interval_s,
            "receive": receive,
            "zombie_locks": self.idle_in_transaction_s,
            "step": self.step_max_ms / 1000 + self.slow_commit_s,
            "backoff": self.retry_max_delay_s,
            "sqs_retries": sqs_retries,
            "margin": self.margin_s,
        }
        if pooled:
            # PgBouncer retries a failed server login only every server_login_retry
            # (15 s, its default: tests/support/pooler.py leaves it): after an outage
            # its pool comes back that late
            terms["pooler_login_retry"] = PGBOUNCER_LOGIN_RETRY_S
        return terms

    def bound_s(self, transport: str, pooled: bool = False) -> float:
        return round(sum(self.bound(transport, pooled).values()), 3)

    def keepalive_bound_s(self) -> float:
        """How long an idle connection on a dead path lives, from its settings.

        Keepalives start after ``idle`` seconds; the connection is aborted after
        ``count`` unanswered probes ``interval`` apart, or once ``tcp_user_timeout``
        passed without an answer, whichever is first (Linux). A connection with a
        statement in flight is aborted by ``tcp_user_timeout`` alone.
        ``statement_timeout`` is the server's: behind a partition it never hears
        the statement, so it bounds nothing here.
        """
        probes = self.tcp_keepalives_interval_s * self.tcp_keepalives_count
        return self.tcp_keepalives_idle_s + min(probes, self.tcp_user_timeout_s)

    def notice_bound(self) -> dict[str, float]:
        """A partitioned worker notices (gives a connection up) within these terms' sum.

        - ``send``: its next statement on that path (a heartbeat renews every
          ``heartbeat_s``, an idle worker polls every ``poll_wait_s``);
        - ``tcp``: the statement's socket is declared dead (``tcp_user_timeout``: a
          statement in flight is unacknowledged data; :meth:`keepalive_bound_s` is
          the idle connections' bound, which the proxy also stands in for);
        - ``margin``: process scheduling on a loaded machine.
        """
        return {
            "send": max(self.heartbeat_s, self.poll_wait_s),
            "tcp": self.tcp_user_timeout_s,
            "margin": self.margin_s,
        }

    def notice_bound_s(self) -> float:
        return round(sum(self.notice_bound().values()), 3)
