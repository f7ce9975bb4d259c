"""Settings, read from ``ENGINE_*`` environment variables (pydantic-settings).

Secrets (the database password) come only from the environment and are kept
in :class:`pydantic.SecretStr`; anything printed goes through
:func:`engine.infra.secrets.mask_url`. When ``ENGINE_DATABASE_URL`` is unset
the engine starts (or reuses) an embedded PostgreSQL in ``ENGINE_PGDATA`` (see
:mod:`engine.store.db`). The folders shipped beside the code (``migrations/``,
``reports/``) are found by :mod:`engine.infra.resources`. A setting refused at
start-up is explained by :func:`engine.infra.bad_settings.bad_setting_message`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from engine.infra.resources import SOURCE_ROOT, shipped_dir
from engine.infra.secrets import mask_url

__all__ = ["Settings"]

# a role name that needs no quoting in libpq options (-c role=NAME), or empty
_ROLE_NAME = r"^([A-Za-z_][A-Za-z0-9_]{0,62})?$"


class Settings(BaseSettings):
    """Every setting of the engine; each is read from ``ENGINE_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="ENGINE_", extra="ignore")

    database_url: SecretStr | None = Field(
        default=None,
        description="PostgreSQL URL; unset means an embedded server in ENGINE_PGDATA",
    )
    pgdata: Path = Field(
        default=Path(".pgdata"),
        description="data folder of the embedded PostgreSQL (used when DATABASE_URL is unset)",
    )
    embedded_database: str = Field(
        default="engine", description="database created inside the embedded server"
    )
    migration_dirs: Annotated[list[Path], NoDecode] = Field(
        default=[shipped_dir("migrations"), SOURCE_ROOT / "flows" / "migrations"],
        description=(
            "folders of numbered .sql migrations, applied as one sequence "
            "(the engine's, then the flows' own tables)"
        ),
    )
    reports_dir: Path = Field(
        default=Path("reports/out"),
        description="where run reports (and files beside them, e.g. rejected rows) are written",
    )
    report_on_end: bool = Field(
        default=True, description="render a job's HTML report (and the index) when it ends"
    )
    flow_modules: Annotated[list[str] | None, NoDecode] = Field(
        default=None,
        description="modules that export a `flow`; unset means every module of the flows package",
    )
    max_attempts: int = Field(default=5, ge=1, le=100, description="default attempts per step")
    retry_base_delay_s: float = Field(
        default=2.0, ge=0, description="first retry delay; doubles per attempt, with jitter"
    )
    retry_max_delay_s: float = Field(
        default=900.0, ge=0, description="cap of one retry delay (SQS delays at most 900 s)"
    )
    transport: Literal["postgres", "sqs"] = Field(
        default="postgres", description="how ready step runs reach workers"
    )
    worker_id: str | None = Field(
        default=None, description="name of this worker in leases and events; default host:pid"
    )
    worker_role: str = Field(
        default="engine_worker",
        pattern=_ROLE_NAME,
        description=(
            "role `engine worker` takes on every connection (libpq -c role=); migration 0006 "
            "creates engine_worker with only the privileges a worker needs; empty: the login's "
            "own role (a worker whose URL logs in as that role needs nothing more)"
        ),
    )
    session_role: str = Field(
        default="",
        pattern=_ROLE_NAME,
        description=(
            "role this process takes on every connection it opens; `engine worker` sets it "
            "to worker_role, admin commands (migrate, seed, cancel) leave it empty"
        ),
    )
    concurrency: int = Field(default=1, ge=1, le=64, description="step runs at once per worker")
    eager_successors: bool = Field(
        default=True,
        description=(
            "a slot that finishes a step claims one of the step runs it made ready in the same "
            "commit and runs it next, without a queue round trip; the others are published"
        ),
    )
    claim_batch: int = Field(
        default=10,
        ge=1,
        le=10,
        description=(
            "deliveries an executor slot receives and claims at once (one statement); "
            "1: one at a time"
        ),
    )
    group_commit_ms: float = Field(
        default=50.0,
        ge=0,
        le=5000,
        description=(
            "quick step runs a slot holds together (a claimed batch, their eager successors) "
            "share one COMMIT, each in its own savepoint; a step whose worst recent run on this "
            "worker is longer, or that would keep the group open longer, or that holds a "
            "concurrency key, commits alone; 0: one commit per step"
        ),
    )
    lease_s: float = Field(default=60.0, gt=0, description="lease duration of a claimed step run")
    heartbeat_s: float = Field(
        default=15.0, gt=0, description="lease renewal interval; must be < lease and visibility"
    )
    visibility_s: float = Field(
        default=120.0, gt=0, description="queue visibility timeout of a received message"
    )
    poll_wait_s: float = Field(default=5.0, ge=0, le=20, description="long-poll wait of a receive")
    sweep_interval_s: float = Field(
        default=5.0,
        gt=0,
        description=(
            "how often each worker's sweeper looks for lost work, and its schedule firer "
            "for due schedules"
        ),
    )
    sweep_scan: int = Field(
        default=10_000,
        ge=1,
        description=(
            "pending and running step runs (of each) a sweep checks for a lost announcement "
            "or an ended job; a deeper queue is checked over several sweeps, each going on "
            "where the last stopped"
        ),
    )
    republish_after_s: float = Field(
        default=300.0,
        gt=0,
        description="a claimable step run not announced for this long is announced again",
    )
    refusal_delay_s: float = Field(
        default=10.0,
        gt=0,
        le=900,
        description=(
            "a step run whose flow or flow version this worker does not run (a rolling "
            "deploy) is not claimed; its message comes back after this long"
        ),
    )
    worker_live_s: float = Field(
        default=60.0,
        gt=0,
        description=(
            "a worker counts as live while the database saw its beat (every quarter of this, "
            "or every SWEEP_INTERVAL_S if shorter) within this long"
        ),
    )
    version_orphan_alert_s: float = Field(
        default=600.0,
        ge=0,
        description=(
            "one alert when a flow version that active jobs need has been loaded by no live "
            "worker for this long (a rolling deploy that left it behind)"
        ),
    )
    schedule_unloaded_alert_s: float = Field(
        default=600.0,
        ge=0,
        description=(
            "one alert per scheduled time when a schedule has been due this long and no live "
            "worker has loaded its flow for this long"
        ),
    )
    over_limit_delay_s: float = Field(
        default=30.0,
        gt=0,
        le=900,
        description=(
            "a step run over its concurrency limit is not claimed (no attempt); its message "
            "comes back after this long, a backstop: a holder of its key that finishes "
            "announces the next waiting step run at once"
        ),
    )
    outage_backoff_max_s: float = Field(
        default=30.0,
        gt=0,
        description="longest wait between two probes while PostgreSQL is unreachable",
    )
    shutdown_grace_s: float = Field(
        default=20.0, ge=0, description="on SIGTERM, how long running steps may finish"
    )
    statement_timeout_s: float = Field(
        default=300.0,
        gt=0,
        description="bound on one SQL statement of any engine connection (migrations excepted)",
    )
    lock_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description=(
            "bound on waiting for a lock on any engine connection; a claim, park or commit "
            "that waits longer is not done and goes again, at no attempt"
        ),
    )
    checkpoint_retries: int = Field(
        default=3,
        ge=0,
        le=20,
        description=(
            "a finished step whose checkpoint loses a lock wait (lock_timeout, a deadlock, a "
            "pooler's lost prepared statement) keeps its output and tries the checkpoint again "
            "this many times, backing off from 0.1 s, while its lease holds; then it is released"
        ),
    )
    free_releases_max: int = Field(
        default=5,
        ge=0,
        le=100,
        description=(
            "a step run released at no charge after its body ran (its checkpoint lost a lock "
            "wait, its group was rolled back) runs again for free at most this many times "
            "since it last parked; the next release charges an attempt, with an alert saying why"
        ),
    )
    allow_self_approval: bool = Field(
        default=False,
        description=(
            "a one-person shop: let the submitter of a job (or of its parent) send its "
            "approval signals; each such approval is audited (self_approval), the CLI warns "
            "and the console shows a banner on every page; a reason stays required"
        ),
    )
    admin_lock_timeout_s: float = Field(
        default=5.0,
        gt=0,
        description=(
            "bound on an operator command's wait for a lock (cancel, retry, signal, dlq): "
            "past it the command changes nothing and says busy, try again"
        ),
    )
    tcp_keepalives_idle_s: int = Field(
        default=30, ge=1, description="idle seconds before TCP keepalive probes (both ends)"
    )
    tcp_keepalives_interval_s: int = Field(
        default=10, ge=1, description="seconds between two unanswered TCP keepalive probes"
    )
    tcp_keepalives_count: int = Field(
        default=3, ge=1, description="unanswered TCP keepalive probes before the socket is dead"
    )
    tcp_user_timeout_s: float = Field(
        default=60.0,
        gt=0,
        description=(
            "unacknowledged data on a socket this long means it is dead (both ends): a "
            "heartbeat or a command never blocks forever on a silent partition"
        ),
    )
    idle_in_transaction_timeout_s: float = Field(
        default=120.0,
        gt=0,
        description=(
            "a step transaction idle this long (a paused or partitioned worker) is ended by "
            "the server, releasing its locks; steps must not compute longer between statements"
        ),
    )
    connect_timeout_s: int = Field(default=10, ge=1, description="database connect timeout")
    # poolers (issue 27): PgBouncer in transaction pooling mode, RDS Proxy
    pooler: Literal["auto", "none", "transaction"] = Field(
        default="auto",
        description=(
            "what sits between the engine and PostgreSQL: `none` (a direct connection), "
            "`transaction` (PgBouncer in transaction pooling mode, RDS Proxy: no startup options, "
            "no prepared statements, no LISTEN), or `auto`: detected at the first connection "
            "(see engine/store/pooler.py for how, and its limits)"
        ),
    )
    prepared_statements: Literal["auto", "on", "off"] = Field(
        default="auto",
        description=(
            "the checkpoint's statements are prepared once per connection (PREPARE/EXECUTE); "
            "`auto`: only on a direct connection (a transaction pooler does not track them); "
            "`off` is always safe; a missing one costs no attempt, whatever this says"
        ),
    )
    pooled_poll_s: float = Field(
        default=0.5,
        gt=0,
        le=20,
        description=(
            "behind a transaction pooler LISTEN hears nothing: an idle receiver (and the "
            "outbox relay) looks at the queue this often instead of waiting for a NOTIFY"
        ),
    )
    # operations (issue 13): logs, metrics, alerts, where reports go
    log_format: Literal["text", "json"] = Field(
        default="text",
        description="log lines: readable text, or one JSON object per line (job, flow, step...)",
    )
    metrics_port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        description=(
            "`engine worker` serves Prometheus metrics on this port (0: a free one, logged; "
            "unset: none)"
        ),
    )
    metrics_host: str = Field(
        default="127.0.0.1",
        min_length=1,
        description=(
            "address the metrics port listens on; 0.0.0.0 in a container (ECS) so that the "
            "scraper reaches it"
        ),
    )
    alert_sinks: Annotated[list[Literal["log", "sns", "webhook"]], NoDecode] = Field(
        default=["log"],
        description="where dead-letter alerts go, comma-separated: log, sns, webhook",
    )
    alert_sns_topic_arn: str | None = Field(
        default=None, description="SNS topic of the `sns` alert sink"
    )
    alert_webhook_url: SecretStr | None = Field(
        default=None,
        description="URL the `webhook` alert sink POSTs to (Slack-compatible); kept secret",
    )
    alert_max_attempts: int = Field(
        default=10,
        ge=1,
        le=100,
        description="sends of one alert to one sink before its delivery is abandoned",
    )
    alert_retry_base_delay_s: float = Field(
        default=5.0, ge=0, description="first delay after a failed alert send (then doubling)"
    )
    alert_retry_max_delay_s: float = Field(
        default=600.0, ge=0, description="cap of the delay between sends of one alert"
    )
    alert_poll_s: float = Field(
        default=5.0,
        gt=0,
        description="the alert dispatcher looks for due deliveries this often (and when woken)",
    )
    alert_send_timeout_s: float = Field(
        default=10.0, gt=0, le=300, description="bound on one send to a webhook or SNS"
    )
    alert_claim_s: float = Field(
        default=120.0,
        gt=0,
        description=(
            "a dispatcher holds a delivery this long while sending; must exceed "
            "ALERT_SEND_TIMEOUT_S (a lapsed claim is sent again by another worker)"
        ),
    )
    # retention (issue 38): finished jobs leave the live tables, a summary and report stay
    retention_done_days: float = Field(
        default=14.0,
        ge=0,
        description=(
            "a job that ended done is pruned this long after it ended, unless its flow "
            "declares its own (Flow(retention=...)) or it is pinned (`engine pin`)"
        ),
    )
    retention_failed_days: float = Field(
        default=400.0, ge=0, description="the same for a job that ended failed"
    )
    retention_cancelled_days: float = Field(
        default=90.0, ge=0, description="the same for a job that ended cancelled"
    )
    prune_interval_s: float = Field(
        default=3600.0,
        ge=0,
        description=(
            "each worker's pruner thread retires finished jobs past their retention this often "
            "(the first time one interval after it starts); 0: never (`engine prune` only)"
        ),
    )
    prune_batch: int = Field(
        default=100,
        ge=1,
        le=10_000,
        description=(
            "jobs retired per transaction by a prune: each batch locks only its own rows, "
            "briefly, skipping any another session holds"
        ),
    )
    prune_batch_s: float = Field(
        default=0.25,
        gt=0,
        description=(
            "a retirement transaction aims to last at most this long (its locks held no "
            "longer): the next batch is sized from the last one's time, down to one job"
        ),
    )
    prune_rest: float = Field(
        default=1.0,
        ge=0,
        description=(
            "between two retirement transactions a prune rests this many times as long as "
            "the last one took, leaving the database to the claims (0: back to back)"
        ),
    )
    prune_vacuum_delay_ms: float = Field(
        default=2.0,
        ge=0,
        le=100,
        description=(
            "the VACUUM that closes a prune's walk pauses this long each time it has done its "
            "share of work (vacuum_cost_delay, autovacuum's pace), leaving the disk and the CPU "
            "to the claims; 0: at full speed"
        ),
    )
    reports_url: str | None = Field(
        default=None,
        pattern=r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$",
        description="s3://bucket/prefix: reports and the index go to S3 instead of REPORTS_DIR",
    )

    @field_validator("migration_dirs", "flow_modules", "alert_sinks", mode="before")
    @classmethod
    def _split_list(cls, value: object) -> object:
        # ENGINE_FLOW_MODULES=flows.costing,flows.posting reads naturally; a
        # JSON list ('["a", "b"]') is read as one too.
        if isinstance(value, str):
            if value.lstrip().startswith("["):
                return json.loads(value)
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    def masked_database_url(self) -> str:
        """The database URL for messages: password replaced by ``***``."""
        if self.database_url is None:
            return f"embedded PostgreSQL in {self.pgdata}"
        return mask_url(self.database_url.get_secret_value())
