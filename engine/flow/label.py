"""Labels: how people read a fan-out's step runs (``cost_store[ST001]``, not ``cost_store[0]``).

A mapped step (``map_over``) runs once per item; its step runs are keyed by
the item's position in the list (``fanout_key``: ``0``, ``1``, ...), which is
what the engine stores and compares. ``label="{code}"`` on the step names
fields of the mapped item whose values a person knows the item by; the
status command and the run report render it from the item stored with the
step run (``engine_step_runs.item``), when they show it. Nothing is stored:
a label changes no fingerprint, no key and no flow version, and a step run
whose flow is not loaded where it is shown keeps its position.

The template names fields of the item in braces (``"{brand}/{code}"``);
anything else in braces is refused, and a field the item does not have is a
:class:`~engine.errors.DefinitionError` when the flow is loaded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from engine.errors import DefinitionError
from engine.flow.template import template_fields

__all__ = ["Label"]

_MAX_LABEL = 120  # a label is shown in tables and bars: keep it short


@dataclass(frozen=True)
class Label:
    """A template over the fields of a fan-out's item."""

    template: str

    def __post_init__(self) -> None:
        if not isinstance(self.template, str) or not self.template.strip():
            raise DefinitionError(
                f"label must be a non-empty template, got {self.template!r}; e.g. '{{code}}'"
            )
        if not self.fields():
            raise DefinitionError(
                f"label {self.template!r} names no field of the item; e.g. '{{code}}'"
            )

    def fields(self) -> tuple[str, ...]:
        """The field names the template uses, in order."""
        return template_fields(self.template, f"label {self.template!r}", "{code}")

    def check(self, item: type[BaseModel]) -> None:
        """Raise :class:`DefinitionError` naming a field the item does not have."""
        for name in self.fields():
            if name not in item.model_fields:
                valid = ", ".join(sorted(item.model_fields)) or "none"
                raise DefinitionError(
                    f"label {self.template!r}: unknown field {name!r}: not a field of the "
                    f"mapped item ({item.__name__}); valid fields: {valid}"
                )

    def render(self, item: Any) -> str:
        """The label of one step run from its item (JSON); ``""`` when the item has none."""
        if not isinstance(item, Mapping):
            return ""
        values = {n: item.get(n) for n in self.fields()}
        if all(v is None or v == "" for v in values.values()):
            return ""
        text = self.template.format_map({n: "" if v is None else v for n, v in values.items()})
        return text[:_MAX_LABEL]
