"""Inline SVG for the reports: the step graph, the timeline, duration charts.

Drawn in Python because layout is arithmetic; every piece of text goes
through :func:`_t` (XML escaping), so the result can be marked safe for the
templates. Colours are by status and outcome, with a legend in the page.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from html import escape

from markupsafe import Markup

from engine.reports.timeline import Attempt, WaitSpan
from engine.reports.views import GraphNode, IndexRow

__all__ = [
    "OUTCOME_COLOURS",
    "QUEUED_COLOUR",
    "STATUS_COLOURS",
    "WAITS_LANE",
    "durations_svg",
    "gantt_svg",
    "graph_svg",
]

WAITS_LANE = "waiting (no worker)"
"""The timeline's lane of waits: a parked step run holds no worker, lease or attempt."""

STATUS_COLOURS: dict[str, str] = {
    "done": "#2e7d32",
    "running": "#1565c0",
    "pending": "#8d8d8d",
    "waiting": "#00838f",
    "dead": "#c62828",
    "failed": "#c62828",
    "cancelled": "#ef6c00",
    "not_reached": "#d0d0d0",
}
OUTCOME_COLOURS: dict[str, str] = {
    "succeeded": "#2e7d32",
    "retried": "#f9a825",
    "dead_lettered": "#c62828",
    "rejected": "#ad1457",
    "fenced": "#6a1b9a",
    "released": "#78909c",
    "cancelled": "#ef6c00",
    "lost": "#5d4037",
    "running": "#1565c0",
}

QUEUED_COLOUR = "#607d8b"
"""A live attempt claimed and not started yet (a batch's step run waiting its turn): hollow."""

_NODE_W, _NODE_H, _COL_GAP, _ROW_GAP, _PAD = 170, 48, 70, 22, 16


def _t(text: object) -> str:
    """Text or attribute value, escaped for XML."""
    return escape(str(text), quote=True)


def _markup(parts: list[str]) -> Markup:
    """Close the SVG and mark it safe: every text in ``parts`` went through :func:`_t`."""
    return Markup("".join([*parts, "</svg>"]))  # noqa: S704


def _clip(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[: max(chars - 1, 1)] + "\u2026"


def _bar_text(x1: float, x2: float, y: float, text: str, ink: str) -> str:
    """A bar's label, clipped to the bar; nothing when fewer than 3 characters fit."""
    chars = int((x2 - x1 - 6) / 6.2)
    if chars < 3:
        return ""
    return (
        f'<text x="{x1 + 3:.1f}" y="{y + 13}" font-size="10" fill="{ink}">'
        f"{_t(_clip(text, chars))}</text>"
    )


def graph_svg(nodes: Sequence[GraphNode]) -> Markup:
    """The flow's DAG: one column per topological generation, edges left to right."""
    if not nodes:
        return Markup("")
    pos = {
        n.name: (
            _PAD + n.column * (_NODE_W + _COL_GAP),
            _PAD + n.row * (_NODE_H + _ROW_GAP),
        )
        for n in nodes
    }
    width = max(x for x, _ in pos.values()) + _NODE_W + _PAD
    height = max(y for _, y in pos.values()) + _NODE_H + _PAD
    parts = [
        f'<svg class="graph" role="img" '
        f'aria-label="step graph" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
        'fill="#555"/></marker></defs>',
    ]
    for n in nodes:
        for dep in n.after:
            if dep not in pos:
                continue
            x1, y1 = pos[dep][0] + _NODE_W, pos[dep][1] + _NODE_H / 2
            x2, y2 = pos[n.name][0], pos[n.name][1] + _NODE_H / 2
            mid = (x1 + x2) / 2
            parts.append(
                f'<path d="M{x1},{y1} C{mid},{y1} {mid},{y2} {x2 - 2},{y2}" fill="none" '
                f'stroke="#555" stroke-width="1.4" marker-end="url(#arrow)"/>'
            )
    for n in nodes:
        x, y = pos[n.name]
        colour = STATUS_COLOURS.get(n.status, "#8d8d8d")
        text_colour = "#222" if n.status == "not_reached" else "#fff"
        dash = ' stroke-dasharray="4 3"' if n.status == "not_reached" else ""
        if n.mapped:
            # fan-out: a shadow card behind the node, and the counts
            parts.append(
                f'<rect x="{x + 5}" y="{y + 5}" width="{_NODE_W}" height="{_NODE_H}" rx="6" '
                f'fill="{colour}" opacity="0.45"/>'
            )
            counts = f"\u00d7{n.runs} \u00b7 {n.done}/{n.runs} done"
        else:
            counts = n.status.replace("_", " ")
        parts.append(
            f'<g class="node"><title>{_t(n.name)}: {_t(n.status)}, {n.done}/{n.runs} '
            f"step run(s) done</title>"
            f'<rect x="{x}" y="{y}" width="{_NODE_W}" height="{_NODE_H}" rx="6" '
            f'fill="{colour}" stroke="#333" stroke-width="1"{dash}/>'
            f'<text x="{x + _NODE_W / 2}" y="{y + 20}" text-anchor="middle" '
            f'font-weight="bold" fill="{text_colour}">{_t(_clip(n.name, 22))}</text>'
            f'<text x="{x + _NODE_W / 2}" y="{y + 37}" text-anchor="middle" font-size="11" '
            f'fill="{text_colour}">{_t(counts)}</text></g>'
        )
    return _markup(parts)


def _fmt_offset(seconds: float, span: float) -> str:
    if span < 2:
        return f"+{seconds:.2f} s"
    if seconds >= 120:
        return f"+{seconds / 60:.1f} min"
    return f"+{seconds:.1f} s" if seconds < 10 else f"+{seconds:.0f} s"


def _stack(spans: Sequence[tuple[float, float]]) -> tuple[list[int], int]:
    """Greedy rows for overlapping (start, end) spans: each one's row, and how many rows."""
    ends: list[float] = []
    rows: list[int] = []
    for start, end in spans:
        row = next((i for i, e in enumerate(ends) if e <= start), len(ends))
        if row == len(ends):
            ends.append(end)
        else:
            ends[row] = end
        rows.append(row)
    return rows, len(ends)


def _started(a: Attempt) -> str:
    """What a bar's title says of the attempt's start: queued first, never started, unknown."""
    if a.outcome == "queued":
        return f"; queued on {a.worker} since its claim, not started yet"
    if not a.start_recorded:
        return "; drawn from its claim (its start was not recorded)"
    if not a.ran:
        return "; its step never started"
    queued = (a.start - a.claimed_at).total_seconds()
    return f"; queued on {a.worker} for {queued:.3f} s after its claim" if queued >= 0.001 else ""


def gantt_svg(
    attempts: Sequence[Attempt],
    lanes: Sequence[str],
    start: datetime,
    end: datetime,
    waits: Sequence[WaitSpan] = (),
) -> Markup:
    """The timeline: one lane per worker, one bar per attempt, coloured by outcome.

    A bar runs from when the attempt's step started running to when it stopped
    (:class:`~engine.reports.timeline.Attempt`); the time it was queued on its
    worker after its claim is not drawn, only told in the bar's title, but a
    live attempt still queued is drawn hollow (:data:`QUEUED_COLOUR`).
    Overlapping attempts of one worker (several slots) stack inside its lane.
    Reclaims are marked by a triangle at the bar's start, lease losses by a
    red tick, attempts with no end (running, or a worker that vanished) fade out.
    Waits are drawn as waits: hollow, dashed bars in a lane of their own
    (:data:`WAITS_LANE`), from the park to the wake, since no worker holds them.
    """
    if not attempts and not waits:
        return Markup("")
    label_w, chart_w, bar_h, sub_h, top = 170, 900, 18, 22, 26
    span = max((end - start).total_seconds(), 0.001)

    def x_of(at: datetime) -> float:
        return label_w + chart_w * min(max((at - start).total_seconds() / span, 0.0), 1.0)

    # greedy stacking of overlapping bars within each lane
    rows: dict[str, list[float]] = {lane: [] for lane in lanes}
    placed: list[tuple[Attempt, str, int]] = []
    for a in attempts:
        a_end = (a.stopped or end).timestamp()
        ends = rows.setdefault(a.worker, [])
        row = next((i for i, e in enumerate(ends) if e <= a.start.timestamp()), len(ends))
        if row == len(ends):
            ends.append(a_end)
        else:
            ends[row] = a_end
        placed.append((a, a.worker, row))
    wait_rows, wait_lanes = _stack(
        [(w.start.timestamp(), (w.end or end).timestamp()) for w in waits]
    )
    if waits:
        rows[WAITS_LANE] = [0.0] * wait_lanes  # only its height counts
    lane_y: dict[str, float] = {}
    y = float(top)
    for lane in rows:
        lane_y[lane] = y
        y += max(len(rows[lane]), 1) * sub_h + 10
    height = int(y) + 4
    width = label_w + chart_w + 20
    parts = [
        f'<svg class="gantt" role="img" '
        f'aria-label="timeline of step attempts per worker" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">'
    ]
    for i in range(6):
        x = label_w + chart_w * i / 5
        parts.append(
            f'<line x1="{x}" y1="{top - 6}" x2="{x}" y2="{height}" stroke="#ddd"/>'
            f'<text x="{x}" y="{top - 10}" font-size="10" text-anchor="middle" fill="#555">'
            f"{_t(_fmt_offset(span * i / 5, span))}</text>"
        )
    for lane, ly in lane_y.items():
        lane_h = max(len(rows[lane]), 1) * sub_h
        parts.append(
            f'<rect x="0" y="{ly - 3}" width="{width}" height="{lane_h + 4}" fill="#f6f6f6"/>'
            f'<text x="4" y="{ly + 13}" font-size="11" fill="#222"><title>{_t(lane)}</title>'
            f"{_t(_clip(lane, 26))}</text>"
        )
    for a, lane, row in placed:
        by = lane_y[lane] + row * sub_h
        x1 = x_of(a.start)
        x2 = max(x_of(a.stopped or end), x1 + 3)
        colour = OUTCOME_COLOURS.get(a.outcome, QUEUED_COLOUR)
        fade = ' fill-opacity="0.55"' if a.end is None else ""
        if a.outcome == "queued":  # claimed, waiting its turn on the worker: not running
            fade = f' fill-opacity="0.12" stroke="{colour}" stroke-dasharray="2 2"'
            colour = QUEUED_COLOUR
        title = (
            f"{a.label} attempt {a.attempt if a.attempt is not None else '?'} on {a.worker}: "
            f"{a.outcome}"
            + (f", reclaimed from {a.reclaimed_from}" if a.reclaimed_from else "")
            + (f", lease lost {len(a.lease_lost_at)}\u00d7" if a.lease_lost_at else "")
            + _started(a)
        )
        parts.append(
            f'<g class="bar"><title>{_t(title)}</title>'
            f'<rect x="{x1:.1f}" y="{by}" width="{x2 - x1:.1f}" height="{bar_h}" rx="3" '
            f'fill="{colour}"{fade}/>'
        )
        text = f"{a.label} #{a.attempt}" if a.attempt is not None else a.label
        ink = QUEUED_COLOUR if a.outcome == "queued" else "#fff"
        parts.append(_bar_text(x1, x2, by, text, ink))
        if a.reclaimed_from is not None:
            parts.append(
                f'<path d="M{x1:.1f},{by - 3} l6,0 l-3,6 z" fill="#000"><title>reclaimed from '
                f"{_t(a.reclaimed_from)}</title></path>"
            )
        for lost in a.lease_lost_at:
            lx = x_of(lost)
            parts.append(
                f'<line x1="{lx:.1f}" y1="{by - 3}" x2="{lx:.1f}" y2="{by + bar_h + 3}" '
                f'stroke="#c62828" stroke-width="3"><title>lease lost</title></line>'
            )
        parts.append("</g>")
    colour = STATUS_COLOURS["waiting"]
    for w, row in zip(waits, wait_rows, strict=True):
        by = lane_y[WAITS_LANE] + row * sub_h
        x1 = x_of(w.start)
        x2 = max(x_of(w.end or end), x1 + 3)
        title = f"{w.label} waiting for {w.what}: {w.outcome}"
        parts.append(
            f'<g class="wait"><title>{_t(title)}</title>'
            f'<rect x="{x1:.1f}" y="{by}" width="{x2 - x1:.1f}" height="{bar_h}" rx="3" '
            f'fill="{colour}" fill-opacity="0.15" stroke="{colour}" stroke-dasharray="4 3"/>'
        )
        parts.append(_bar_text(x1, x2, by, f"{w.label}: {w.what}", colour))
        parts.append("</g>")
    return _markup(parts)


def durations_svg(rows: Sequence[IndexRow], per_flow: int = 30) -> Markup:
    """Small bar charts: the recent durations of each flow's jobs, oldest to newest."""
    flows = sorted({r.flow for r in rows})
    if not flows:
        return Markup("")
    chart_w, chart_h, label_w, gap = 360, 46, 110, 14
    height = len(flows) * (chart_h + gap) + 6
    width = label_w + chart_w + 80
    parts = [
        f'<svg class="durations" role="img" '
        f'aria-label="recent durations per flow" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">'
    ]
    for i, flow in enumerate(flows):
        y0 = 4 + i * (chart_h + gap)
        recent = [r for r in rows if r.flow == flow and r.duration_s is not None][:per_flow]
        recent.reverse()
        top = max((r.duration_s or 0.0 for r in recent), default=0.0) or 1.0
        parts.append(
            f'<text x="0" y="{y0 + chart_h / 2 + 4}" font-size="12" fill="#222">'
            f"{_t(_clip(flow, 16))}</text>"
            f'<line x1="{label_w}" y1="{y0 + chart_h}" x2="{label_w + chart_w}" '
            f'y2="{y0 + chart_h}" stroke="#999"/>'
            f'<text x="{label_w + chart_w + 6}" y="{y0 + 10}" font-size="10" fill="#555">'
            f"max {top:.1f} s</text>"
        )
        bar_w = chart_w / per_flow
        for j, r in enumerate(recent):
            h = max((r.duration_s or 0.0) / top * chart_h, 1.0)
            colour = STATUS_COLOURS.get(r.status, "#8d8d8d")
            parts.append(
                f'<rect x="{label_w + j * bar_w + 1:.1f}" y="{y0 + chart_h - h:.1f}" '
                f'width="{bar_w - 2:.1f}" height="{h:.1f}" fill="{colour}">'
                f"<title>{_t(r.job_id)}: {r.duration_s or 0.0:.2f} s, {_t(r.status)}</title>"
                "</rect>"
            )
    return _markup(parts)
