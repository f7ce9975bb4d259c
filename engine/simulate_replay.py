"""The replay page of ``engine simulate``: what the workers did, drawn from the events.

The page is a *view* of the scratch database's rows plus the faults the
simulator injected (which the database cannot know: a SIGKILL leaves no
event). Every drawn element carries the replay time it appears at
(``data-t0``) and, when it goes away, ``data-t1``; ``reports/simulate.js``
shows and grows them as the replay clock advances. Without JavaScript the
page shows the final state. Every text goes through :func:`_t` (XML
escaping), so the SVG can be marked safe for the autoescaped template.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from html import escape
from pathlib import Path
from typing import Literal

from markupsafe import Markup
from pydantic import BaseModel
from sqlalchemy import Engine
from sqlmodel import Session, col, select

from engine.reports.render import environment, write_atomically
from engine.simulate_flow import STEPS
from engine.store.models import Event, EventKind, Job, StepRun

__all__ = ["Fault", "Oracle", "SimRecord", "render_replay"]

FaultKind = Literal["spawn", "kill", "duplicate", "resubmit", "stop"]

_W, _LABEL_W, _PAD, _LANE_H, _LANE_GAP, _AXIS_H, _TRACK_H = 1100, 96, 16, 22, 6, 22, 26
_CELL_W, _CELL_H, _GRID_LABEL_W = 92, 20, 56
_COLOURS = {
    "running": "#1565c0",
    "succeeded": "#2e7d32",
    "killed": "#c62828",
    "orphaned": "#c62828",
    "retried": "#f9a825",
    "fenced": "#6a1b9a",
    "lease_lost": "#6a1b9a",
    "released": "#78909c",
    "dead_lettered": "#c62828",
    "pending": "#d0d0d0",
    "duplicate": "#8e24aa",
    "spawn": "#2e7d32",
}
_ENDS: dict[EventKind, str] = {
    EventKind.SUCCEEDED: "succeeded",
    EventKind.RETRIED: "retried",
    EventKind.FENCED: "fenced",
    EventKind.LEASE_LOST: "lease_lost",
    EventKind.RELEASED: "released",
    EventKind.DEAD_LETTERED: "dead_lettered",
}
_LOG_LIMIT = 600


class Fault(BaseModel):
    """Something the simulator did to the system, stamped by the database clock."""

    at: datetime
    kind: FaultKind
    worker: str | None = None  # the worker process (``w3``), for spawn, kill and stop
    step_run_id: uuid.UUID | None = None
    detail: str = ""


class Oracle(BaseModel):
    """One oracle of RELIABILITY.md checked by SQL after the run."""

    name: str
    passed: bool
    detail: str


class SimRecord(BaseModel):
    """What the simulator hands to the page besides the database's rows."""

    seed: int
    workers: int
    concurrency: int
    jobs: int
    kill_rate: float
    dup_rate: float
    lease_s: float
    database: str
    faults: list[Fault]
    oracles: list[Oracle]
    timed_out: bool = False


class _Bar(BaseModel):
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


class _Mark(BaseModel):
    lane: str
    t: float
    kind: str
    title: str
    counted: bool = True  # a kill is marked on every slot of the process but counted once


class _LogLine(BaseModel):
    t: float
    text: str
    kind: str


def _t(text: object) -> str:
    """Text or attribute value, escaped for XML."""
    return escape(str(text), quote=True)


class _Replay:
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
        self.bars: list[_Bar] = []
        self.marks: list[_Mark] = []
        self.log: list[_LogLine] = []
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
            f"{p}/{i}" for p in procs for i in range(self.record.concurrency)
        }

        def key(lane: str) -> tuple[int, str]:
            proc = lane.split("/")[0]
            return (procs.index(proc) if proc in procs else len(procs), lane)

        return sorted(slots, key=key)

    def _build(self, events: list[Event]) -> None:
        kills = {f.worker: self._s(f.at) for f in self.record.faults if f.kind == "kill"}
        open_bars: dict[tuple[uuid.UUID, str], _Bar] = {}
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
                bar = _Bar(
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
                self.marks.append(_Mark(lane=lane, t=t, kind="refused", title=title))
                self._line(t, "refused", title)
            elif kind in (EventKind.JOB_DONE, EventKind.JOB_FAILED) and e.job_id is not None:
                self.job_ends[e.job_id] = (t, "done" if kind == EventKind.JOB_DONE else "failed")
                self._line(t, "job", f"job #{self.job_no.get(e.job_id, '?')} {kind.value[4:]}")
        for (step_run_id, lane), bar in open_bars.items():
            proc = lane.split("/")[0]
            if proc in kills:
                self._orphaned(step_run_id, bar, kills[proc], None)
        for f in self.record.faults:
            self._fault(f)
        self.log.sort(key=lambda line: line.t)

    def _killed(self, bar: _Bar, at: float) -> None:
        bar.t1, bar.outcome = at, "killed"
        bar.title += ": worker killed (SIGKILL) mid-step"

    def _orphaned(
        self, step_run_id: uuid.UUID, bar: _Bar, killed: float, reclaimed: float | None
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
        bar: _Bar | None,
        t: float,
        kills: dict[str | None, float],
    ) -> None:
        """Close the attempt whose lease a reclaim at ``t`` took over."""
        if bar is None:
            return
        proc = bar.lane.split("/")[0]
        if proc in kills and kills[proc] <= t:
            self._orphaned(step_run_id, bar, kills[proc], t)
        else:
            # its worker lived but stopped renewing: a zombie, fenced at its commit
            bar.t1, bar.outcome = t, "lease_lost"
            bar.title += ": lease expired and was taken over"

    def _fault(self, f: Fault) -> None:
        t = self._s(f.at)
        if f.kind == "kill" and f.worker:
            slots = [lane for lane in self.lanes if lane.split("/")[0] == f.worker]
            for i, lane in enumerate(slots):
                self.marks.append(
                    _Mark(lane=lane, t=t, kind="kill", title=f.detail, counted=i == 0)
                )
            self._line(t, "kill", f.detail)
        elif f.kind == "spawn" and f.worker:
            for lane in self.lanes:
                if lane.split("/")[0] == f.worker:
                    self.marks.append(_Mark(lane=lane, t=t, kind="spawn", title=f.detail))
            self._line(t, "spawn", f.detail)
        elif f.kind in ("duplicate", "resubmit"):
            self.marks.append(_Mark(lane="", t=t, kind=f.kind, title=f.detail))
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
        self.log.append(_LogLine(t=t, kind=kind, text=text))


# -- drawing ------------------------------------------------------------------------------


def _anim(t0: float, t1: float | None = None) -> str:
    """The replay-time attributes of an element (``simulate.js`` reads them)."""
    return f' data-t0="{t0:.3f}"' + (f' data-t1="{t1:.3f}"' if t1 is not None else "")


def _tick_step(duration: float) -> float:
    for step in (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300):
        if duration / step <= 14:
            return step
    return 600.0


def _lanes_svg(r: _Replay) -> Markup:
    tw = _W - _LABEL_W - 2 * _PAD
    scale = tw / r.duration

    def x(t: float) -> float:
        return _LABEL_W + _PAD + t * scale

    top = _AXIS_H + _TRACK_H
    lane_y = {lane: top + i * (_LANE_H + _LANE_GAP) for i, lane in enumerate(r.lanes)}
    height = top + len(r.lanes) * (_LANE_H + _LANE_GAP) + _PAD
    parts = [
        f'<svg class="lanes" id="lanes" role="img" aria-label="worker lanes" width="{_W}" '
        f'height="{height}" viewBox="0 0 {_W} {height}" data-duration="{r.duration:.3f}">',
        '<defs><pattern id="orphan" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><rect width="6" height="6" fill="#fde0e0"/>'
        '<line x1="0" y1="0" x2="0" y2="6" stroke="#c62828" stroke-width="2"/></pattern>'
        '<pattern id="dots" width="5" height="2" patternUnits="userSpaceOnUse">'
        '<rect width="2" height="2" fill="#c62828"/></pattern></defs>',
    ]
    step = _tick_step(r.duration)
    tick = 0.0
    while tick <= r.duration:
        parts.append(
            f'<line x1="{x(tick):.1f}" y1="{_AXIS_H - 4}" x2="{x(tick):.1f}" y2="{height - _PAD}" '
            'stroke="#eee"/>'
            f'<text x="{x(tick):.1f}" y="{_AXIS_H - 8}" text-anchor="middle" fill="#5f6368">'
            f"{_t(f'{tick:g} s')}</text>"
        )
        tick += step
    parts.append(
        f'<text x="{_PAD}" y="{_AXIS_H + 17}" fill="#5f6368">{_t("faults")}</text>'
        f'<text x="{_PAD}" y="{_AXIS_H - 8}" fill="#5f6368">{_t("time")}</text>'
    )
    for lane, y in lane_y.items():
        parts.append(
            f'<text class="lane-label" x="{_PAD}" y="{y + 15}">{_t(lane)}</text>'
            f'<rect x="{_LABEL_W + _PAD}" y="{y}" width="{tw}" height="{_LANE_H}" fill="#f6f6f6"/>'
        )
    for bar in r.bars:
        if bar.lane not in lane_y:
            continue
        y, x0 = lane_y[bar.lane], x(bar.t0)
        end = bar.t1 if bar.t1 is not None else r.duration
        width = max(2.0, x(end) - x0)
        colour = _COLOURS.get(bar.outcome, "#1565c0")
        # a reclaimed attempt is outlined: it resumed someone else's step run
        stroke = ' stroke="#ef6c00" stroke-width="2"' if bar.reclaimed else ""
        parts.append(
            f'<g class="bar {_t(bar.outcome)}"{_anim(bar.t0)}><title>{_t(bar.title)}</title>'
            f'<rect class="grow" x="{x0:.1f}" y="{y + 2}" width="{width:.1f}" '
            f'height="{_LANE_H - 4}" rx="3" fill="{colour}" data-w="{width:.1f}"'
            f"{_anim(bar.t0, end)}{stroke}/>"
        )
        if width > 46:
            parts.append(
                f'<text x="{x0 + 4:.1f}" y="{y + 15}" fill="#fff" class="barlabel"'
                f"{_anim(bar.t0 + (end - bar.t0) * 0.5)}>{_t(bar.label)}</text>"
            )
        parts.append("</g>")
        if bar.waiting_until is not None and bar.orphan_until is not None:
            xa, xb = x(bar.orphan_until), x(bar.waiting_until)
            parts.append(
                f'<g class="waiting"{_anim(bar.orphan_until)}><title>'
                f"{_t(f'{bar.label}: lease expired, claimable; waiting for a free worker')}"
                f'</title><rect class="grow" x="{xa:.1f}" y="{y + _LANE_H / 2 - 1}" '
                f'width="{xb - xa:.1f}" height="2" fill="url(#dots)" data-w="{xb - xa:.1f}"'
                f"{_anim(bar.orphan_until, bar.waiting_until)}/></g>"
            )
        if bar.orphan_until is not None and bar.t1 is not None:
            ow = max(2.0, x(bar.orphan_until) - x(bar.t1))
            parts.append(
                f'<g class="orphan"{_anim(bar.t1)}><title>'
                f"{_t(f'{bar.label}: the dead worker still holds the lease until it expires')}"
                f'</title><rect class="grow" x="{x(bar.t1):.1f}" y="{y + 6}" width="{ow:.1f}" '
                f'height="{_LANE_H - 12}" fill="url(#orphan)" data-w="{ow:.1f}"'
                f"{_anim(bar.t1, bar.orphan_until)}/></g>"
            )
    for mark in r.marks:
        parts.append(_mark_svg(mark, x(mark.t), lane_y.get(mark.lane, _AXIS_H)))
    parts.append(
        f'<line id="cursor" x1="{x(r.duration):.1f}" y1="{_AXIS_H - 4}" x2="{x(r.duration):.1f}" '
        f'y2="{height - _PAD}" stroke="#0b57d0" stroke-width="1.5" data-x0="{x(0):.1f}" '
        f'data-scale="{scale:.4f}"/>'
    )
    return Markup("".join([*parts, "</svg>"]))  # noqa: S704  every text went through _t


def _mark_svg(mark: _Mark, x: float, y: float) -> str:
    title = f"<title>{_t(mark.title)}</title>"
    anim = _anim(mark.t)
    count = ' data-count="kill"' if mark.counted else ""
    if mark.kind == "kill":
        return (
            f'<g class="mark kill"{count}{anim}>{title}'
            f'<line x1="{x:.1f}" y1="{y - 2}" x2="{x:.1f}" y2="{y + _LANE_H + 2}" '
            f'stroke="#c62828" stroke-width="2"/>'
            f'<path d="M{x - 6:.1f},{y + 5} l12,12 m0,-12 l-12,12" stroke="#c62828" '
            'stroke-width="3"/></g>'
        )
    if mark.kind == "spawn":
        return (
            f'<g class="mark spawn"{anim}>{title}<path d="M{x:.1f},{y + 4} l8,7 l-8,7 z" '
            f'fill="{_COLOURS["spawn"]}"/></g>'
        )
    if mark.kind == "refused":
        return (
            f'<g class="mark refused" data-count="refused"{anim}>{title}'
            f'<circle cx="{x:.1f}" cy="{y + _LANE_H / 2}" r="5" fill="#fff" stroke="#8e24aa" '
            f'stroke-width="2"/><path d="M{x - 3:.1f},{y + _LANE_H / 2 - 3} l6,6 m0,-6 l-6,6" '
            'stroke="#8e24aa" stroke-width="1.5"/></g>'
        )
    # duplicate deliveries and submits sent by the simulator: the faults track
    shape = "l6,10 l-12,0 z" if mark.kind == "duplicate" else "l6,6 l-6,6 l-6,-6 z"
    colour = "#8e24aa" if mark.kind == "duplicate" else "#ef6c00"
    return (
        f'<g class="mark {mark.kind}" data-count="{mark.kind}"{anim}>{title}'
        f'<path d="M{x:.1f},{y + 7} {shape}" fill="{colour}" opacity="0.85"/></g>'
    )


def _grid_svg(r: _Replay) -> Markup:
    steps = list(STEPS)
    width = _GRID_LABEL_W + len(steps) * (_CELL_W + 4) + 70
    height = 22 + len(r.job_order) * (_CELL_H + 4)
    parts = [
        f'<svg class="grid" role="img" aria-label="jobs and their steps" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}">'
    ]
    for i, name in enumerate(steps):
        parts.append(f'<text x="{_GRID_LABEL_W + i * (_CELL_W + 4)}" y="14">{_t(name)}</text>')
    for row, job in enumerate(r.job_order):
        y = 20 + row * (_CELL_H + 4)
        parts.append(f'<text x="0" y="{y + 14}">{_t(f"job #{r.job_no[job.id]}")}</text>')
        for i, name in enumerate(steps):
            x = _GRID_LABEL_W + i * (_CELL_W + 4)
            what = f"#{r.job_no[job.id]} {name}"
            parts.append(
                f'<rect x="{x}" y="{y}" width="{_CELL_W}" height="{_CELL_H}" rx="3" '
                f'fill="{_COLOURS["pending"]}"><title>{_t(what)}</title></rect>'
            )
            for t0, t1, state in r.cells.get((job.id, name), []):
                fill = "url(#orphan-cell)" if state == "orphaned" else _COLOURS.get(state, "#999")
                parts.append(
                    f'<rect x="{x}" y="{y}" width="{_CELL_W}" height="{_CELL_H}" rx="3" '
                    f'fill="{fill}"{_anim(t0, t1)}><title>{_t(f"{what}: {state}")}</title></rect>'
                )
        if job.id in r.job_ends:
            t, status = r.job_ends[job.id]
            mark = "\u2713 done" if status == "done" else "\u2717 failed"
            parts.append(
                f'<text x="{_GRID_LABEL_W + len(steps) * (_CELL_W + 4) + 4}" y="{y + 14}" '
                f'class="{"ok" if status == "done" else "bad"}" data-count="job-{status}"'
                f"{_anim(t)}>{_t(mark)}</text>"
            )
    parts.insert(
        1,
        '<defs><pattern id="orphan-cell" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><rect width="6" height="6" fill="#fde0e0"/>'
        '<line x1="0" y1="0" x2="0" y2="6" stroke="#c62828" stroke-width="2"/></pattern></defs>',
    )
    return Markup("".join([*parts, "</svg>"]))  # noqa: S704  every text went through _t


# -- the page -------------------------------------------------------------------------------


def _load(engine: Engine) -> tuple[list[Job], list[StepRun], list[Event]]:
    with Session(engine) as session:
        jobs = list(session.exec(select(Job)).all())
        runs = list(session.exec(select(StepRun)).all())
        events = list(
            session.exec(
                select(Event).where(col(Event.kind) != EventKind.PUBLISHED).order_by(col(Event.id))
            ).all()
        )
    return jobs, runs, events


def render_replay_html(
    record: SimRecord, jobs: list[Job], runs: list[StepRun], events: list[Event]
) -> str:
    """The replay page as one self-contained HTML document."""
    replay = _Replay(record, jobs, runs, events)
    counts = {
        kind: sum(1 for f in record.faults if f.kind == kind) for kind in ("kill", "duplicate")
    }
    return (
        environment()
        .get_template("simulate.html.j2")
        .render(
            rec=record,
            replay=replay,
            lanes=_lanes_svg(replay),
            grid=_grid_svg(replay),
            log=replay.log[-_LOG_LIMIT:],
            log_cut=max(0, len(replay.log) - _LOG_LIMIT),
            anim=_anim,
            kills=counts["kill"],
            colours=_COLOURS,
            passed=all(o.passed for o in record.oracles),
        )
    )


def render_replay(engine: Engine, record: SimRecord, out_dir: Path) -> Path:
    """Render ``<out_dir>/simulate-<seed>.html`` from the scratch database; its path."""
    html = render_replay_html(record, *_load(engine))
    return write_atomically(out_dir / f"simulate-{record.seed}.html", html)


def oracle_lines(oracles: Sequence[Oracle]) -> list[str]:
    """The oracles as console lines: ``oracle <name> .... pass  <detail>``."""
    width = max((len(o.name) for o in oracles), default=0) + 4
    return [
        f"oracle {o.name} {'.' * (width - len(o.name))} {verdict}  {o.detail}"
        for o, verdict in ((o, "pass" if o.passed else "FAIL") for o in oracles)
    ]
