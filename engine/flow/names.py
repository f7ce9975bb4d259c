"""Names a flow declares in a list (its signals, its searchable parameters): each of the
form its pattern allows, none twice, or a :class:`DefinitionError` that says which."""

from __future__ import annotations

import re
from collections.abc import Callable

from engine.errors import DefinitionError

__all__ = ["checked_names"]


def checked_names(
    names: tuple[str, ...],
    pattern: re.Pattern[str],
    *,
    invalid: Callable[[object], str],
    twice: str,
    flow: str,
) -> tuple[str, ...]:
    """``names`` when each is a string ``pattern`` matches whole and none is given twice;
    else :class:`DefinitionError` with ``invalid(name)`` or ``twice``."""
    for name in names:
        if not isinstance(name, str) or not pattern.fullmatch(name):
            raise DefinitionError(invalid(name), flow=flow)
    if len(set(names)) != len(names):
        raise DefinitionError(twice, flow=flow)
    return names
