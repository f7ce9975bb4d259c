"""A flow described for people (``engine flows show NAME``).

Its parameters as ``engine submit`` takes them, its signals, approvals,
concurrency key and admission check, then each step with its output, its
fan-out, its own key and where each of its inputs comes from, and the edges.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import TYPE_CHECKING

from engine.flow.concurrency import Concurrency
from engine.flow.step import type_name

if TYPE_CHECKING:
    from engine.flow.flow import Flow

__all__ = ["describe", "describe_concurrency"]


def describe(flow: Flow, own: Mapping[str, Concurrency | None]) -> str:
    """Human text for ``engine flows show NAME``: parameters, steps and edges.

    ``own`` is each step's own concurrency key, as declared (none: the flow's).
    """
    lines = [f"flow {flow.name} (version {flow.version})"]
    if flow.description:
        lines.append(f"  {flow.description}")
    lines.append(f"parameters ({type_name(flow.params)}):")
    for pname, info in flow.params.model_fields.items():
        default = "required" if info.is_required() else f"default {info.get_default()!r}"
        about = f"  {info.description}" if info.description else ""
        lines.append(
            f"  --{pname.replace('_', '-')}: {type_name(info.annotation)}, {default}{about}"
        )
    if flow.signals:
        lines.append(f"signals: {', '.join(flow.signals)}")
    if flow.approvals:
        lines.append(
            f"approvals: {', '.join(flow.approvals)} (not by the submitter; a reason needed)"
        )
    if flow.concurrency is not None:
        lines.append(f"concurrency: {describe_concurrency(flow.concurrency)}")
    if flow.admission is not None:
        doc = (inspect.getdoc(flow.admission) or "").split("\n", 1)[0]
        lines.append(f"admission: {getattr(flow.admission, '__name__', '?')}  {doc}".rstrip())
    lines.append("steps:")
    for step in flow.steps.values():
        fanout = f", one run per item of {str(step.map_over)!r}" if step.map_over else ""
        if step.label is not None:
            fanout += f", labelled {step.label.template!r}"
        lines.append(f"  {step.name} -> {type_name(step.output)}{fanout}")
        key = own.get(step.name)
        if key is not None:
            lines.append(f"    concurrency: {describe_concurrency(key)}")
        for pname, si in step.inputs.items():
            source = {
                "params": "parameters",
                "upstream": f"step {si.step}",
                "gather": f"all runs of step {si.step}",
                "item": f"one item of {step.map_over}",
                "context": "runtime",
            }[si.kind]
            lines.append(f"    {pname}: {type_name(si.annotation)} <- {source}")
    lines.append("edges:")
    lines += [f"  {u} -> {v}" for u, v in flow.graph.edges] or ["  (none)"]
    return "\n".join(lines)


def describe_concurrency(c: Concurrency) -> str:
    """A key in one line: its template, its limit, what holds it."""
    held = "per job" if c.per_job else "per step run"
    return f"key {c.key!r}, limit {c.limit} ({held})"
