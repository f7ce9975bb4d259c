"""The store: the one place that runs SQL against the engine's tables.

Queries live in ``sql/*.sql`` as named blocks, each with the invariant it
keeps (see :mod:`engine.store.queries`). Guarded writes are named
``<entity>_<verb>_if_<guard>``: zero rows is a normal outcome that the calling
function turns into a typed result, never a silent ``None``. Driver errors are
wrapped into :class:`engine.errors.StoreError` here, keeping ``__cause__``.
Every function takes the psycopg connection whose transaction it joins; the
caller decides when that transaction commits.

One module and one ``sql/<name>.sql`` per table or concept, holding every
statement that writes it, whoever calls it:

- ``step_runs``: insert, claim, lease, checkpoint, retry, dead, cancel;
- ``jobs``: submit once per fingerprint, finish, cancel, reopen;
- ``outbox``: announcements, their relay, the sweeper's re-announcements;
- ``dead_letters``: step runs past their cap and unusable messages;
- ``alerts``: one alert per dead letter and its deliveries, one per sink;
- ``schedules``: calendars of jobs and each scheduled time they fired;
- ``signals``: one signal per job and name, and what a waiting step finds;
- ``events``: the append-only history;
- ``server``: the server itself (ping, the embedded database);
- ``migrations``: the numbered schema files;
- ``workers``: each worker's row (started, last seen, the flow versions it
  runs) and the versions in flight.

``rows`` holds the types they return, ``errors`` the driver-error wrapping,
``queries`` the ``.sql`` loader, ``batch`` the one-message sending of
statements that need no answer yet (what commits with a checkpoint);
``models`` and ``read`` are the typed, read-only side for the CLI and reports
(SQLModel).

Callers use this package as one namespace (``from engine import store``,
then ``store.lease_extend_if_owner(...)``): the query names already say which
table they touch, so where a statement lives can change without its callers.
"""

from engine.store.alerts import (
    alert_delivery_claim_due_many,
    alert_delivery_mark_delivered_if_claimed,
    alert_delivery_mark_failed_if_claimed,
    alert_delivery_reset_abandoned,
    alert_delivery_select_by_alert,
    alert_exists,
    alert_insert_for_dead_letter,
    alert_insert_for_orphaned_versions,
    alert_select_recent,
)
from engine.store.batch import Batch, Executes, Reply
from engine.store.dead_letters import (
    Delivery,
    dead_letter_count_open,
    dead_letter_delete_closed,
    dead_letter_insert_message_if_new,
    dead_letter_insert_message_logged,
    dead_letter_insert_step,
    dead_letter_mark_replayed_by_job,
    dead_letter_mark_replayed_if_open,
    dead_letter_select_one,
    dead_letter_select_open,
)
from engine.store.events import (
    event_count_by_step,
    event_insert,
    step_event_insert,
)
from engine.store.jobs import (
    job_cancel_descendants,
    job_cancel_if_active,
    job_cancel_if_leased,
    job_finish_if_active,
    job_finish_if_active_logged,
    job_insert_if_absent,
    job_lock_children,
    job_lock_if_active,
    job_progress,
    job_reopen_if_ended,
    job_select_active_by_fingerprint,
    job_select_active_matching,
    job_select_child,
    job_select_children,
    job_select_info,
    job_select_status,
)
from engine.store.outbox import (
    outbox_insert_after,
    outbox_insert_delayed,
    outbox_insert_for_claimable,
    outbox_insert_for_freed_keys,
    outbox_insert_many,
    outbox_listen,
    outbox_lock_unpublished_many,
    outbox_mark_published_many,
    outbox_notify,
    outbox_wait_notified,
    sweep_lock_try,
)
from engine.store.rows import (
    CancelledRun,
    Checkpoint,
    Checkpointed,
    ChildOf,
    ChildRow,
    Claimed,
    ClaimedDelivery,
    ClaimRefused,
    ExpiredExhausted,
    FingerprintTaken,
    JobRow,
    NewStepRun,
    Parked,
    PendingOutbox,
    QueuedClaim,
    SignalRow,
    StepCounts,
    StepState,
    WaitState,
)
from engine.store.schedules import (
    DueSchedule,
    SlotTaken,
    schedule_claim_if_due,
    schedule_delete_by_name,
    schedule_fire_insert_if_new,
    schedule_fire_select_by_schedule,
    schedule_fire_set_outcome,
    schedule_insert_if_absent,
    schedule_record_fired,
    schedule_select_all,
    schedule_select_db_now,
    schedule_select_due_many,
    schedule_select_names,
)
from engine.store.server import (
    clock_select,
    database_create_if_absent,
    server_ping,
)
from engine.store.signals import (
    signal_insert_if_absent,
    signal_select,
    signal_select_by_job,
    signal_select_for_wait,
)
from engine.store.step_runs import (
    checkpoint_put_if_leased,
    checkpoint_put_many_if_leased,
    lease_extend_if_owner,
    lease_release_if_owner,
    step_cancel_by_job,
    step_cancel_if_job_ended_many,
    step_claim_if_available,
    step_claim_many_if_available,
    step_count_by_status,
    step_counts_by_job,
    step_dead_if_expired_exhausted_many,
    step_dead_if_leased,
    step_outputs_select,
    step_reopen_by_job,
    step_retry_if_leased,
    step_run_insert_claimed,
    step_run_insert_many_announced,
    step_run_insert_many_with_outbox,
    step_savepoint_rollback,
    step_select_children_timed_out,
    step_select_queue_lag,
    step_select_status,
    step_wait_children_if_leased,
    step_wait_if_leased,
    step_wake_by_signal,
    step_wake_if_due_many,
    step_wake_parent,
)
from engine.store.workers import (
    LiveWorker,
    VersionInFlight,
    version_select_in_flight,
    worker_select_live,
    worker_stop_if_running,
    worker_upsert_seen,
)

__all__ = [
    "Batch",
    "CancelledRun",
    "Checkpoint",
    "Checkpointed",
    "ChildOf",
    "ChildRow",
    "ClaimRefused",
    "Claimed",
    "ClaimedDelivery",
    "Delivery",
    "DueSchedule",
    "Executes",
    "ExpiredExhausted",
    "FingerprintTaken",
    "JobRow",
    "LiveWorker",
    "NewStepRun",
    "Parked",
    "PendingOutbox",
    "QueuedClaim",
    "Reply",
    "SignalRow",
    "SlotTaken",
    "StepCounts",
    "StepState",
    "VersionInFlight",
    "WaitState",
    "alert_delivery_claim_due_many",
    "alert_delivery_mark_delivered_if_claimed",
    "alert_delivery_mark_failed_if_claimed",
    "alert_delivery_reset_abandoned",
    "alert_delivery_select_by_alert",
    "alert_exists",
    "alert_insert_for_dead_letter",
    "alert_insert_for_orphaned_versions",
    "alert_select_recent",
    "checkpoint_put_if_leased",
    "checkpoint_put_many_if_leased",
    "clock_select",
    "database_create_if_absent",
    "dead_letter_count_open",
    "dead_letter_delete_closed",
    "dead_letter_insert_message_if_new",
    "dead_letter_insert_message_logged",
    "dead_letter_insert_step",
    "dead_letter_mark_replayed_by_job",
    "dead_letter_mark_replayed_if_open",
    "dead_letter_select_one",
    "dead_letter_select_open",
    "event_count_by_step",
    "event_insert",
    "job_cancel_descendants",
    "job_cancel_if_active",
    "job_cancel_if_leased",
    "job_finish_if_active",
    "job_finish_if_active_logged",
    "job_insert_if_absent",
    "job_lock_children",
    "job_lock_if_active",
    "job_progress",
    "job_reopen_if_ended",
    "job_select_active_by_fingerprint",
    "job_select_active_matching",
    "job_select_child",
    "job_select_children",
    "job_select_info",
    "job_select_status",
    "lease_extend_if_owner",
    "lease_release_if_owner",
    "outbox_insert_after",
    "outbox_insert_delayed",
    "outbox_insert_for_claimable",
    "outbox_insert_for_freed_keys",
    "outbox_insert_many",
    "outbox_listen",
    "outbox_lock_unpublished_many",
    "outbox_mark_published_many",
    "outbox_notify",
    "outbox_wait_notified",
    "schedule_claim_if_due",
    "schedule_delete_by_name",
    "schedule_fire_insert_if_new",
    "schedule_fire_select_by_schedule",
    "schedule_fire_set_outcome",
    "schedule_insert_if_absent",
    "schedule_record_fired",
    "schedule_select_all",
    "schedule_select_db_now",
    "schedule_select_due_many",
    "schedule_select_names",
    "server_ping",
    "signal_insert_if_absent",
    "signal_select",
    "signal_select_by_job",
    "signal_select_for_wait",
    "step_cancel_by_job",
    "step_cancel_if_job_ended_many",
    "step_claim_if_available",
    "step_claim_many_if_available",
    "step_count_by_status",
    "step_counts_by_job",
    "step_dead_if_expired_exhausted_many",
    "step_dead_if_leased",
    "step_event_insert",
    "step_outputs_select",
    "step_reopen_by_job",
    "step_retry_if_leased",
    "step_run_insert_claimed",
    "step_run_insert_many_announced",
    "step_run_insert_many_with_outbox",
    "step_savepoint_rollback",
    "step_select_children_timed_out",
    "step_select_queue_lag",
    "step_select_status",
    "step_wait_children_if_leased",
    "step_wait_if_leased",
    "step_wake_by_signal",
    "step_wake_if_due_many",
    "step_wake_parent",
    "sweep_lock_try",
    "version_select_in_flight",
    "worker_select_live",
    "worker_stop_if_running",
    "worker_upsert_seen",
]
