"""The faults of a chaos round, one method per kind (see :data:`.config.FAULT_KINDS`).

A fault that hits a worker mid-step first waits (polling, with a deadline)
for a step run under a live lease whose owner is a full worker, preferring
an ERP step when one is running, and leaves head-room under the attempt cap
so that the schedule alone never exhausts a step run. The step runs the
victim held at that moment are the fault's ``affected`` step runs: recovery
is measured on them (:mod:`.oracles`).
"""

from __future__ import annotations

import random
import re
import signal
import time
import uuid
from datetime import datetime
from typing import Any

from psycopg.conninfo import make_conninfo

from engine import add_schedule, connect, submit
from engine.transports.message import StepMessage

from .config import FLOW_MODULES
from .procs import Proc, run_submit
from .proxy import FaultProxy
from .run import SCHEDULE, Fault, Run, say

_TARGET_WAIT_S = 8.0
_WORKER_POINTS = ("after_claim", "before_commit", "after_commit", "after_publish")
_SUBMIT_POINTS = ("after_submit_commit", "after_publish")
_SCHEDULE_POINTS = ("schedule_after_claim", "schedule_before_commit")
# the job number of the chaos schedule's jobs: never one the harness submits
_SCHEDULE_N = 1_000_000
# what a worker logs when it gives a dead path up: an outage declared, a step not
# committed for a lost connection, a lease found lost, a heartbeat that failed
_NOTICED = re.compile(r"unreachable|not committed|connection lost|lost|fenced|heartbeat")
_LOG_TIME = re.compile(r"^(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3}) (WARNING|ERROR|CRITICAL)")


def noticed(proc: Proc, since: datetime) -> float | None:
    """Seconds from ``since`` (local time, as the worker logs) to the worker's first log
    line saying it gave a connection or a lease up; ``None`` if it has not."""
    found = noticed_line(proc, since)
    return None if found is None else found[0]


def noticed_line(proc: Proc, since: datetime) -> tuple[float, str] | None:
    if not proc.log.exists():
        return None
    for line in proc.log.read_text(errors="replace").splitlines():
        found = _LOG_TIME.match(line)
        if found is None or not _NOTICED.search(line):
            continue
        at = datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S,%f")
        if at >= since:
            return (at - since).total_seconds(), line[24:200]
    return None


_MODULE_OF = {
    "costing": "flows.costing",
    "posting": "flows.posting",
    "chaos": "tests.chaos.chaosflow",
    "chaos_keyed": "tests.chaos.keyflows",
    "chaos_close": "tests.chaos.keyflows",
    "chaos_kid": "tests.chaos.keyflows",
    "chaos_pure": "tests.chaos.keyflows",
}


class Injector:
    def __init__(self, run: Run) -> None:
        self.run = run
        assert run.fleet is not None
        self.fleet = run.fleet

    def inject(self, kind: str, round_no: int, rng: random.Random) -> Fault:
        fault: Fault = getattr(self, f"_{kind}")(Fault(kind, round_no), rng)
        self.run.faults.append(fault)
        return fault

    # -- helpers -----------------------------------------------------------------------

    def _held_by(self, proc: Proc) -> list[tuple[uuid.UUID, int]]:
        prefix = f"{proc.name}/"
        return [
            (r["id"], r["attempts"])
            for r in self.run.q("running_select_all")
            if (r["lease_owner"] or "").startswith(prefix)
        ]

    def _target(self, rng: random.Random) -> tuple[Proc | None, str]:
        """A full worker mid-step (an ERP step if one runs), or any full worker after a wait."""
        run = self.run
        pick, prefer_erp = rng.random(), rng.random() < 0.6

        def candidates() -> list[dict[str, Any]]:
            rows = []
            for row in run.q("running_select"):
                owner = self.fleet.owner(row["lease_owner"])
                if owner is None or owner.role != "full" or not owner.alive or owner.stopped:
                    continue
                if row["attempts"] > row["max_attempts"] - 2:
                    continue  # head-room: the schedule alone never exhausts a step run
                rows.append(row)
            return rows

        rows = run.wait_for(candidates, _TARGET_WAIT_S)
        if not rows:
            full = self.fleet.full()
            return (full[int(pick * len(full))] if full else None), "no step running"
        erp = [r for r in rows if r["flow"] != "chaos"]
        pool = erp if erp and prefer_erp else rows
        chosen = pool[int(pick * len(pool))]
        proc = self.fleet.owner(chosen["lease_owner"])
        return proc, f"{chosen['flow']}/{chosen['step']} attempt {chosen['attempts']}"

    def _hit(self, fault: Fault, proc: Proc, what: str) -> None:
        fault.victim = proc.name
        fault.affected = self._held_by(proc)
        fault.detail = f"{proc.name} during {what}"
        fault.start = fault.origin = self.run.clock()

    def _replace(self, proc: Proc) -> None:
        if proc.role == "full":
            self.run.spawn_full()

    def _exit_or_hang(self, proc: Proc, timeout_s: float) -> None:
        if not self.fleet.wait_exit(proc, timeout_s):
            self.fleet.hangs.append(proc.name)
            self.run.notes.append(f"{proc.name} still running {timeout_s:g} s after SIGTERM")
            self.fleet.kill_now(proc)

    # -- worker faults -----------------------------------------------------------------

    def _kill(self, fault: Fault, rng: random.Random) -> Fault:
        proc, what = self._target(rng)
        if proc is None:
            fault.applied = False
            return fault
        self._hit(fault, proc, what)
        self.fleet.signal(proc, signal.SIGKILL)
        self.fleet.wait_exit(proc, 10)
        self.run.tally.kills += 1
        self._replace(proc)
        return fault

    def _pause(self, fault: Fault, rng: random.Random) -> Fault:
        """SIGSTOP past the lease: until another worker took over what it held, then SIGCONT."""
        proc, what = self._target(rng)
        if proc is None:
            fault.applied = False
            return fault
        self._hit(fault, proc, what)
        self.fleet.signal(proc, signal.SIGSTOP)
        self.run.tally.pauses += 1
        held = dict(fault.affected)
        started = time.monotonic()

        def taken_over() -> bool:
            if time.monotonic() - started < self.run.cfg.lease_s * 1.25:
                return False  # past the lease in any case
            rows = self.run.q("step_runs_select", ids=list(held))
            refused = {r["step_run_id"] for r in self.run.q("key_refusals_select", ids=list(held))}
            # taken over, or a takeover refused because the key's slot passed to another job
            return all(
                r["status"] != "running" or r["attempts"] > held[r["id"]] or r["id"] in refused
                for r in rows
            )

        if not self.run.wait_for(taken_over, self.run.bound_s):
            sessions = self.run.admin_q(
                "sessions_select_by_app", db=self.run.db, app=f"chaos:{proc.name}"
            )
            self.run.notes.append(
                f"pause of {proc.name}: not taken over within the bound; its sessions: "
                + "; ".join(
                    f"{s['state']} {s['in_state_s']} s"
                    f" (wait {s['wait_event_type']}/{s['wait_event']}) {s['query']}"
                    for s in sessions
                )
            )
        fault.detail += f", stopped {time.monotonic() - started:.1f} s"
        self.fleet.signal(proc, signal.SIGCONT)
        return fault

    def _term(self, fault: Fault, rng: random.Random) -> Fault:
        proc, what = self._target(rng)
        if proc is None:
            fault.applied = False
            return fault
        self._hit(fault, proc, what)
        self.fleet.signal(proc, signal.SIGTERM)
        self.run.tally.terms += 1
        self._exit_or_hang(proc, self.run.cfg.shutdown_grace_s + self.run.cfg.margin_s + 5)
        self._replace(proc)
        return fault

    def _terminate(self, fault: Fault, rng: random.Random) -> Fault:
        proc, what = self._target(rng)
        if proc is None:
            fault.applied = False
            return fault
        self._hit(fault, proc, what)
        ended = self.run.admin_q(
            "sessions_terminate_by_app", db=self.run.db, app=f"chaos:{proc.name}"
        )
        fault.detail += f", {ended[0]['terminated']} session(s) terminated"
        self.run.tally.terminations += 1
        return fault

    def _outage(self, fault: Fault, rng: random.Random) -> Fault:
        run = self.run
        seconds = rng.uniform(run.cfg.outage_min_s, run.cfg.outage_max_s)
        fault.affected = [(r["id"], r["attempts"]) for r in run.q("running_select_all")]
        run.drop_conn()
        fault.start = run.clock()
        run.allow_connections(False)
        ended = run.admin_q("sessions_terminate_all", db=run.db)[0]["terminated"]
        time.sleep(seconds)  # the outage itself: its length is the schedule's
        run.allow_connections(True)
        fault.origin = run.clock()
        fault.detail = f"{seconds:.1f} s, {ended} session(s) terminated"
        run.tally.outages += 1
        run.tally.outage_s += seconds
        run.renew_publisher()
        return fault

    def _duplicate(self, fault: Fault, rng: random.Random) -> Fault:
        run = self.run
        rows = run.q("step_runs_select_some")
        chosen = rng.sample(rows, min(len(rows), rng.randint(2, 6)))
        sent = 0
        for row in chosen:
            body = StepMessage(job_id=row["job_id"], step_run_id=row["id"]).encode()
            for _ in range(rng.randint(1, 3)):
                run.publisher.send_raw(body)
                sent += 1
        run.tally.duplicates += sent
        again = ""
        active = run.q("jobs_active_select")
        if active:
            params = active[int(rng.random() * len(active))]["params"]
            job = submit(
                "chaos",
                params,
                settings=run.settings,
                registry=run.registry,
                publisher=run.publisher,
                submitted_by="chaos (duplicate)",
            )
            run.tally.duplicate_submits += 1
            if job.created:  # the first had just ended: a new job, which must finish too
                run.jobs.committed.add(job.job_id)
            outcome = "a new job" if job.created else "the active one"
            again = f"; job {params['n']} submitted again: {outcome}"
        fault.detail = f"{sent} extra message(s) for {len(chosen)} step run(s){again}"
        return fault

    def _sqs_errors(self, fault: Fault, rng: random.Random) -> Fault:
        run = self.run
        seconds = rng.uniform(2.0, 4.0)
        fault.start = run.clock()
        run.sqs_gate.touch()
        time.sleep(seconds)  # the window itself: its length is the schedule's
        run.sqs_gate.unlink()
        fault.detail = f"{seconds:.1f} s of SQS errors at rate {run.cfg.sqs_error_rate:g}"
        run.tally.sqs_error_windows += 1
        return fault

    def _rollback(self, fault: Fault, rng: random.Random) -> Fault:
        """Submit inside a psycopg transaction that then rolls back: no job, no message."""
        run = self.run
        ns = [run.jobs.new_n() for _ in range(rng.randint(1, 3))]
        run.jobs.rolled_back_ns.update(ns)
        with connect(run.settings) as conn:
            for n in ns:
                submit(
                    "chaos",
                    run.chaos_params(n),
                    conn=conn,
                    settings=run.settings,
                    registry=run.registry,
                    publisher=run.publisher,
                    submitted_by="chaos (rolled back)",
                )
            conn.rollback()
        run.tally.rollbacks += len(ns)
        seen = run.q("job_select_by_n", ns=ns)
        fault.detail = f"jobs {ns} rolled back; {len(seen)} visible afterwards"
        return fault

    def _deploy(self, fault: Fault, rng: random.Random) -> Fault:
        """A worker lacking one flow (the old task of a rolling deploy) beside full ones."""
        run = self.run
        active = {r["flow"] for r in run.q("running_select")} | {"chaos"}
        lacking = rng.choice(sorted(active & set(_MODULE_OF)))
        window = rng.uniform(2.0, 4.0)
        modules = ",".join(m for m in FLOW_MODULES if m != _MODULE_OF[lacking])
        proc = self.fleet.spawn(f"reduced:{lacking}", ENGINE_FLOW_MODULES=modules)
        run.reduced.append((proc.name, lacking))
        run.wait_up(proc)
        fault.victim = proc.name
        fault.start = run.clock()
        run.submit_chaos()  # work it cannot run arrives while it is up
        run.wait_for(lambda: not proc.alive, window)  # the deploy's length is the schedule's
        self.fleet.signal(proc, signal.SIGTERM)
        self._exit_or_hang(proc, run.cfg.shutdown_grace_s + run.cfg.margin_s + 5)
        fault.detail = f"{proc.name} without flow {lacking} for {window:.1f} s"
        run.tally.deploys += 1
        return fault

    def _point_kill(self, fault: Fault, rng: random.Random) -> Fault:
        """A worker that SIGKILLs itself the first time it passes a named fault point."""
        run = self.run
        # the PostgreSQL queue publishes inside the checkpoint's commit: only the SQS
        # path relays after it (engine submit's after_publish is in submit_kill)
        points = _WORKER_POINTS if run.transport == "sqs" else _WORKER_POINTS[:3]
        point = rng.choice(points)
        proc = self.fleet.spawn(f"point:{point}", ENGINE_FAULTS=f"{point}=kill")
        proc.signalled = f"fault point {point}"  # its death is planned, not an exit
        fault.victim = proc.name
        run.wait_up(proc)
        # work keeps arriving while it is up (each job fans out: its first checkpoint
        # publishes), so that it reaches the point; the bound caps the wait
        deadline = time.monotonic() + run.bound_s + 10
        while proc.alive and time.monotonic() < deadline:
            run.submit_chaos(fan=3)
            run.wait_for(lambda: not proc.alive, 1.0)
        if proc.alive:
            fault.applied = False
            fault.detail = f"{proc.name}: {point} not reached"
            self.fleet.signal(proc, signal.SIGTERM)
            self._exit_or_hang(proc, run.cfg.shutdown_grace_s + run.cfg.margin_s + 5)
            return fault
        fault.start = fault.origin = run.clock()
        fault.affected = self._held_by(proc)
        fault.detail = f"{proc.name} killed itself at {point} (exit {proc.popen.returncode})"
        run.tally.kills += 1
        run.tally.point_kills += 1
        return fault

    def _submit_kill(self, fault: Fault, rng: random.Random) -> Fault:
        """``engine submit`` killed after its commit: before publishing, or before marking.

        A submit that publishes inside its own transaction (the PostgreSQL queue)
        never passes ``after_publish``; it then goes again with ``after_submit_commit``.
        """
        run = self.run
        points = list(_SUBMIT_POINTS)
        rng.shuffle(points)
        tried = []
        for point in points:
            n = run.jobs.new_n()
            args = ["chaos", "--json"]
            for key, value in run.chaos_params(n).items():
                args += [f"--{key.replace('_', '-')}", str(value)]
            env = {**run.child_env(), "ENGINE_FAULTS": f"{point}=kill"}
            code, output = run_submit(env, args, run.logdir, f"submit-{n}")
            if code in (0, -signal.SIGKILL):
                run.jobs.committed_ns.add(n)  # both points come after the commit
            else:
                run.jobs.ambiguous_ns.add(n)
                run.notes.append(f"engine submit of job {n} exited {code}: {output[-300:]}")
            tried.append(f"job {n} with {point}=kill: exit {code}")
            if code == -signal.SIGKILL:
                run.tally.kills += 1
                run.tally.submit_kills += 1
                break
        fault.start = run.clock()
        fault.detail = "engine submit of " + "; ".join(tried)
        fault.applied = code == -signal.SIGKILL
        return fault

    def _term_last(self, fault: Fault, rng: random.Random) -> Fault:
        """SIGTERM during the last attempt allowed, a step longer than the grace period."""
        run = self.run
        cap = run.cfg.max_attempts
        last_ms = int((run.cfg.shutdown_grace_s + 3) * 1000)
        n = run.submit_chaos(fail_first=cap - 1, last_ms=last_ms)
        run.jobs.may_fail.add(n)

        def at_last_attempt() -> Any:
            for row in run.q("running_select"):
                owner = self.fleet.owner(row["lease_owner"])
                if (
                    row["flow"] == "chaos"
                    and row["params"].get("n") == n
                    and row["attempts"] == cap
                    and owner is not None
                    and owner.role == "full"
                    and owner.alive
                    and not owner.stopped
                ):
                    return owner
            return None

        budget = cap * (run.cfg.retry_max_delay_s + run.bound_s)
        proc = run.wait_for(at_last_attempt, budget)
        if proc is None:
            fault.applied = False
            fault.detail = f"job {n} never reached attempt {cap} on a full worker"
            return fault
        self._hit(fault, proc, f"job {n} begin, attempt {cap} of {cap}")
        self.fleet.signal(proc, signal.SIGTERM)
        run.tally.terms += 1
        run.tally.term_lasts += 1
        self._exit_or_hang(proc, run.cfg.shutdown_grace_s + run.cfg.margin_s + 5)
        self._replace(proc)
        say(f"  term_last: {fault.detail}")
        return fault

    def _schedule(self, fault: Fault, rng: random.Random) -> Fault:
        """A worker that kills itself when it fires a schedule (claimed, not committed).

        It races the full workers for each time made due, so times are made due
        one after the other (each once the one before has fired, by whichever
        worker) until it has won one and died. The claim it held rolls back with
        the jobs it submitted; another worker fires that time. The oracle: every
        time made due fired, one job each.
        """
        run = self.run
        if not run.q("schedule_exists", schedule=SCHEDULE):
            add_schedule(
                SCHEDULE,
                "chaos",
                "0 3 * * *",
                timezone="Europe/Istanbul",
                params=run.chaos_params(_SCHEDULE_N),
                settings=run.settings,
                registry=run.registry,
            )
        point = rng.choice(_SCHEDULE_POINTS)
        proc = self.fleet.spawn(f"point:{point}", ENGINE_FAULTS=f"{point}=kill")
        proc.signalled = f"fault point {point}"  # its death is planned, not an exit
        fault.victim = proc.name
        run.wait_up(proc)
        deadline = time.monotonic() + run.bound_s + 10
        while proc.alive and time.monotonic() < deadline:
            at = run.q("schedule_age", schedule=SCHEDULE)[0]["next_fire_at"]
            run.schedule_times.append(at)
            run.tally.schedule_times += 1
            fired = run.wait_for(
                lambda at=at: run.q("schedule_fired", schedule=SCHEDULE, at=at), run.bound_s
            )
            if not fired:
                break  # the oracle counts it unfired; ageing again would hide it
        if proc.alive:
            fault.applied = False
            fault.detail = f"{proc.name}: {point} not reached"
            self.fleet.signal(proc, signal.SIGTERM)
            self._exit_or_hang(proc, run.cfg.shutdown_grace_s + run.cfg.margin_s + 5)
            return fault
        fault.start = fault.origin = run.clock()
        fault.detail = (
            f"{proc.name} killed itself at {point} after {len(run.schedule_times)} "
            f"scheduled time(s) made due"
        )
        run.tally.kills += 1
        run.tally.schedule_kills += 1
        return fault

    def _partition(self, fault: Fault, rng: random.Random) -> Fault:
        """A worker behind its own fault proxy, cut off from PostgreSQL mid-step, then healed.

        The worker is started for the fault with ``ENGINE_DATABASE_URL`` on its
        proxy's port; once it holds a live lease the proxy switches to the drawn
        mode (see :mod:`.proxy`): ``blackhole`` (the proxy aborts connections as the
        worker's TCP bounds would), ``silent`` (nothing can see it), ``latency`` or
        ``reset``. A blackhole (silent or not) lasts until every step run it held
        was taken over by another worker (at least past the lease) and, unless
        silent, until the worker noticed or its notice bound passed; latency and
        resets last a drawn window. Then the path heals, the held
        bytes go through (a zombie's late commit included: fencing must refuse it)
        and the worker is retired with SIGTERM.
        """
        run, cfg = self.run, self.run.cfg
        mode = rng.choice(cfg.partition_modes)
        keepalive = cfg.keepalive_bound_s()
        proxy = FaultProxy(
            run.pg_upstream,
            name=f"partition-{fault.round + 1}",
            abort_after_s=cfg.tcp_user_timeout_s if mode == "blackhole" else None,
            idle_abort_s=keepalive if mode == "blackhole" else None,
        )
        run.proxies.append(proxy)
        port = proxy.start()
        url = make_conninfo(run.worker_url, host="127.0.0.1", port=port)
        # a TCP proxy is no pooler, whatever the detection makes of the addresses it
        # sees (engine/store/pooler.py): the direct path is the one under test
        pooler = "auto" if run.pooled else "none"
        proc = self.fleet.spawn(
            "partitioned", ENGINE_DATABASE_URL=url, ENGINE_POOLER=pooler, **run.worker_faults()
        )
        fault.victim = proc.name
        run.partitioned.append(proc.name)
        run.wait_up(proc)
        # work keeps arriving until it holds a step run its heartbeat renewed once (its
        # connection is open: a heartbeat that connects into the partition is bounded by
        # connect_timeout alone, which says nothing of a statement stuck on an open
        # connection). More step runs at once than the other workers have slots: its
        # path through the proxy is the slowest to claim. Bounded like the other waits.
        deadline = time.monotonic() + run.bound_s + 10
        held: dict[uuid.UUID, int] = {}
        prefix = f"{proc.name}/%"

        def renewed() -> dict[uuid.UUID, int]:
            now = dict(self._held_by(proc))
            if (
                not now
                or not run.q("renewals_by_owner", ids=list(now), prefix=prefix)[0]["renewals"]
            ):
                return {}
            return now

        while proc.alive and not held and time.monotonic() < deadline:
            if not self._held_by(proc):
                for _ in range(1 + cfg.workers * cfg.concurrency // 3):
                    run.submit_chaos(fan=3)
            held = run.wait_for(renewed, 1.0)
        if not held or not proc.alive:
            fault.applied = False
            fault.detail = f"{proc.name} held no step run"
            self._retire(proc, proxy)
            tail = (
                proc.log.read_text(errors="replace").splitlines()[-5:] if proc.log.exists() else []
            )
            run.notes.append(
                f"partitioned {proc.name} held nothing; proxy {proxy.counts()}; its log: "
                + " | ".join(tail)
            )
            say(run.notes[-1][:2000])
            return fault
        latency_ms = rng.randint(cfg.latency_min_ms, cfg.latency_max_ms)
        fault.affected = list(held.items())
        fault.start = fault.origin = run.clock()
        started, wall = time.monotonic(), datetime.now()
        # "silent" is a blackhole the proxy does not abort (it was made without the bounds)
        proxy.set_mode("blackhole" if mode == "silent" else mode, latency_ms)
        run.tally.partitions += 1
        notice_bound = cfg.notice_bound_s()

        def over() -> bool:
            elapsed = time.monotonic() - started
            if elapsed < cfg.lease_s * 1.25:
                return False  # past the lease in any case
            rows = run.q("step_runs_select", ids=list(held))
            taken = all(r["status"] != "running" or r["attempts"] > held[r["id"]] for r in rows)
            if mode == "blackhole":  # and it noticed, or its notice bound passed
                seen = noticed(proc, wall) is not None
                return taken and (seen or elapsed > notice_bound)
            return taken

        if mode in ("latency", "reset"):
            # a window: a slow path may keep its leases, a reset one loses its sessions
            # (and the worker reconnects); neither has to be taken over
            window = rng.uniform(2.0, 4.0)
            run.wait_for(lambda: time.monotonic() - started >= window, window)
            taken_over = True
        else:
            taken_over = run.wait_for(over, max(run.bound_s, notice_bound))
        lasted = time.monotonic() - started
        seen = noticed_line(proc, wall)
        noticed_s = None if seen is None else seen[0]
        proxy.set_mode("pass")
        fault.partition = {
            "mode": mode,
            "latency_ms": latency_ms if mode == "latency" else None,
            "lasted_s": round(lasted, 2),
            "noticed_s": None if noticed_s is None else round(noticed_s, 2),
            "notice_bound_s": notice_bound,
            "taken_over": bool(taken_over),
            "noticed_by": None if seen is None else seen[1],
        }
        shown = "not before the heal" if noticed_s is None else f"after {noticed_s:.1f} s"
        fault.detail = (
            f"{proc.name} {mode}"
            + (f" {latency_ms} ms" if mode == "latency" else "")
            + f" for {lasted:.1f} s holding {len(held)} step run(s); noticed {shown}"
            + ("" if taken_over else "; NOT taken over within the bound")
            + ("" if seen is None else f" ({seen[1][:100]})")
        )
        # healed: it goes on (and may try its late commits) for a lease, then retires
        run.wait_for(lambda: not proc.alive, cfg.lease_s * 2)
        self._retire(proc, proxy)
        counts = proxy.counts()
        fault.partition["proxy"] = {k: v for k, v in counts.items() if not k.startswith("mode")}
        return fault

    def _retire(self, proc: Proc, proxy: FaultProxy) -> None:
        """SIGTERM a partitioned worker after its fault; its proxy passes until the end."""
        if proc.alive:
            self.fleet.signal(proc, signal.SIGTERM)
            self._exit_or_hang(proc, self.run.cfg.shutdown_grace_s + self.run.cfg.margin_s + 5)
