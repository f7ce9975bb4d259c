"""The signals a flow declares: their names, the ones its steps wait for, its approvals.

A flow receives only the signals it declares (``Flow(signals=...)``), and a
step may wait only for those: a literal name a step's source passes to
``wait_for_signal`` is checked when the step is declared
(:func:`signals_waited_for`), any other at the wait. ``approvals`` name
declared signals that are approvals (:mod:`engine.waits.approvals`).
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from collections.abc import Callable, Sequence
from typing import Any

from engine.errors import DefinitionError
from engine.flow.names import checked_names

__all__ = [
    "SIGNAL_NAME",
    "check_approvals",
    "check_signals",
    "declared_signals",
    "signals_waited_for",
]

SIGNAL_NAME = re.compile(r"^[a-z][a-z0-9_.-]{0,62}$")
"""A signal's name: what ``engine_signals.name`` and ``Flow(signals=...)`` accept."""


def declared_signals(signals: Sequence[str] | None) -> str:
    """``valid signals: 'approve'`` or ``it declares no signals``, for messages."""
    return _declared_signals(signals or ())


def _declared_signals(signals: Sequence[str]) -> str:
    if not signals:
        return "it declares no signals"
    return "valid signals: " + ", ".join(map(repr, signals))


def signals_waited_for(fn: Callable[..., Any]) -> list[str]:
    """The names ``fn`` passes to ``.wait_for_signal(...)`` that are known without running it.

    A string literal, or a module constant holding one (``APPROVAL_SIGNAL``);
    a name computed at run time is checked at the wait instead (the step
    context raises :class:`DefinitionError` there). A function whose source
    cannot be read is not checked here.
    """
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return []
    found: list[str] = []
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "wait_for_signal"
        ):
            continue
        arg = node.args[0] if node.args else None
        if arg is None:
            arg = next((k.value for k in node.keywords if k.arg == "name"), None)
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            found.append(arg.value)
        elif isinstance(arg, ast.Name):
            value = getattr(fn, "__globals__", {}).get(arg.id)
            if isinstance(value, str):
                found.append(value)
    return found


def check_signals(flow: str, signals: Sequence[str]) -> tuple[str, ...]:
    """The signals a flow declares, checked: valid names, none twice."""
    if isinstance(signals, str):
        signals = (signals,)
    names = tuple(signals)
    return checked_names(
        names,
        SIGNAL_NAME,
        invalid=lambda name: (
            f"invalid signal name {name!r} in signals: expected a lowercase "
            "letter, then up to 62 lowercase letters, digits, '_', '.' or '-' (e.g. 'approve')"
        ),
        twice=f"signals {names!r} names one twice",
        flow=flow,
    )


def check_approvals(flow: str, approvals: Sequence[str], signals: Sequence[str]) -> tuple[str, ...]:
    """The approvals a flow declares: each one of its declared signals, none twice."""
    names = (approvals,) if isinstance(approvals, str) else tuple(approvals)
    for name in names:
        if name not in signals:
            raise DefinitionError(
                f"approval {name!r} is not a declared signal: approvals name signals the flow "
                f"declares ({_declared_signals(signals)})",
                flow=flow,
            )
    if len(set(names)) != len(names):
        raise DefinitionError(f"approvals {names!r} names one twice", flow=flow)
    return names
