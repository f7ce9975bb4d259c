"""A state machine over the real claim/lease/fence SQL (issue 10, "Prove it").

Hypothesis drives the engine's own functions (``engine.jobs.submit``, the runner's
``claim``, the store's fenced writes, the sweeper, ``engine.jobs.admin``) against a
fresh PostgreSQL database per example, in any order: submit, claim, renew,
expire, reclaim, give back, complete, retry, dead-letter, cancel (by the
operator, or by a step through its lease), duplicate delivery, sweep,
operator retry, and durable waits: a holder parks its step run waiting for a
signal (with or without a deadline), the signal is sent (before or after),
the deadline passes and the sweeper wakes it. A model of the legal states
(per step run: status, attempts, cap, current token, wait; per job: status)
predicts every outcome, and after every rule the database is checked
against it and against the invariants of
../shared/DESIGN.md (2, 5, 7, 10, 13, 14, 16). A failure shrinks to a minimal
sequence of rules.

Sized by ``HYPOTHESIS_STATEFUL_EXAMPLES`` and ``HYPOTHESIS_STATEFUL_STEPS``
(small by default). Time is moved by ageing rows, never by sleeping.
"""

from __future__ import annotations

import os
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import psycopg
from harness import fast_settings, flows_registry
from hypothesis import HealthCheck, event, note
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from psycopg import sql
from psycopg.conninfo import make_conninfo
from pydantic import SecretStr

from engine import signal, store, submit
from engine.alerts import AlertRecorder
from engine.config import Settings
from engine.errors import BadInput
from engine.jobs import admin
from engine.jobs.plan import max_attempts_for, schedule_ready
from engine.runner import claim
from engine.store import Claimed, ClaimRefused, db
from engine.store.models import EventKind, JobStatus
from engine.transports.message import StepMessage
from engine.transports.postgres import PostgresTransport
from engine.worker.sweeper import Sweeper

EXAMPLES = int(os.environ.get("HYPOTHESIS_STATEFUL_EXAMPLES", "12"))
STEPS = int(os.environ.get("HYPOTHESIS_STATEFUL_STEPS", "40"))

REGISTRY = flows_registry()
ALL = REGISTRY.runnable()
# "old" is a worker of an earlier deploy without the fan flow (invariant 14)
WORKERS = {"w1": ALL, "w2": ALL, "old": [r for r in ALL if not r.startswith("fan:")]}
FLOWS = st.sampled_from(["chain", "fan", "diamond"])
SIZES = st.integers(0, 2)  # the job parameter n: fan-out width, and a fingerprint
LEASE_S = 30.0
MAX_ATTEMPTS = 2  # the default cap, small so it is reached (chain's c has 3)
MAX_ACTIVE_JOBS = 3  # a new job arrives whenever fewer are active
ACTIVE = ("pending", "running")
RUN_ACTIVE = ("pending", "running", "waiting")  # a step run's: waiting is "later"
FINISHED = ("done", "dead", "cancelled")
SIGNAL = "go"


class _Fenced(Exception):
    """The checkpoint matched zero rows: roll its transaction back, as the runner does."""


@dataclass
class JobModel:
    id: uuid.UUID
    label: str
    flow: str
    n: int
    status: str = "pending"
    signalled: bool = False  # the signal SIGNAL was sent to it


@dataclass
class RunModel:
    id: uuid.UUID
    label: str
    job: JobModel
    step: str
    key: str
    max_attempts: int
    status: str = "pending"
    attempts: int = 0
    attempt_base: int = 0  # attempts before its retry round
    token: uuid.UUID | None = None
    owner: str | None = None
    expired: bool = False  # running: the lease was aged past its expiry
    due: bool = True  # pending: available now (a retry's backoff has ended)
    wait_signal: str | None = None  # the last wait's signal (kept after its wake)
    deadline: bool = False  # waiting: the last wait has a deadline
    deadline_passed: bool = False  # waiting: that deadline was aged into the past


@dataclass(frozen=True)
class Held:
    """A claim some worker holds (or held: its token may be stale by now)."""

    label: str
    claimed: Claimed
    worker: str


def output_for(job: JobModel, run: RunModel) -> dict[str, Any]:
    """A checkpoint that fits the step's output model (fan's plan fans out to ``n`` parts)."""
    n = job.n
    if run.step == "plan":
        out: dict[str, Any] = {"parts": [{"index": i} for i in range(n)]}
    elif run.step == "part":
        i = int(run.key)
        out = {"index": i, "square": i * i}
    elif run.step == "gather":
        out = {"total": sum(i * i for i in range(n)), "count": n}
    elif run.step == "join":
        out = {"total": 2 * n}
    else:
        out = {"step": run.step, "n": n}
    model = REGISTRY.get(job.flow).steps[run.step].output
    return model.model_validate(out).model_dump(mode="json")


def expected_schedule(job: JobModel, runs: list[RunModel]) -> tuple[set[tuple[str, str]], bool]:
    """The step runs a checkpoint makes ready, and whether the job is then complete.

    A step is complete when its upstream steps are and all its runs are done;
    a step with no runs whose upstream is complete gets one run (``n`` for a
    fan-out, and zero of them make it complete at once).
    """
    flow = REGISTRY.get(job.flow)
    by_step: dict[str, list[RunModel]] = {}
    for r in runs:
        by_step.setdefault(r.step, []).append(r)
    complete: dict[str, bool] = {}
    new: set[tuple[str, str]] = set()
    for name in flow.topological_order():
        step = flow.steps[name]
        upstream = all(complete[u] for u in step.after)
        if name in by_step:
            complete[name] = upstream and all(r.status == "done" for r in by_step[name])
            continue
        if not upstream or not step.after:
            complete[name] = False
            continue
        keys = [str(i) for i in range(job.n)] if step.map_over is not None else [""]
        new |= {(name, k) for k in keys}
        complete[name] = not keys
    return new, all(complete.values())


def _create_database(admin_info: str, name: str, template: str) -> str:
    with psycopg.connect(admin_info, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(template)
            )
        )
        # thousands of one-row commits per run: durability is not what is tested here
        conn.execute(
            sql.SQL("ALTER DATABASE {} SET synchronous_commit = off").format(sql.Identifier(name))
        )
    return make_conninfo(admin_info, dbname=name)


def _drop_database(admin_info: str, name: str) -> None:
    with psycopg.connect(admin_info, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


class Databases:
    """A fresh copy of the template per example; the next is made while an example runs.

    CREATE DATABASE costs about half a second (it syncs the new files), as
    much as a whole example, so it happens in a thread; so does the DROP.
    """

    def __init__(self, admin_info: str, template: str) -> None:
        self.admin_info = admin_info
        self.template = template
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="state-machine-db")
        self._next: Future[tuple[str, str]] = self._pool.submit(self._create)

    def _create(self) -> tuple[str, str]:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        name = f"engine_sm_{worker}_{uuid.uuid4().hex[:8]}"
        return name, _create_database(self.admin_info, name, self.template)

    def take(self) -> tuple[str, str]:
        """(name, conninfo) of a new database, migrated, that nobody has used."""
        taken, self._next = self._next, self._pool.submit(self._create)
        return taken.result()

    def drop(self, name: str) -> None:
        self._pool.submit(_drop_database, self.admin_info, name)

    def close(self) -> None:
        name, _ = self._next.result()
        self.drop(name)
        self._pool.shutdown(wait=True)


class StepRunMachine(RuleBasedStateMachine):
    def __init__(self, databases: Databases) -> None:
        super().__init__()
        self.databases = databases
        self.dbname, info = databases.take()
        self.settings = fast_settings(
            Settings(database_url=SecretStr(info)), max_attempts=MAX_ATTEMPTS
        )
        self.conn = db.connect(self.settings, autocommit=True)
        self.transport = PostgresTransport(self.settings)
        self.sweeper = Sweeper(self.settings, self.transport, "sweeper", AlertRecorder(["log"]))
        self.jobs: dict[uuid.UUID, JobModel] = {}
        self.runs: dict[uuid.UUID, RunModel] = {}
        self.held: list[Held] = []
        self.done_rows: dict[uuid.UUID, dict[str, Any]] = {}

    def teardown(self) -> None:
        try:
            self.transport.close()
            self.conn.close()
        finally:
            self.databases.drop(self.dbname)

    # -- reading the database --------------------------------------------------------

    def _snapshot(self) -> tuple[Any, ...]:
        """Everything a fenced or refused write must leave as it was (events aside)."""
        c = self.conn
        return (
            c.execute("SELECT * FROM engine_step_runs ORDER BY id").fetchall(),
            c.execute("SELECT * FROM engine_jobs ORDER BY id").fetchall(),
            c.execute("SELECT * FROM engine_dead_letters ORDER BY id").fetchall(),
            c.execute("SELECT count(*) AS n FROM engine_outbox").fetchone(),
        )

    def _unchanged(self, before: tuple[Any, ...], what: str) -> None:
        after = self._snapshot()
        assert after == before, f"{what} changed the database"

    # -- the model's view ------------------------------------------------------------

    def _current(self, h: Held) -> bool:
        run = self.runs[h.claimed.id]
        return run.status == "running" and run.token == h.claimed.token

    def _holding(self) -> list[Held]:
        """Claims whose token is current (stale ones are tried by ``stale_writes``)."""
        return [h for h in self.held if self._current(h)]

    def _stale(self) -> list[Held]:
        return [h for h in self.held if not self._current(h)]

    def _pick(self, data: st.DataObject, items: list[Any], label: str) -> Any:
        by_label = {i.label: i for i in items}
        return by_label[data.draw(st.sampled_from(sorted(by_label)), label=label)]

    def _alert_count(self) -> int:
        row = self.conn.execute("SELECT count(*) AS n FROM engine_alerts").fetchone()
        assert row is not None
        return int(row["n"])

    def _cancel_active_runs(self, job: JobModel) -> None:
        for r in self.runs.values():
            if r.job is job and r.status in RUN_ACTIVE:
                r.status, r.token, r.owner, r.expired = "cancelled", None, None, False

    def _learn_new_runs(
        self,
        job: JobModel,
        expected: set[tuple[str, str]],
        eager: tuple[Claimed, str] | None = None,
    ) -> None:
        """Add the step runs scheduling created to the model; they must be the expected ones."""
        rows = self.conn.execute(
            "SELECT id, step, fanout_key FROM engine_step_runs WHERE job_id = %s", (job.id,)
        ).fetchall()
        new = [r for r in rows if r["id"] not in self.runs]
        assert {(r["step"], r["fanout_key"]) for r in new} == expected, (
            f"{job.label}: scheduling created {sorted((r['step'], r['fanout_key']) for r in new)}"
            f", expected {sorted(expected)}"
        )
        flow = REGISTRY.get(job.flow)
        for r in new:
            label = f"{job.label}.{r['step']}" + (f"[{r['fanout_key']}]" if r["fanout_key"] else "")
            run = RunModel(
                id=r["id"],
                label=label,
                job=job,
                step=r["step"],
                key=r["fanout_key"],
                max_attempts=max_attempts_for(flow.steps[r["step"]], self.settings),
            )
            if eager is not None and eager[0].id == run.id:
                run.status, run.attempts = "running", 1
                run.token, run.owner = eager[0].token, eager[1]
            self.runs[run.id] = run
        assert eager is None or eager[0].id in {r["id"] for r in new}

    def _hold(self, claimed: Claimed, worker: str) -> Held:
        run = self.runs[claimed.id]
        h = Held(f"c{len(self.held) + 1}:{run.label}#{claimed.attempt}@{worker}", claimed, worker)
        self.held.append(h)
        return h

    # -- submit ----------------------------------------------------------------------

    def _submit(self, flow: str, n: int) -> None:
        result = submit(
            flow, {"n": n}, settings=self.settings, registry=REGISTRY, publisher=self.transport
        )
        same = [j for j in self.jobs.values() if (j.flow, j.n) == (flow, n) and j.status in ACTIVE]
        if same:
            # invariant 7: the active job with this fingerprint is returned
            assert not result.created and result.job_id == same[0].id
            return
        assert result.created and result.job_id not in self.jobs
        job = JobModel(result.job_id, f"J{len(self.jobs) + 1}", flow, n)
        self.jobs[job.id] = job
        note(f"{job.label} = {flow}(n={n})")
        self._learn_new_runs(job, {(s.name, "") for s in REGISTRY.get(flow).roots()})

    @initialize(flow=FLOWS, n=SIZES)
    def first_job(self, flow: str, n: int) -> None:
        self._submit(flow, n)

    @precondition(
        lambda self: sum(j.status in ACTIVE for j in self.jobs.values()) < MAX_ACTIVE_JOBS
    )
    @rule(flow=FLOWS, n=SIZES)
    def submit_job(self, flow: str, n: int) -> None:
        self._submit(flow, n)

    # -- claims ----------------------------------------------------------------------

    def _refusal_expected(self, run: RunModel, worker: str) -> str | None:
        """``None``: the claim must win; otherwise the reason it must be refused with."""
        version = REGISTRY.get(run.job.flow).version
        if run.job.status not in ACTIVE or run.status in FINISHED:
            return "finished"
        if run.status == "waiting":
            return "waiting"
        if run.status == "running" and not run.expired:
            return "held"
        if f"{run.job.flow}:{version}" not in WORKERS[worker]:
            return "not_runnable"
        if run.attempts >= run.max_attempts:
            return "exhausted"
        if run.status == "pending" and not run.due:
            return "not_due"
        return None

    def _claim(self, run: RunModel, worker: str) -> None:
        expected = self._refusal_expected(run, worker)
        event(f"claim: {expected or ('reclaimed' if run.status == 'running' else 'won')}")
        before = self._snapshot()
        message = StepMessage(job_id=run.job.id, step_run_id=run.id)
        result = claim(self.conn, message, worker, LEASE_S, WORKERS[worker])
        if expected is not None:
            refused = result.reason if isinstance(result, ClaimRefused) else result
            assert refused == expected, (
                f"claim of {run.label} by {worker}: {result}, not {expected}"
            )
            self._unchanged(before, f"a refused claim ({expected}) of {run.label}")
            return
        assert isinstance(result, Claimed), f"claim of {run.label} by {worker}: {result}"
        assert result.attempt == run.attempts + 1 <= run.max_attempts
        assert result.max_attempts == run.max_attempts
        assert result.reclaimed_from == (run.owner if run.status == "running" else None)
        assert result.token not in {h.claimed.token for h in self.held}, "a token came back"
        run.status, run.attempts, run.token, run.owner = (
            "running",
            result.attempt,
            result.token,
            worker,
        )
        run.expired = False
        if run.job.status == "pending":
            run.job.status = "running"
        note(f"claimed: {self._hold(result, worker).label}")

    def _deliverable(self) -> list[RunModel]:
        return [r for r in self.runs.values() if r.status == "pending" and r.job.status in ACTIVE]

    @precondition(lambda self: bool(self._deliverable()))
    @rule(data=st.data(), worker=st.sampled_from(sorted(WORKERS)))
    def deliver(self, data: st.DataObject, worker: str) -> None:
        """A message for a pending step run of an active job (due or backing off)."""
        self._claim(self._pick(data, self._deliverable(), "run"), worker)

    @rule(data=st.data(), worker=st.sampled_from(sorted(WORKERS)))
    def claim_step(self, data: st.DataObject, worker: str) -> None:
        """A delivery of any step run (pending, running, finished, of an ended job)."""
        self._claim(self._pick(data, list(self.runs.values()), "run"), worker)

    def _reclaimable(self) -> list[RunModel]:
        return [r for r in self.runs.values() if r.status == "running" and r.expired]

    @precondition(lambda self: bool(self._reclaimable()))
    @rule(data=st.data(), worker=st.sampled_from(sorted(WORKERS)))
    def reclaim(self, data: st.DataObject, worker: str) -> None:
        """A redelivery after the holder's lease expired (at the cap it must be refused)."""
        self._claim(self._pick(data, self._reclaimable(), "run"), worker)

    def _delivered_twice(self) -> list[RunModel]:
        return [
            r
            for r in self.runs.values()
            if (r.status == "running" and not r.expired) or r.status == "done"
        ]

    @precondition(lambda self: bool(self._delivered_twice()))
    @rule(data=st.data(), worker=st.sampled_from(sorted(WORKERS)))
    def duplicate_delivery(self, data: st.DataObject, worker: str) -> None:
        """A second copy of the message while the step run is held or done: refused, no effect."""
        run = self._pick(data, self._delivered_twice(), "run")
        assert self._refusal_expected(run, worker) in ("held", "finished")
        self._claim(run, worker)

    # -- time ------------------------------------------------------------------------

    def _running(self) -> list[RunModel]:
        return [r for r in self.runs.values() if r.status == "running" and not r.expired]

    @precondition(lambda self: bool(self._running()))
    @rule(data=st.data())
    def expire(self, data: st.DataObject) -> None:
        """The holder stopped renewing (killed, paused, partitioned) until its lease ran out."""
        self._expire(self._pick(data, self._running(), "run"))

    def _expire(self, run: RunModel) -> None:
        self.conn.execute(
            "UPDATE engine_step_runs SET lease_expires_at = clock_timestamp() - interval '1 s' "
            "WHERE id = %s",
            (run.id,),
        )
        run.expired = True

    @precondition(lambda self: bool(self._running()))
    @rule(data=st.data(), worker=st.sampled_from(sorted(WORKERS)))
    def holder_dies(self, data: st.DataObject, worker: str) -> None:
        """The holder is killed mid-step: its lease runs out and the message comes back."""
        run = self._pick(data, self._running(), "run")
        self._expire(run)
        self._claim(run, worker)

    def _backing_off(self) -> list[RunModel]:
        return [r for r in self.runs.values() if r.status == "pending" and not r.due]

    @precondition(lambda self: bool(self._backing_off()))
    @rule(data=st.data())
    def backoff_ends(self, data: st.DataObject) -> None:
        run = self._pick(data, self._backing_off(), "run")
        self.conn.execute(
            "UPDATE engine_step_runs SET available_at = clock_timestamp() - interval '1 s' "
            "WHERE id = %s",
            (run.id,),
        )
        run.due = True

    # -- the holder's writes, each fenced by its token -------------------------------

    def _renew(self, h: Held) -> bool:
        c = h.claimed
        return store.lease_extend_if_owner(self.conn, c.id, c.token, LEASE_S) is not None

    def _give_back(self, h: Held) -> bool:
        with self.conn.transaction():
            return store.lease_release_if_owner(self.conn, h.claimed.id, h.claimed.token)

    def _retry(self, h: Held, delay_s: float) -> bool:
        c = h.claimed
        error = {"type": "ValueError", "message": "planned failure", "attempt": c.attempt}
        with self.conn.transaction():
            due = store.step_retry_if_leased(self.conn, c, delay_s, error)
            if due is not None:
                store.outbox_insert_delayed(self.conn, c.id, due)
                store.step_event_insert(self.conn, EventKind.RETRIED, c, worker=h.worker)
        return due is not None

    def _dead_letter(self, h: Held) -> bool:
        """The runner's dead path: dead, a dead letter, the job failed, siblings cancelled."""
        c = h.claimed
        error = {"type": "Fail", "message": "planned permanent failure", "attempt": c.attempt}
        with self.conn.transaction():
            if not store.step_dead_if_leased(self.conn, c, error):
                return False
            reason = f"Fail: planned (attempt {c.attempt} of {c.max_attempts})"
            first = store.dead_letter_insert_step(
                self.conn, job_id=c.job_id, step_run_id=c.id, reason=reason, error=error
            )
            assert first, "a step run dead-lettered twice without a replay"
            store.step_event_insert(self.conn, EventKind.DEAD_LETTERED, c, worker=h.worker)
            store.job_finish_if_active_logged(
                self.conn,
                c.job_id,
                JobStatus.FAILED,
                event=EventKind.JOB_FAILED,
                worker=h.worker,
                error=f"step {c.step}: {reason}",
            )
            store.step_cancel_by_job(self.conn, c.job_id)
        return True

    def _wait(self, h: Held, deadline: bool) -> bool:
        """The runner's wait: the job row locked, then the step run parked under our token."""
        c = h.claimed
        with self.conn.transaction():
            parked = None
            if store.job_lock_if_active(self.conn, c.job_id):
                parked = store.step_wait_if_leased(
                    self.conn, c, signal=SIGNAL, timeout_s=600.0 if deadline else None, until=None
                )
            if parked is not None:
                if parked.status == "pending":
                    store.outbox_insert_many(self.conn, [c.id])
                store.step_event_insert(self.conn, EventKind.WAITING, c, worker=h.worker)
        return parked is not None

    def _cancel_by_step(self, h: Held) -> bool:
        with self.conn.transaction():
            return store.job_cancel_if_leased(self.conn, h.claimed, "the step cancelled its job")

    def _checkpoint(self, h: Held, eager: bool) -> tuple[bool, Claimed | None]:
        """The runner's checkpoint and scheduling, in one transaction; the eager successor."""
        c = h.claimed
        run = self.runs[c.id]
        flow = REGISTRY.get(run.job.flow)
        queued = None
        try:
            with self.conn.transaction():
                done = store.checkpoint_put_if_leased(
                    self.conn,
                    step_run_id=c.id,
                    job_id=c.job_id,
                    token=c.token,
                    output=output_for(run.job, run),
                    worker=h.worker,
                )
                if done is None:
                    raise _Fenced
                runs, complete = [], False
                if done.job_status in ACTIVE:
                    scheduled = schedule_ready(
                        self.conn, flow, c.job_id, c.params, self.settings, done.counts
                    )
                    runs, complete = scheduled.runs, scheduled.job_complete
                if complete:
                    store.job_finish_if_active_logged(
                        self.conn,
                        c.job_id,
                        JobStatus.DONE,
                        event=EventKind.JOB_DONE,
                        worker=h.worker,
                    )
                if eager and runs:
                    queued = store.step_run_insert_claimed(
                        self.conn,
                        runs[0],
                        job_id=c.job_id,
                        flow=c.flow,
                        params=c.params,
                        worker=h.worker,
                        lease_s=LEASE_S,
                    )
                    runs = runs[1:]
                store.step_run_insert_many_with_outbox(self.conn, c.job_id, runs)
        except _Fenced:
            return False, None
        return True, None if queued is None else queued.result()

    def _write(
        self,
        kind: str,
        h: Held,
        *,
        eager: bool = False,
        delay_s: float = 0.0,
        deadline: bool = False,
    ) -> None:
        """Do one fenced write; the model predicts whether it takes effect, and what it does."""
        run = self.runs[h.claimed.id]
        job = run.job
        current = self._current(h)
        takes = {
            "renew": current,
            "give_back": current,
            "complete": current,
            "retry": current and run.attempts < run.max_attempts,
            "dead_letter": current,
            "cancel_by_step": current and job.status in ACTIVE,
            "wait": current and job.status in ACTIVE,
        }[kind]
        before = self._snapshot()
        successor: Claimed | None = None
        if kind == "renew":
            ok = self._renew(h)
        elif kind == "give_back":
            ok = self._give_back(h)
        elif kind == "complete":
            ok, successor = self._checkpoint(h, eager)
        elif kind == "retry":
            ok = self._retry(h, delay_s)
        elif kind == "dead_letter":
            ok = self._dead_letter(h)
        elif kind == "wait":
            ok = self._wait(h, deadline)
        else:
            ok = self._cancel_by_step(h)
        what = f"{kind} with {h.label} ({'current' if current else 'stale'} token)"
        event(f"{kind}: {'took effect' if ok else 'changed nothing'}")
        assert ok == takes, f"{what}: took effect {ok}, expected {takes}"
        if not ok:
            self._unchanged(before, what)
            return
        if kind == "renew":
            run.expired = False
            return
        run.token, run.owner, run.expired = None, None, False
        if kind == "give_back":
            # the attempt comes back with the lease (invariant 14)
            run.status, run.attempts, run.due = "pending", run.attempts - 1, True
        elif kind == "retry":
            run.status, run.due = "pending", delay_s == 0
        elif kind == "wait":
            # the attempt comes back (invariant 14); a signal sent already: pending at once
            run.attempts -= 1
            run.wait_signal, run.deadline, run.deadline_passed = SIGNAL, deadline, False
            run.status, run.due = ("pending", True) if job.signalled else ("waiting", True)
        elif kind == "dead_letter":
            run.status = "dead"
            if job.status in ACTIVE:
                job.status = "failed"
            self._cancel_active_runs(job)
        elif kind == "cancel_by_step":
            run.status = "cancelled"
            job.status = "cancelled"
            self._cancel_active_runs(job)
        else:
            run.status = "done"
            expected, complete = expected_schedule(
                job, [r for r in self.runs.values() if r.job is job]
            )
            assert (successor is not None) == (eager and bool(expected))
            eager_claim = None if successor is None else (successor, h.worker)
            self._learn_new_runs(job, expected, eager_claim)
            if successor is not None:
                assert successor.attempt == 1 and successor.reclaimed_from is None
                note(f"eager successor claimed: {self._hold(successor, h.worker).label}")
            if complete:
                job.status = "done"
                event(f"job done: {job.flow}(n={job.n})")
            if successor is not None:
                event("eager successor")

    @precondition(lambda self: bool(self._holding()))
    @rule(data=st.data())
    def renew(self, data: st.DataObject) -> None:
        self._write("renew", self._pick(data, self._holding(), "claim"))

    @precondition(lambda self: bool(self._holding()))
    @rule(data=st.data())
    def give_back(self, data: st.DataObject) -> None:
        self._write("give_back", self._pick(data, self._holding(), "claim"))

    @precondition(lambda self: bool(self._holding()))
    @rule(data=st.data(), eager=st.booleans())
    def complete(self, data: st.DataObject, eager: bool) -> None:
        self._write("complete", self._pick(data, self._holding(), "claim"), eager=eager)

    @precondition(lambda self: bool(self._holding()))
    @rule(data=st.data(), delay_s=st.sampled_from([0.0, 600.0]))
    def retry(self, data: st.DataObject, delay_s: float) -> None:
        """A retry asked for by the step, at any attempt (at the cap the SQL must refuse it)."""
        self._write("retry", self._pick(data, self._holding(), "claim"), delay_s=delay_s)

    @precondition(lambda self: bool(self._holding()))
    @rule(data=st.data())
    def fail(self, data: st.DataObject) -> None:
        """The step raised: the runner retries under the cap and dead-letters at it."""
        h = self._pick(data, self._holding(), "claim")
        under_cap = h.claimed.attempt < h.claimed.max_attempts
        self._write("retry" if under_cap else "dead_letter", h)

    @precondition(lambda self: bool(self._deliverable()))
    @rule(data=st.data(), worker=st.sampled_from(["w1", "w2"]), eager=st.booleans())
    def work(self, data: st.DataObject, worker: str, eager: bool) -> None:
        """A worker takes a delivery and runs it to its checkpoint (the happy path)."""
        run = self._pick(data, self._deliverable(), "run")
        held = len(self.held)
        self._claim(run, worker)
        if len(self.held) > held:
            self._write("complete", self.held[held], eager=eager)

    @precondition(lambda self: bool(self._holding()))
    @rule(data=st.data())
    def dead_letter(self, data: st.DataObject) -> None:
        self._write("dead_letter", self._pick(data, self._holding(), "claim"))

    @precondition(lambda self: bool(self._holding()))
    @rule(data=st.data())
    def cancel_by_step(self, data: st.DataObject) -> None:
        self._write("cancel_by_step", self._pick(data, self._holding(), "claim"))

    @precondition(lambda self: bool(self._holding()))
    @rule(data=st.data(), deadline=st.booleans())
    def wait(self, data: st.DataObject, deadline: bool) -> None:
        """The step waits for SIGNAL (with a deadline or none): parked, its attempt back."""
        self._write("wait", self._pick(data, self._holding(), "claim"), deadline=deadline)

    @rule(data=st.data())
    def send_signal(self, data: st.DataObject) -> None:
        """SIGNAL to any job: recorded once, waking its waiters; refused for an ended job."""
        job = self._pick(data, list(self.jobs.values()), "job")
        before = self._snapshot()
        try:
            sent = signal(job.id, SIGNAL, settings=self.settings, publisher=self.transport)
        except BadInput:
            assert job.status not in ACTIVE, f"signal to active {job.label} refused"
            self._unchanged(before, f"a refused signal to {job.label}")
            return
        assert job.status in ACTIVE, f"{job.label} was {job.status}, yet signalled"
        assert sent.created == (not job.signalled)
        if not sent.created:
            self._unchanged(before, f"a second signal to {job.label}")
            return
        job.signalled = True
        woken = [
            r
            for r in self.runs.values()
            if r.job is job and r.status == "waiting" and r.wait_signal == SIGNAL
        ]
        assert sent.woken == len(woken)
        for r in woken:
            r.status, r.due = "pending", True
        event(f"signal woke {len(woken)}")

    def _waiting_with_deadline(self) -> list[RunModel]:
        return [
            r
            for r in self.runs.values()
            if r.status == "waiting" and r.deadline and not r.deadline_passed
        ]

    @precondition(lambda self: bool(self._waiting_with_deadline()))
    @rule(data=st.data())
    def deadline_passes(self, data: st.DataObject) -> None:
        run = self._pick(data, self._waiting_with_deadline(), "run")
        self.conn.execute(
            "UPDATE engine_step_runs SET wait_until = clock_timestamp() - interval '1 s' "
            "WHERE id = %s",
            (run.id,),
        )
        run.deadline_passed = True

    @precondition(lambda self: bool(self._stale()))
    @rule(data=st.data())
    def stale_writes(self, data: st.DataObject) -> None:
        """A zombie wakes up: every write it tries with its old token changes nothing."""
        h = self._pick(data, self._stale(), "stale claim")
        for kind in (
            "renew",
            "complete",
            "retry",
            "dead_letter",
            "give_back",
            "cancel_by_step",
            "wait",
        ):
            self._write(kind, h)

    # -- the operator and the sweeper ------------------------------------------------

    @rule(data=st.data())
    def cancel_job(self, data: st.DataObject) -> None:
        job = self._pick(data, list(self.jobs.values()), "job")
        before = self._snapshot()
        try:
            admin.cancel(self.settings, job.id)
        except BadInput:
            assert job.status not in ACTIVE, f"cancel of active {job.label} refused"
            self._unchanged(before, f"a refused cancel of {job.label}")
            return
        assert job.status in ACTIVE, f"{job.label} was {job.status}, yet cancelled"
        job.status = "cancelled"
        self._cancel_active_runs(job)

    @rule(data=st.data())
    def retry_job(self, data: st.DataObject) -> None:
        """``engine retry``: a failed or cancelled job resumes from its checkpoints."""
        job = self._pick(data, list(self.jobs.values()), "job")
        clash = any(
            j is not job and (j.flow, j.n) == (job.flow, job.n) and j.status in ACTIVE
            for j in self.jobs.values()
        )
        before = self._snapshot()
        try:
            reopened = admin.retry_job(self.settings, job.id, transport=self.transport)
        except BadInput:
            assert job.status not in ("failed", "cancelled") or clash, f"retry of {job.label}"
            self._unchanged(before, f"a refused retry of {job.label}")
            return
        assert job.status in ("failed", "cancelled") and not clash
        job.status = "running"
        back = [r for r in self.runs.values() if r.job is job and r.status in ("dead", "cancelled")]
        assert reopened.step_runs == len(back)
        event("job reopened")
        for r in back:
            r.status, r.due = "pending", True
            # a retry round: the step's own budget again, counted from here
            r.max_attempts = r.attempts + (r.max_attempts - r.attempt_base)
            r.attempt_base = r.attempts
            # a fresh wait (reopen clears the last one)
            r.wait_signal, r.deadline, r.deadline_passed = None, False, False

    @rule(sweepers=st.integers(1, 2))
    def sweep(self, sweepers: int) -> None:
        """A sweep round; with two sweepers, the second finds nothing left to do."""
        dead = [
            r
            for r in self.runs.values()
            if r.status == "running" and r.expired and r.attempts >= r.max_attempts
        ]
        for r in dead:
            r.status, r.token, r.owner, r.expired = "dead", None, None, False
        for r in dead:
            if r.job.status in ACTIVE:
                r.job.status = "failed"
                self._cancel_active_runs(r.job)
        # waits past their deadline are woken (jobs the dead letters above failed are not)
        woken = [
            r
            for r in self.runs.values()
            if r.status == "waiting" and r.deadline_passed and r.job.status in ACTIVE
        ]
        for r in woken:
            r.status, r.due = "pending", True
        event(f"sweep: {len(dead)} dead, {len(woken)} woken")
        alerts = self._alert_count()
        for i in range(sweepers):
            report = self.sweeper.sweep(self.conn)
            expected = len(dead) if i == 0 else 0
            assert report.dead == expected, f"sweep {i + 1}: {report}, expected {expected} dead"
            assert report.woken == (len(woken) if i == 0 else 0), f"sweep {i + 1}: {report}"
            assert report.cancelled == 0, f"sweep found step runs left under ended jobs: {report}"
        assert self._alert_count() - alerts == len(dead), "one alert per dead letter"
        # after a sweep: nothing active under an ended job, nothing expired at its cap
        left = self.conn.execute(
            "SELECT s.id FROM engine_step_runs AS s JOIN engine_jobs AS j ON j.id = s.job_id "
            "WHERE (j.status NOT IN ('pending', 'running')"
            "       AND s.status IN ('pending', 'running', 'waiting'))"
            "   OR (s.status = 'waiting' AND s.wait_until <= clock_timestamp())"
            "   OR (s.status = 'running' AND s.lease_expires_at <= clock_timestamp()"
            "       AND s.attempts >= s.max_attempts)"
        ).fetchall()
        assert left == [], f"left behind by the sweep: {left}"
        # invariant 9: whatever is claimable now has a message (for a reclaim, one
        # sent after its last claim), even an eager successor that never had one
        claimable = [
            r.id
            for r in self.runs.values()
            if r.job.status in ACTIVE
            and r.attempts < r.max_attempts
            and ((r.status == "pending" and r.due) or (r.status == "running" and r.expired))
        ]
        unannounced = self.conn.execute(
            "SELECT s.id FROM engine_step_runs AS s WHERE s.id = ANY (%s) AND NOT EXISTS ("
            "  SELECT 1 FROM engine_queue AS q"
            "  WHERE (q.body::jsonb ->> 'step_run_id')::uuid = s.id"
            "    AND (s.status <> 'running' OR q.created_at >= s.claimed_at))",
            (claimable,),
        ).fetchall()
        labels = sorted(self.runs[r["id"]].label for r in unannounced)
        assert labels == [], f"claimable but never announced after the sweep: {labels}"

    # -- invariants, checked against the database after every rule -------------------

    @invariant()
    def database_matches_model(self) -> None:
        rows = self.conn.execute(
            "SELECT *, lease_expires_at > clock_timestamp() AS lease_live, "
            "available_at <= clock_timestamp() AS is_due FROM engine_step_runs"
        ).fetchall()
        assert {r["id"] for r in rows} == set(self.runs), "step runs the model does not know"
        for row in rows:
            run = self.runs[row["id"]]
            state = (row["status"], row["attempts"], row["max_attempts"])
            assert state == (run.status, run.attempts, run.max_attempts), (
                f"{run.label}: (status, attempts, max_attempts) = {state}, model "
                f"{(run.status, run.attempts, run.max_attempts)}"
            )
            assert row["attempts"] <= row["max_attempts"]
            assert (row["lease_token"], row["lease_owner"]) == (run.token, run.owner), run.label
            if row["status"] == "pending":
                # nothing rests at its cap (invariant 13), and a retry is due when modelled so
                assert row["attempts"] < row["max_attempts"], f"{run.label} pending at its cap"
                assert row["is_due"] == run.due, run.label
            if row["status"] == "running":
                # one current token, the last claim's; its lease live unless aged
                assert row["lease_token"] is not None
                assert row["lease_live"] == (not run.expired), run.label
            if row["status"] == "waiting":
                # no lease, no attempt held, and what it waits for (invariant 13: "later")
                assert row["lease_token"] is None and row["wait_signal"] == run.wait_signal
                assert (row["wait_until"] is not None) == run.deadline, run.label
            if row["status"] == "done":
                full = {k: v for k, v in row.items() if k not in ("lease_live", "is_due")}
                frozen = self.done_rows.setdefault(run.id, full)
                assert full == frozen, f"{run.label} changed after it was done"
        for done_id in self.done_rows:
            assert self.runs[done_id].status == "done", "a done step run changed status"

    @invariant()
    def jobs_match_model(self) -> None:
        rows = self.conn.execute(
            "SELECT j.id, j.status, j.fingerprint, "
            "count(*) FILTER (WHERE s.status IN ('pending', 'running', 'waiting')) AS active_runs, "
            "count(*) FILTER (WHERE s.status = 'dead') AS dead_runs "
            "FROM engine_jobs AS j LEFT JOIN engine_step_runs AS s ON s.job_id = j.id "
            "GROUP BY j.id"
        ).fetchall()
        assert {r["id"] for r in rows} == set(self.jobs)
        active_fingerprints: list[str] = []
        for row in rows:
            job = self.jobs[row["id"]]
            assert row["status"] == job.status, f"{job.label}: {row['status']}, model {job.status}"
            if job.status in ACTIVE:
                active_fingerprints.append(row["fingerprint"])
                # nothing stranded: an active job has work some worker can still do
                assert row["active_runs"] > 0, f"{job.label} is {job.status} with nothing to run"
                assert row["dead_runs"] == 0, f"{job.label} is {job.status} with a dead step run"
            elif job.status in ("failed", "cancelled"):
                assert row["active_runs"] == 0, f"{job.label} ended with step runs left active"
        assert len(active_fingerprints) == len(set(active_fingerprints)), "two active jobs alike"

    @invariant()
    def dead_letters_match_model(self) -> None:
        rows = self.conn.execute(
            "SELECT step_run_id FROM engine_dead_letters "
            "WHERE source = 'step' AND replayed_at IS NULL"
        ).fetchall()
        open_letters = sorted(r["step_run_id"] for r in rows)
        dead = sorted(r.id for r in self.runs.values() if r.status == "dead")
        assert open_letters == dead, "every dead step run has one open dead letter, no other"


SETTINGS = hsettings(
    max_examples=EXAMPLES,
    stateful_step_count=STEPS,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def test_step_runs__any_sequence_of_claims_leases_and_faults_keeps_the_invariants(
    pg_admin: str, template_db: str
) -> None:
    databases = Databases(pg_admin, template_db)
    try:
        run_state_machine_as_test(lambda: StepRunMachine(databases), settings=SETTINGS)
    finally:
        databases.close()
