"""One chaos scenario (a transport and a seed), end to end, as one JSON-ready dict.

1. Scratch databases on the configured server: ``chaos_<seed>_<transport>_...``
   migrated and seeded with a small ERP (``engine seed``), and a copy of it
   for the clean run. SQS: moto's server on 127.0.0.1 and a queue with its
   dead-letter queue.
2. ``CHAOS_WORKERS`` full workers (``costing``, ``posting`` and the chaos flow).
3. ``CHAOS_ROUNDS`` rounds. Each submits ``CHAOS_JOBS_PER_ROUND`` chaos jobs
   (and ERP jobs on its turn: posting and costing of the period, reruns of
   both, costing of the next period once the first is done), then injects
   one fault. The kinds come round in seeded permutations of the enabled
   ones, so every ``len(kinds)`` rounds use each kind once; the victims, the
   fault points, the lengths of outages and windows are drawn from the seed.
   The timing of the processes is not replayable, only the schedule.
4. The faults stop; the run waits until every job ended, or until nothing
   progressed for a whole recovery bound (whatever is active then is stranded).
5. The oracles are checked by SQL (:mod:`.oracles`); the workers get SIGTERM.
6. The clean run: the same ERP jobs on the copy, one worker, no faults; the
   books must be equal to the cent.
"""

from __future__ import annotations

import contextlib
import os
import random
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from engine import Registry, Settings, connect, submit
from engine.transports.postgres import PostgresTransport
from engine.worker.worker import Worker

from . import books, oracles
from .config import NEXT_PERIOD, PERIOD, ChaosConfig
from .inject import Injector
from .run import Run, say
from .sampler import KeySampler

_ERP_FLOWS = ("flows.costing", "flows.posting")


def schedule(cfg: ChaosConfig, transport: str, seed: int) -> list[str]:
    """The kind of each round: seeded permutations of the enabled kinds, end to end."""
    kinds = list(cfg.kinds(transport))
    rng = random.Random(f"schedule:{seed}")
    order: list[str] = []
    while kinds and len(order) < cfg.rounds:
        batch = kinds[:]
        rng.shuffle(batch)
        order.extend(batch)
    return order[: cfg.rounds]


def _erp_round(run: Run, round_no: int) -> None:
    """ERP jobs on their turn: the period's posting and costing, reruns, the next period."""
    period = {"period": PERIOD}
    costing = ("costing", str(sorted(period.items())))
    if round_no == 0:
        run.submit_erp("posting", period)
    elif costing not in run.jobs.erp_ids and run.erp_done("posting", period):
        # posting writes the stock moves costing values: costing follows it
        run.submit_erp("costing", period)
    elif round_no % 4 == 2 and costing in run.jobs.erp_ids:
        run.submit_erp("posting" if round_no % 8 == 2 else "costing", period)
    next_costing = ("costing", str(sorted({"period": NEXT_PERIOD}.items())))
    if round_no >= 2 and next_costing not in run.jobs.erp_ids and run.erp_done("costing", period):
        run.submit_erp("costing", {"period": NEXT_PERIOD})


def _progress(run: Run) -> tuple[int, ...]:
    row = run.q("progress")[0]
    return (
        row["jobs"],
        row["active"],
        row["done"],
        row["steps"],
        row["steps_ended"],
        row["attempts"],
    )


def drain(run: Run) -> dict[str, Any]:
    """Wait for every job to end; give up after a whole bound without progress (stranded).

    Meanwhile the operator's part goes on: every keyed job gets its signal, a
    close-like parent failed by its planned child is retried (:meth:`Run.tend`).
    """
    started = last_change = time.monotonic()
    last = _progress(run)
    tended = 0.0
    while True:
        run.reap()
        if time.monotonic() - tended > 0.5:
            run.tend()
            tended = time.monotonic()
        now = time.monotonic()
        current = _progress(run)
        if current != last:
            last, last_change = current, now
        if current[1] == 0:
            # a parent may have failed since the last tend: its retry makes it active
            retried = len(run.jobs.retried)
            run.tend()
            if len(run.jobs.retried) == retried:
                return {"drain_s": round(now - started, 3), "gave_up": False}
            continue
        if now - last_change > run.bound_s or now - started > run.cfg.drain_s:
            return {"drain_s": round(now - started, 3), "gave_up": True}
        time.sleep(0.1)


def clean_books(run: Run) -> dict[str, Any]:
    """The same ERP jobs, one after another, on the copy of the seeded data, with no faults."""
    settings = Settings(
        database_url=SecretStr(run.clean_info),
        flow_modules=list(_ERP_FLOWS),
        report_on_end=False,
        poll_wait_s=0.2,
        sweep_interval_s=0.5,
    )
    registry = Registry.load(list(_ERP_FLOWS))
    saved_chunk = os.environ.get("ERP_POSTING_CHUNK_SIZE")
    os.environ["ERP_POSTING_CHUNK_SIZE"] = str(run.cfg.chunk_size)  # as the chaos workers
    transport = PostgresTransport(settings)
    worker = Worker(settings, registry, transport=transport, worker_id="clean")
    thread = threading.Thread(target=worker.run, name="clean-worker", daemon=True)
    thread.start()
    try:
        for flow, params in run.jobs.erp:
            job = submit(flow, params, settings=settings, registry=registry, publisher=transport)
            with connect(settings, autocommit=True) as conn:
                deadline = time.monotonic() + 120
                while True:
                    row = conn.execute(
                        "SELECT status FROM engine_jobs WHERE id = %s", (job.job_id,)
                    ).fetchone()
                    if row and row["status"] in ("done", "failed", "cancelled"):
                        break
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"clean run: {flow} {params} did not end")
                    time.sleep(0.05)
                if row["status"] != "done":
                    raise RuntimeError(f"clean run: {flow} {params} ended {row['status']}")
    finally:
        worker.stop_event.set()
        thread.join(timeout=30)
        transport.close()
        if saved_chunk is None:
            os.environ.pop("ERP_POSTING_CHUNK_SIZE", None)
        else:
            os.environ["ERP_POSTING_CHUNK_SIZE"] = saved_chunk
    with connect(settings, autocommit=True) as conn:
        return books.snapshot(conn, [PERIOD, NEXT_PERIOD])


def _sqs(run: Run, stack: ExitStack) -> None:
    from .sqs import moto_queue

    endpoint, queues, env = stack.enter_context(moto_queue(run.seed, run.cfg.visibility_s))
    run.queue_url, run.dlq_url = queues.url, queues.dlq_url
    run.sqs_env = {
        **env,
        "ENGINE_SQS_QUEUE_URL": queues.url,
        "ENGINE_SQS_DLQ_URL": queues.dlq_url,
    }
    if "sqs_errors" in run.cfg.faults:
        run.sqs_env["ENGINE_FAULT_SQS_ERRORS"] = str(run.cfg.sqs_error_rate)
        run.sqs_env["ENGINE_FAULT_SQS_ERRORS_WHILE"] = str(run.sqs_gate)
    say(f"moto SQS on {endpoint}, queue {queues.name}")


def _publisher(run: Run) -> Any:
    if run.transport == "postgres":
        return PostgresTransport(run.settings)
    from engine.transports.sqs import SqsSettings, SqsTransport

    return SqsTransport(SqsSettings(queue_url=run.queue_url, dlq_url=run.dlq_url))


def _pooler(run: Run, stack: ExitStack) -> None:
    """PgBouncer (transaction pooling) between every worker (and engine command) and the server.

    The harness's own reads, submits and the clean run stay direct: what is
    tested is the engine behind the pooler. A partitioned worker's proxy
    forwards to PgBouncer.
    """
    from pooler import PgBouncer  # tests/support (PYTHONPATH): another branch's helper

    bouncer = PgBouncer(run.admin_info, run.logdir / "pgbouncer", pool_size=run.cfg.pooler_size)
    stack.callback(bouncer.stop)
    bouncer.start()
    run.worker_url = bouncer.url_for(run.db)
    assert bouncer.port is not None
    run.pg_upstream = bouncer.port
    say(f"PgBouncer (transaction pooling, {run.cfg.pooler_size} server sessions) on {bouncer.port}")


def run_scenario(
    cfg: ChaosConfig, transport: str, seed: int, admin: str, *, pooled: bool = False
) -> dict[str, Any]:
    kinds = schedule(cfg, transport, seed)
    t0 = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix=f"chaos-{transport}-{seed}-") as tmp,
        ExitStack() as stack,
    ):
        run = Run(cfg, transport, seed, admin, Path(tmp))
        run.pooled = pooled
        run.bound_s = cfg.bound_s(transport, pooled)
        figures: dict[str, Any] = {}
        error = ""
        sampler: KeySampler | None = None
        try:
            run.setup_databases()
            if pooled:
                _pooler(run, stack)
            if transport == "sqs":
                _sqs(run, stack)
            run.publisher = _publisher(run)
            say(
                f"{transport} seed {seed}: {len(kinds)} rounds, "
                f"bound {run.bound_s:g} s, db {run.db}"
            )
            run.start_fleet()
            sampler = KeySampler(run.info)
            sampler.start()
            injector = Injector(run)
            for round_no, kind in enumerate(kinds):
                rng = random.Random(f"round:{seed}:{round_no}")
                run.reap()
                _erp_round(run, round_no)
                for _ in range(cfg.jobs_per_round):
                    run.submit_chaos()
                run.submit_newer(round_no)
                run.tend(round_no)
                fault = injector.inject(kind, round_no, rng)
                mark = "" if fault.applied else " (not applied)"
                say(
                    f"{transport} seed {seed} round {round_no + 1}/{len(kinds)}: "
                    f"{kind}{mark} {fault.detail}"
                )
            figures.update(drain(run))
            sampler.stop()
            figures.update(sampler.figures())
            figures.update(oracles.check(run, figures))
            assert run.fleet is not None
            run.fleet.stop_all(cfg.shutdown_grace_s + cfg.margin_s + 5)
            figures["dead_messages"] += _dlq_count(run)
            with connect(run.settings, autocommit=True) as conn:
                chaos_books = books.snapshot(conn, [PERIOD, NEXT_PERIOD])
            diff = books.differences(chaos_books, clean_books(run))
            figures["books_equal"] = not diff
            figures["books_diff"] = diff
        except Exception as exc:  # the harness itself failed: say so, never pass
            error = f"{type(exc).__name__}: {exc}"
            say(f"harness error: {error}")
        finally:
            if sampler is not None:
                sampler.stop()
            for proxy in run.proxies:
                proxy.stop()
            failed_logs = ""
            if run.fleet is not None:
                failed_logs = run.fleet.tail() if (error or cfg.verbose) else ""
                run.fleet.cleanup()
            figures["worker_hangs"] = len(run.fleet.hangs) if run.fleet else 0
            with contextlib.suppress(Exception):  # an outage cut short by a harness error
                run.allow_connections(True)
            if run.publisher is not None:
                with contextlib.suppress(Exception):  # closing after a failure
                    run.publisher.close()
            if not cfg.keep_db:
                run.drop_databases()
            else:
                say(f"kept databases {run.db} and {run.clean_db}")
        figures["elapsed_s"] = round(time.monotonic() - t0, 1)
        line = _line(run, kinds, figures, error)
        if line["result"] != "pass":
            tails = run.fleet.tail() if run.fleet is not None else ""
            say("worker logs (last lines):\n" + (failed_logs or tails))
        return line


def _dlq_count(run: Run) -> int:
    if run.transport != "sqs" or run.dlq_url is None:
        return 0
    from engine.transports.sqs_client import SqsSettings, sqs_client

    client = sqs_client(SqsSettings(queue_url=run.queue_url))
    attributes = client.get_queue_attributes(
        QueueUrl=run.dlq_url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return sum(int(v) for v in attributes.values())


def _line(run: Run, kinds: list[str], figures: dict[str, Any], error: str) -> dict[str, Any]:
    t = run.tally
    figures["worker_exits"] = t.worker_exits
    failed = oracles.failures(figures) if not error else [f"harness error: {error}"]
    line: dict[str, Any] = {
        "scenario": f"{run.transport}{'+pgbouncer' if run.pooled else ''}/seed={run.seed}",
        "pooler": "pgbouncer (transaction)" if run.pooled else None,
        "transport": run.transport,
        "seed": run.seed,
        "rounds": len(kinds),
        "kills": t.kills,
        "pauses": t.pauses,
        "terms": t.terms,
        "terminations": t.terminations,
        "outages": t.outages,
        "outage_s": round(t.outage_s, 1),
        "duplicates": t.duplicates,
        "duplicate_submits": t.duplicate_submits,
        "sqs_error_windows": t.sqs_error_windows,
        "rollbacks": t.rollbacks,
        "deploys": t.deploys,
        "point_kills": t.point_kills,
        "submit_kills": t.submit_kills,
        "term_lasts": t.term_lasts,
        "schedule_kills": t.schedule_kills,
        "schedule_times": t.schedule_times,
        "partitions": t.partitions,
        "faults_not_applied": [f"{f.round + 1}:{f.kind}" for f in run.faults if not f.applied],
    }
    keys = [
        *("reclaims", "fenced", "released", "dead_lettered", "jobs", "done"),
        *("double_effects", "unfenced", "refused_by_key", "lost", "stranded", "stranded_steps"),
        *("phantoms", "attempts_over_cap", "attempts_miscounted", "max_attempts_used"),
        *("refusal_attempts", "dead_messages", "overlapping_jobs", "unbalanced_journals"),
        *("worker_exits", "worker_hangs", "books_equal", "recovery_samples", "recovery_p95_s"),
        *("recovery_max_s", "recovery_over_bound", "recovery_unrecovered"),
        *("schedule_times_unfired", "schedule_jobs_per_time_off"),
        *("key_overlaps", "key_spans", "key_spans_waiting", "waited_for_key"),
        *("key_overlaps_sampled", "key_samples", "key_samples_held", "key_samples_failed"),
        *("uncharged", "charged_by_crash_at_cap", "zombie_commits", "partition_zombie_commits"),
        *("retried_parents", "retried_unfinished", "closes_never_failed", "newer_jobs"),
        *("partition_modes", "partition_notice_s", "partition_notice_bound_s"),
        *("partition_notice_over_bound", "partition_silent_unnoticed"),
        *("partition_not_taken_over", "partition_recovery_samples", "partition_recovery_p95_s"),
        *("partition_recovery_max_s", "partition_recovery_bound_s"),
        *("partition_recovery_over_bound",),
    ]
    line.update({k: figures.get(k) for k in keys})
    line["bound_s"] = run.bound_s
    line["bound_terms"] = run.cfg.bound(run.transport, run.pooled)
    line["drain_s"] = figures.get("drain_s")
    line["elapsed_s"] = figures.get("elapsed_s")
    line["result"] = "pass" if not failed else "fail"
    line["failures"] = failed
    if failed:
        line["books_diff"] = figures.get("books_diff", [])
        line["examples"] = figures.get("examples", {})
        line["slowest_recoveries"] = figures.get("slowest_recoveries", [])
        line["notes"] = run.notes[-10:]
        line["key_overlap_examples"] = figures.get("key_overlap_examples", [])
        line["partition_details"] = figures.get("partition_details", [])
    line["replay"] = replay_command(run.cfg, run.transport, run.seed, run.pooled)
    return line


def replay_command(cfg: ChaosConfig, transport: str, seed: int, pooled: bool = False) -> str:
    """The command that runs this scenario again (same schedule; process timing differs).

    A pooler scenario runs after the direct one of its transport and seed: its
    replay runs both.
    """
    default = ChaosConfig()
    parts = [f"CHAOS_TRANSPORTS={transport}", f"CHAOS_SEED={seed}", "CHAOS_SCENARIOS=1"]
    parts.append(f"CHAOS_POOLER={transport if pooled else 'none'}")
    for name, value in cfg.__dict__.items():
        if name in ("transports", "seed", "scenarios", "extra", "verbose", "keep_db", "pooler"):
            continue
        if value != getattr(default, name):
            shown = ",".join(value) if isinstance(value, tuple) else value
            parts.append(f"CHAOS_{name.upper()}={shown}")
    if cfg.rounds == default.rounds:
        parts.append(f"CHAOS_ROUNDS={cfg.rounds}")
    return " ".join(parts) + " make chaos"
