"""The timeline of a simulation: the events and faults as lanes, bars, marks and a log.

One lane per worker slot (``w1/0``); one bar per attempt, from its claim to
its end, or to its worker's kill, after which the dead worker's lease runs
out before another worker can reclaim the step run. Times are seconds since
the run's first moment, as the page's replay clock counts them.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from pydantic import BaseModel

from engine.simulate.record import Fault, SimRecord
from engine.store.leases import lease_owner, worker_of
from engine.store.models import Event, EventKind, Job, StepRun

__all__ = ["Bar", "LogLine", "Mark", "Timeline"]

_ENDS: dict[EventKind, str] = {
    EventKind.SUCCEEDED: "succeeded",
    EventKind.RETRIED: "retried",
    EventKind.FENCED: "fenced",
    EventKind.LEASE_LOST: "lease_lost",
    EventKind.RELEASED: "released",
    EventKind.DEAD_LETTERED: "dead_lettered",
    EventKind.REJECTED: "rejected",
}


class Bar(BaseModel):
    lane: str
    t0: float
    t1: float | None
    label: str
    title: str
    outcome: str
    reclaimed: bool
    expires: float | None = None  # the lease's end by the last renewal
    orphan_until: float | None = None  # a dead worker's lease: from t1 until it expired
    waiting_until: float | None = None  # expired and claimable until another worker claimed it


class Mark(BaseModel):
    lane: str
    t: float
    kind: str
    title: str
    counted: bool = True  # a kill is marked on every slot of the process but counted once


class LogLine(BaseModel):
    t: float
    text: str
    kind: str


class Timeline:
    """The timeline of one simulation, in seconds since its first moment."""

    def __init__(
        self, record: SimRecord, jobs: list[Job], runs: list[StepRun], events: list[Event]
    ):
        self.record = record
        moments = [e.at for e in events] + [f.at for f in record.faults]
        self.origin = min(moments) if moments else datetime.now().astimezone()
        self.duration = max(0.5, max((self._s(m) for m in moments), default=0.0) + 0.3)
        self.job_no = {j.id: int(j.params.get("n", 0)) for j in jobs}
        self.job_order = sorted(jobs, key=lambda j: (self.job_no[j.id], str(j.id)))
        self.runs = {r.id: r for r in runs}
        self.lanes = self._lanes(events)
        self.bars: list[Bar] = []
        self.marks: list[Mark] = []
        self.log: list[LogLine] = []
        self.cells: dict[tuple[uuid.UUID, str], list[tuple[float, float | None, str]]] = {}
        self.job_ends: dict[uuid.UUID, tuple[float, str]] = {}
        self._build(events)

    def _s(self, at: datetime) -> float:
        return (at - self.origin).total_seconds()

    def _what(self, step_run_id: uuid.UUID | None) -> str:
        run = self.runs.get(step_run_id) if step_run_id is not None else None
        if run is None:
            return "?"
        return f"#{self.job_no.get(run.job_id, '?')} {run.step}"

    def _lanes(self, events: list[Event]) -> list[str]:
        procs = [f.worker for f in self.record.faults if f.kind == "spawn" and f.worker]
        slots = {e.worker for e in events if e.worker} | {
            lease_owner(p, i) for p in procs for i in range(self.record.concurrency)
        }

        def key(lane: str) -> tuple[int, str]:
            proc = worker_of(lane)
            return (procs.index(proc) if proc in procs else len(procs), lane)

        return sorted(slots, key=key)

    def _build(self, events: list[Event]) -> None:
        kills = {f.worker: self._s(f.at) for f in self.record.faults if f.kind == "kill"}
        open_bars: dict[tuple[uuid.UUID, str], Bar] = {}
        for e in events:
            t, kind, lane = self._s(e.at), EventKind(e.kind), e.worker or ""
            what = self._what(e.step_run_id)
            if kind in (EventKind.CLAIMED, EventKind.RECLAIMED) and e.step_run_id is not None:
                reclaimed = kind == EventKind.RECLAIMED
                came_from = str(e.detail.get("from") or "?")
                if reclaimed:
                    self._lease_expired(
                        e.step_run_id, open_bars.pop((e.step_run_id, came_from), None), t, kills
                    )
                bar = Bar(
                    lane=lane,
                    t0=t,
                    t1=None,
                    label=what,
                    title=f"{what} attempt {e.attempt} on {lane}"
                    + (f", reclaimed from {came_from}" if reclaimed else ""),
                    outcome="running",
                    reclaimed=reclaimed,
                    expires=t + self.record.lease_s,
                )
                self.bars.append(bar)
                open_bars[(e.step_run_id, lane)] = bar
                self._cell(e.step_run_id, t, "running")
                note = f" (lease of {came_from} expired; resumes from the checkpoints)"
                self._line(
                    t,
                    "reclaim" if reclaimed else "claim",
                    f"{lane} {bar.title.split(' on ')[0]}" + (note if reclaimed else ""),
                )
            elif kind == EventKind.RENEWED and e.step_run_id is not None:
                renewed = open_bars.get((e.step_run_id, lane))
                expires_at = e.detail.get("expires_at")
                if renewed is not None and isinstance(expires_at, str):
                    renewed.expires = self._s(datetime.fromisoformat(expires_at))
            elif kind in _ENDS and e.step_run_id is not None:
                bar_or_none = open_bars.pop((e.step_run_id, lane), None)
                if bar_or_none is not None:
                    bar_or_none.t1, bar_or_none.outcome = t, _ENDS[kind]
                    bar_or_none.title += f": {_ENDS[kind]}"
                self._cell(
                    e.step_run_id, t, "succeeded" if kind == EventKind.SUCCEEDED else "pending"
                )
                self._line(t, _ENDS[kind], f"{lane} {what} attempt {e.attempt}: {kind.value}")
            elif kind == EventKind.CLAIM_REFUSED:
                reason = str(e.detail.get("reason", "?"))
                title = f"duplicate delivery of {what} ignored by {lane}: {reason}"
                self.marks.append(Mark(lane=lane, t=t, kind="refused", title=title))
                self._line(t, "refused", title)
            elif kind in (EventKind.JOB_DONE, EventKind.JOB_FAILED) and e.job_id is not None:
                self.job_ends[e.job_id] = (t, "done" if kind == EventKind.JOB_DONE else "failed")
                self._line(t, "job", f"job #{self.job_no.get(e.job_id, '?')} {kind.value[4:]}")
        for (step_run_id, lane), bar in open_bars.items():
            proc = worker_of(lane)
            if proc in kills:
                self._orphaned(step_run_id, bar, kills[proc], None)
        for f in self.record.faults:
            self._fault(f)
        self.log.sort(key=lambda line: line.t)

    def _killed(self, bar: Bar, at: float) -> None:
        bar.t1, bar.outcome = at, "killed"
        bar.title += ": worker killed (SIGKILL) mid-step"

    def _orphaned(
        self, step_run_id: uuid.UUID, bar: Bar, killed: float, reclaimed: float | None
    ) -> None:
        """The attempt's worker was killed: its lease runs out, then the step run waits."""
        self._killed(bar, killed)
        self._cell(step_run_id, killed, "orphaned")
        expires = max(killed, bar.expires if bar.expires is not None else killed)
        if reclaimed is not None:
            expires = min(expires, reclaimed)
        bar.orphan_until = expires
        if expires < self.duration:
            self._cell(step_run_id, expires, "pending")
            self._line(expires, "expire", f"lease of {bar.label} ({bar.lane}) expired: claimable")
        if reclaimed is not None and reclaimed > expires:
            bar.waiting_until = reclaimed

    def _lease_expired(
        self,
        step_run_id: uuid.UUID,
        bar: Bar | None,
        t: float,
        kills: dict[str | None, float],
    ) -> None:
        """Close the attempt whose lease a reclaim at ``t`` took over."""
        if bar is None:
            return
        proc = worker_of(bar.lane)
        if proc in kills and kills[proc] <= t:
            self._orphaned(step_run_id, bar, kills[proc], t)
        else:
            # its worker lived but stopped renewing: a zombie, fenced at its commit
            bar.t1, bar.outcome = t, "lease_lost"
            bar.title += ": lease expired and was taken over"

    def _fault(self, f: Fault) -> None:
        t = self._s(f.at)
        if f.kind == "kill" and f.worker:
            slots = [lane for lane in self.lanes if worker_of(lane) == f.worker]
            for i, lane in enumerate(slots):
                self.marks.append(Mark(lane=lane, t=t, kind="kill", title=f.detail, counted=i == 0))
            self._line(t, "kill", f.detail)
        elif f.kind == "spawn" and f.worker:
            for lane in self.lanes:
                if worker_of(lane) == f.worker:
                    self.marks.append(Mark(lane=lane, t=t, kind="spawn", title=f.detail))
            self._line(t, "spawn", f.detail)
        elif f.kind in ("duplicate", "resubmit"):
            self.marks.append(Mark(lane="", t=t, kind=f.kind, title=f.detail))
            self._line(t, f.kind, f.detail)

    def _cell(self, step_run_id: uuid.UUID, t: float, state: str) -> None:
        run = self.runs.get(step_run_id)
        if run is None:
            return
        layers = self.cells.setdefault((run.job_id, run.step), [])
        if layers and layers[-1][1] is None:
            layers[-1] = (layers[-1][0], t, layers[-1][2])
        layers.append((t, None, state))

    def _line(self, t: float, kind: str, text: str) -> None:
        self.log.append(LogLine(t=t, kind=kind, text=text))
