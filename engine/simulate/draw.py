"""The replay page's two drawings, as SVG: worker lanes over time, and the jobs' steps.

Every drawn element carries the replay time it appears at (``data-t0``) and,
when it goes away, ``data-t1``; ``reports/simulate.js`` shows and grows them
as the replay clock advances, and without JavaScript the page shows the
final state. Every text goes through :func:`_t` (XML escaping), so the SVG
can be marked safe for the autoescaped template.
"""

from __future__ import annotations

from html import escape

from markupsafe import Markup

from engine.simulate.flow import STEPS
from engine.simulate.timeline import Mark, Timeline

__all__ = ["COLOURS", "anim", "grid_svg", "lanes_svg"]

_W, _LABEL_W, _PAD, _LANE_H, _LANE_GAP, _AXIS_H, _TRACK_H = 1100, 96, 16, 22, 6, 22, 26
_CELL_W, _CELL_H, _GRID_LABEL_W = 92, 20, 56
COLOURS = {
    "running": "#1565c0",
    "succeeded": "#2e7d32",
    "killed": "#c62828",
    "orphaned": "#c62828",
    "retried": "#f9a825",
    "fenced": "#6a1b9a",
    "lease_lost": "#6a1b9a",
    "released": "#78909c",
    "dead_lettered": "#c62828",
    "rejected": "#ad1457",
    "pending": "#d0d0d0",
    "duplicate": "#8e24aa",
    "spawn": "#2e7d32",
}


def _t(text: object) -> str:
    """Text or attribute value, escaped for XML."""
    return escape(str(text), quote=True)


def anim(t0: float, t1: float | None = None) -> str:
    """The replay-time attributes of an element (``simulate.js`` reads them)."""
    return f' data-t0="{t0:.3f}"' + (f' data-t1="{t1:.3f}"' if t1 is not None else "")


def _tick_step(duration: float) -> float:
    for step in (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300):
        if duration / step <= 14:
            return step
    return 600.0


def lanes_svg(r: Timeline) -> Markup:
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
        colour = COLOURS.get(bar.outcome, "#1565c0")
        # a reclaimed attempt is outlined: it resumed someone else's step run
        stroke = ' stroke="#ef6c00" stroke-width="2"' if bar.reclaimed else ""
        parts.append(
            f'<g class="bar {_t(bar.outcome)}"{anim(bar.t0)}><title>{_t(bar.title)}</title>'
            f'<rect class="grow" x="{x0:.1f}" y="{y + 2}" width="{width:.1f}" '
            f'height="{_LANE_H - 4}" rx="3" fill="{colour}" data-w="{width:.1f}"'
            f"{anim(bar.t0, end)}{stroke}/>"
        )
        if width > 46:
            parts.append(
                f'<text x="{x0 + 4:.1f}" y="{y + 15}" fill="#fff" class="barlabel"'
                f"{anim(bar.t0 + (end - bar.t0) * 0.5)}>{_t(bar.label)}</text>"
            )
        parts.append("</g>")
        if bar.waiting_until is not None and bar.orphan_until is not None:
            xa, xb = x(bar.orphan_until), x(bar.waiting_until)
            parts.append(
                f'<g class="waiting"{anim(bar.orphan_until)}><title>'
                f"{_t(f'{bar.label}: lease expired, claimable; waiting for a free worker')}"
                f'</title><rect class="grow" x="{xa:.1f}" y="{y + _LANE_H / 2 - 1}" '
                f'width="{xb - xa:.1f}" height="2" fill="url(#dots)" data-w="{xb - xa:.1f}"'
                f"{anim(bar.orphan_until, bar.waiting_until)}/></g>"
            )
        if bar.orphan_until is not None and bar.t1 is not None:
            ow = max(2.0, x(bar.orphan_until) - x(bar.t1))
            parts.append(
                f'<g class="orphan"{anim(bar.t1)}><title>'
                f"{_t(f'{bar.label}: the dead worker still holds the lease until it expires')}"
                f'</title><rect class="grow" x="{x(bar.t1):.1f}" y="{y + 6}" width="{ow:.1f}" '
                f'height="{_LANE_H - 12}" fill="url(#orphan)" data-w="{ow:.1f}"'
                f"{anim(bar.t1, bar.orphan_until)}/></g>"
            )
    for mark in r.marks:
        parts.append(_mark_svg(mark, x(mark.t), lane_y.get(mark.lane, _AXIS_H)))
    parts.append(
        f'<line id="cursor" x1="{x(r.duration):.1f}" y1="{_AXIS_H - 4}" x2="{x(r.duration):.1f}" '
        f'y2="{height - _PAD}" stroke="#0b57d0" stroke-width="1.5" data-x0="{x(0):.1f}" '
        f'data-scale="{scale:.4f}"/>'
    )
    return Markup("".join([*parts, "</svg>"]))  # noqa: S704  every text went through _t


def _mark_svg(mark: Mark, x: float, y: float) -> str:
    title = f"<title>{_t(mark.title)}</title>"
    shown = anim(mark.t)
    count = ' data-count="kill"' if mark.counted else ""
    if mark.kind == "kill":
        return (
            f'<g class="mark kill"{count}{shown}>{title}'
            f'<line x1="{x:.1f}" y1="{y - 2}" x2="{x:.1f}" y2="{y + _LANE_H + 2}" '
            f'stroke="#c62828" stroke-width="2"/>'
            f'<path d="M{x - 6:.1f},{y + 5} l12,12 m0,-12 l-12,12" stroke="#c62828" '
            'stroke-width="3"/></g>'
        )
    if mark.kind == "spawn":
        return (
            f'<g class="mark spawn"{shown}>{title}<path d="M{x:.1f},{y + 4} l8,7 l-8,7 z" '
            f'fill="{COLOURS["spawn"]}"/></g>'
        )
    if mark.kind == "refused":
        return (
            f'<g class="mark refused" data-count="refused"{shown}>{title}'
            f'<circle cx="{x:.1f}" cy="{y + _LANE_H / 2}" r="5" fill="#fff" stroke="#8e24aa" '
            f'stroke-width="2"/><path d="M{x - 3:.1f},{y + _LANE_H / 2 - 3} l6,6 m0,-6 l-6,6" '
            'stroke="#8e24aa" stroke-width="1.5"/></g>'
        )
    # duplicate deliveries and submits sent by the simulator: the faults track
    shape = "l6,10 l-12,0 z" if mark.kind == "duplicate" else "l6,6 l-6,6 l-6,-6 z"
    colour = "#8e24aa" if mark.kind == "duplicate" else "#ef6c00"
    return (
        f'<g class="mark {mark.kind}" data-count="{mark.kind}"{shown}>{title}'
        f'<path d="M{x:.1f},{y + 7} {shape}" fill="{colour}" opacity="0.85"/></g>'
    )


def grid_svg(r: Timeline) -> Markup:
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
                f'fill="{COLOURS["pending"]}"><title>{_t(what)}</title></rect>'
            )
            for t0, t1, state in r.cells.get((job.id, name), []):
                fill = "url(#orphan-cell)" if state == "orphaned" else COLOURS.get(state, "#999")
                parts.append(
                    f'<rect x="{x}" y="{y}" width="{_CELL_W}" height="{_CELL_H}" rx="3" '
                    f'fill="{fill}"{anim(t0, t1)}><title>{_t(f"{what}: {state}")}</title></rect>'
                )
        if job.id in r.job_ends:
            t, status = r.job_ends[job.id]
            mark = "\u2713 done" if status == "done" else "\u2717 failed"
            parts.append(
                f'<text x="{_GRID_LABEL_W + len(steps) * (_CELL_W + 4) + 4}" y="{y + 14}" '
                f'class="{"ok" if status == "done" else "bad"}" data-count="job-{status}"'
                f"{anim(t)}>{_t(mark)}</text>"
            )
    parts.insert(
        1,
        '<defs><pattern id="orphan-cell" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><rect width="6" height="6" fill="#fde0e0"/>'
        '<line x1="0" y1="0" x2="0" y2="6" stroke="#c62828" stroke-width="2"/></pattern></defs>',
    )
    return Markup("".join([*parts, "</svg>"]))  # noqa: S704  every text went through _t
