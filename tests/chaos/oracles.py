"""The oracles of ../shared/RELIABILITY.md, checked by SQL once the faults stopped.

``lost``: a committed job that is missing, or ended failed or cancelled
(nothing in the schedule fails or cancels a job, except the ``term_last``
job, which may end failed), or a finished chaos step run without its effect.
``stranded``: a job still active when the drain gave up (no progress for the
whole bound, see :func:`.scenario.drain`), or a step run left pending or
running in an ended job. ``phantoms``: a job or effect nobody committed (a
rolled-back submit), or a message for a step run that does not exist.

Recovery: for each fault and each step run it took away, the time from the
fault's origin to that step run's end (or to its first park after the
origin: it ran again up to a wait for a signal, its children or a time, which
is not the fault's to recover), cut at the start of a later fault that took
the same step run away (that one's sample goes on from there).
"""

from __future__ import annotations

import math
import uuid
from typing import Any

from .run import SCHEDULE, Run


def _one(run: Run, name: str, **params: Any) -> dict[str, Any]:
    return run.q(name, **params)[0]


def recovery(run: Run, kinds: set[str] | None = None) -> tuple[list[tuple[float, str]], int]:
    """The recovery samples (seconds, which fault and step run) and how many never ended."""
    faults = [f for f in run.faults if f.applied and f.origin is not None and f.affected]
    if kinds is not None:
        faults = [f for f in faults if f.kind in kinds]
    ids = sorted({s for f in faults for s, _ in f.affected})
    if not ids:
        return [], 0
    state = {r["id"]: r for r in run.q("step_runs_select", ids=ids)}
    parks: dict[uuid.UUID, list[Any]] = {}
    for r in run.q("parks_select", ids=ids):
        parks.setdefault(r["step_run_id"], []).append(r["at"])
    # a takeover refused over its key's limit: another job holds the slot the lapsed lease
    # gave up; the step run waits for the key from then on, like any other claim of it
    for r in run.q("key_refusals_select", ids=ids):
        parks.setdefault(r["step_run_id"], []).append(r["at"])
    hits: dict[uuid.UUID, list[Any]] = {}
    for f in faults:
        for s, _ in f.affected:
            hits.setdefault(s, []).append(f.start)
    samples: list[tuple[float, str]] = []
    unrecovered = 0
    for f in faults:
        assert f.origin is not None and f.start is not None
        for s, _ in f.affected:
            row = state.get(s)
            finished = row["finished_at"] if row else None
            parked = sorted(t for t in parks.get(s, []) if t > f.origin)
            if parked and (finished is None or parked[0] < finished):
                # ran again up to its wait, or was refused its key's slot (held by the next
                # holder): what it waits for from then on is not the fault's
                finished = parked[0]
            later = [t for t in hits[s] if t is not None and t > f.start]
            cut = min(later) if later else None
            if finished is None and cut is None:
                unrecovered += 1
                continue
            end = min(t for t in (finished, cut) if t is not None)
            if finished is not None and finished <= f.origin and (cut is None or finished <= cut):
                continue  # it had ended before the fault took hold: nothing to recover
            what = f"round {f.round + 1} {f.kind} {f.victim or ''}: {row['step'] if row else s}"
            samples.append((max(0.0, (end - f.origin).total_seconds()), what))
    return samples, unrecovered


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[max(0, math.ceil(q * len(ordered)) - 1)], 3)


def _with_children(jobs: list[dict[str, Any]], ids: set[Any]) -> set[Any]:
    found = set(ids)
    while True:
        more = {j["id"] for j in jobs if j["parent_job_id"] in found} - found
        if not more:
            return found
        found |= more


def partition_figures(run: Run) -> dict[str, Any]:
    """The partition faults: did the worker notice within its bound, did others recover."""
    faults = [f for f in run.faults if f.kind == "partition" and f.applied and f.partition]
    timed, _ = recovery(run, kinds={"partition"})
    samples = [t for t, _ in timed]
    noticed = [f.partition["noticed_s"] for f in faults if f.partition["mode"] == "blackhole"]
    bound = run.cfg.notice_bound_s()
    return {
        "partition_modes": [f"{f.round + 1}:{f.partition['mode']}" for f in faults],
        "partition_notice_s": noticed,
        "partition_notice_bound_s": bound,
        "partition_notice_over_bound": sum(1 for t in noticed if t is None or t > bound),
        # no TCP bound can see a partition behind something that acknowledges: noticed
        # only when it healed (not a failure of the worker's settings; see proxy.py)
        "partition_silent_unnoticed": sum(
            1
            for f in faults
            if f.partition["mode"] == "silent" and f.partition["noticed_s"] is None
        ),
        "partition_not_taken_over": sum(1 for f in faults if not f.partition["taken_over"]),
        "partition_recovery_samples": len(samples),
        "partition_recovery_p95_s": percentile(samples, 0.95),
        "partition_recovery_max_s": percentile(samples, 1.0),
        "partition_recovery_bound_s": run.bound_s,
        "partition_recovery_over_bound": sum(1 for t in samples if t > run.bound_s),
        "partition_details": [f"round {f.round + 1}: {f.detail}" for f in faults],
    }


def check(run: Run, drain: dict[str, Any]) -> dict[str, Any]:
    """Every oracle's figures (while the workers are still up, so "quiet" means idle)."""
    jobs = run.q("oracle_jobs")
    by_id = {j["id"]: j for j in jobs}
    chaos_n = {j["params"].get("n"): j for j in jobs if j["flow"] == "chaos"}
    expected_ids = set(run.jobs.committed)
    # the chaos schedule's jobs were submitted by workers: they must finish too
    expected_ids |= {r["job_id"] for r in run.q("schedule_jobs", schedule=SCHEDULE)}
    expected_ids |= {chaos_n[n]["id"] for n in run.jobs.committed_ns if n in chaos_n}
    may_fail = {chaos_n[n]["id"] for n in run.jobs.may_fail if n in chaos_n}
    allowed_ids = expected_ids | {chaos_n[n]["id"] for n in run.jobs.ambiguous_ns if n in chaos_n}
    # a child job is expected (allowed) when its parent is, down the generations
    expected_ids, allowed_ids = (
        _with_children(jobs, expected_ids),
        _with_children(jobs, allowed_ids),
    )

    missing: list[object] = [i for i in expected_ids if i not in by_id]
    missing += [n for n in run.jobs.committed_ns if n not in chaos_n]
    active = [j for j in jobs if j["status"] in ("pending", "running")]
    ended_badly = [
        j
        for j in jobs
        if j["id"] in allowed_ids
        and j["status"] in ("failed", "cancelled")
        and j["id"] not in may_fail
    ]
    phantom_jobs = [j for j in jobs if j["id"] not in allowed_ids]
    phantom_jobs += [chaos_n[n] for n in run.jobs.rolled_back_ns if n in chaos_n]

    effects = _one(run, "oracle_chaos_effects")
    erp = _one(run, "oracle_erp_effects")
    steps = _one(run, "oracle_stranded_steps")
    attempts = _one(run, "oracle_attempts")
    events = _one(run, "oracle_events")
    refusal = 0
    if run.reduced:
        workers, flows = zip(*run.reduced, strict=True)
        refusal = _one(run, "oracle_refusal_attempts", workers=list(workers), flows=list(flows))[
            "claims"
        ]
    schedule = _one(run, "oracle_schedule", schedule=SCHEDULE, times=run.schedule_times)
    keys = _one(run, "oracle_key_overlap")
    timed, unrecovered = recovery(run)
    samples = [t for t, _ in timed]
    # the term_last job's last attempt ends with its worker (SIGTERM past the grace
    # period): a lease that lapsed on the last attempt is dead-lettered by design
    # (RELIABILITY.md: a crash costs its attempt, nothing rests pending at the cap)
    charges = run.q("oracle_uncharged")
    uncharged = [
        u
        for u in charges
        if not (u["job_id"] in may_fail and "lease expired during the last" in u["why"])
    ]
    zombies = run.q("oracle_zombie_commits")
    cut_off = tuple(f"{w}/" for w in run.partitioned)
    retried = run.jobs.retried
    retried_unfinished = [j for j in jobs if j["id"] in retried and j["status"] != "done"]
    never_failed = [j for j in run.jobs.closes_failing if j not in retried]
    return {
        **partition_figures(run),
        "uncharged": len(uncharged),
        "charged_by_crash_at_cap": len(charges) - len(uncharged),
        "zombie_commits": len(zombies),
        "partition_zombie_commits": sum(
            1 for z in zombies if (z["worker"] or "").startswith(cut_off) and cut_off
        ),
        "retried_parents": len(retried),
        "retried_unfinished": len(retried_unfinished),
        "closes_never_failed": len(never_failed),
        "newer_jobs": {
            flow: sum(1 for j in jobs if j["flow"] == flow)
            for flow in ("chaos_keyed", "chaos_close", "chaos_kid", "chaos_pure")
        },
        "jobs": len(jobs),
        "done": sum(1 for j in jobs if j["status"] == "done"),
        "lost": len(missing) + len(ended_badly) + effects["missing"],
        "stranded": len(active) + steps["left_in_ended_jobs"],
        "stranded_steps": {
            "expired_running": steps["expired_running"],
            "pending_at_cap": steps["pending_at_cap"],
            "waiting_past_deadline": steps["waiting_past_deadline"],
            "left_in_ended_jobs": steps["left_in_ended_jobs"],
        },
        "phantoms": len(phantom_jobs) + effects["orphans"] + events["unknown_messages"],
        "double_effects": int(effects["double_effects"])
        + erp["journal_lines_off"]
        + erp["journal_without_posted"],
        "unfenced": int(effects["unfenced"]),
        "refused_by_key": _one(run, "oracle_refused_by_key")["refused"],
        "unbalanced_journals": erp["unbalanced"],
        "attempts_over_cap": attempts["over_cap"],
        "attempts_miscounted": attempts["miscounted"],
        "max_attempts_used": attempts["max_used"],
        "refusal_attempts": refusal,
        "dead_messages": _one(run, "oracle_dead_messages")["dead_messages"],
        "overlapping_jobs": _one(run, "oracle_overlap")["overlapping"],
        "schedule_times_unfired": schedule["unfired"],
        "schedule_jobs_per_time_off": abs(schedule["jobs"] - schedule["fires"])
        + (schedule["fires"] - schedule["fired_jobs"]),
        "key_overlaps": keys["overlapping"],
        "key_spans": keys["spans"],
        "key_spans_waiting": keys["held_waiting"],
        "waited_for_key": keys["waited"],
        "reclaims": events["reclaims"],
        "fenced": events["fenced"],
        "released": events["released"],
        "dead_lettered": events["dead_lettered"],
        "recovery_samples": len(samples),
        "recovery_p95_s": percentile(samples, 0.95),
        "recovery_max_s": percentile(samples, 1.0),
        "recovery_over_bound": sum(1 for s in samples if s > run.bound_s),
        "recovery_unrecovered": unrecovered,
        "slowest_recoveries": [f"{t:.1f} s {what}" for t, what in sorted(timed)[::-1][:3]],
        "examples": {
            "lost": [f"{j['flow']} {j['params']} {j['status']}: {j['error']}" for j in ended_badly][
                :3
            ]
            + [str(m) for m in missing][:3],
            "stranded": [f"{j['flow']} {j['params']} {j['status']}" for j in active][:3],
            "phantoms": [f"{j['flow']} {j['params']}" for j in phantom_jobs][:3],
            "uncharged": [
                f"{u['at']:%H:%M:%S.%f} {u['kind']} {u['flow']}/{u['step']} step run "
                f"{u['step_run_id']} (job {u['job_id']}) attempt {u['attempt']} by "
                f"{u['worker']}: {u['why']}"
                for u in uncharged[:5]
            ],
            "zombie_commits": [
                f"{z['at']:%H:%M:%S.%f} step run {z['step_run_id']} (job {z['job_id']}) "
                f"succeeded by {z['worker']} attempt {z['attempt']} after {z['claim']} by "
                f"{z['claimed_by']} attempt {z['claimed_attempt']} at {z['claimed_at']:%H:%M:%S.%f}"
                for z in zombies[:5]
            ],
            "retried_unfinished": [
                f"{j['flow']} {j['id']} {j['status']}: {j['error']} (retry: {retried[j['id']]})"
                for j in retried_unfinished[:3]
            ],
        },
    }


# figures that must be zero, and the oracle each one belongs to
MUST_BE_ZERO = {
    "lost": "nothing lost",
    "stranded": "nothing stranded",
    "phantoms": "nothing unexpected (rolled-back submits leave no job, effect or message)",
    "double_effects": "no double effect",
    "unfenced": "fencing",
    "refused_by_key": "no double effect (none refused by a unique key)",
    "unbalanced_journals": "balanced books",
    "attempts_over_cap": "attempts within the cap",
    "attempts_miscounted": "attempts = claims - recorded releases",
    "refusal_attempts": "a refusal costs no attempt",
    "dead_messages": "no message burned into a dead-letter queue",
    "overlapping_jobs": "one active job per fingerprint",
    "schedule_times_unfired": "every scheduled time made due fires (nothing lost)",
    "schedule_jobs_per_time_off": "each scheduled time fires exactly one job",
    "key_overlaps": "concurrency keys: no two jobs of one key hold it at once (events)",
    "key_overlaps_sampled": "concurrency keys: never more holders than the limit (sampled)",
    "uncharged": "only the step whose own code raised pays an attempt",
    "zombie_commits": "fencing: no checkpoint after another claim of its step run",
    "partition_zombie_commits": "a partitioned worker, healed, commits nothing it lost",
    "partition_notice_over_bound": "a partitioned worker notices within its TCP bound",
    "partition_not_taken_over": "a partitioned worker's step runs are reclaimed",
    "partition_recovery_over_bound": "partition recovery within the bound",
    "retried_unfinished": "every retried parent finishes",
    "recovery_over_bound": "recovery within the bound",
    "recovery_unrecovered": "every step run a fault took away ends",
    "worker_exits": "workers outlive their dependencies' faults",
    "worker_hangs": "SIGTERM: exit within the grace period",
}


def failures(figures: dict[str, Any]) -> list[str]:
    failed = [f"{key} ({why})" for key, why in MUST_BE_ZERO.items() if figures.get(key)]
    stuck = figures.get("stranded_steps", {})
    for key in ("expired_running", "pending_at_cap", "waiting_past_deadline"):
        if stuck.get(key):
            failed.append(f"{key} (nothing stranded)")
    if not figures.get("books_equal", False):
        failed.append("books_equal (same books as the clean run, to the cent)")
    return failed
