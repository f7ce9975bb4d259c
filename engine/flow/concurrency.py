"""Concurrency keys: at most ``limit`` step runs (or jobs) at a time per key.

A flow declares ``Concurrency("period:{period}", limit=1)``; a step may
declare its own, which replaces the flow's for that step. The template names
fields of the flow's parameters model, and for a mapped step (``map_over``)
also fields of the mapped item (``"store:{code}"`` for a ``StoreRef`` item);
a name both provide is ambiguous. Anything else in braces (``{}``,
``{a.b}``, ``{a!r}``, ``{a:>4}``) is refused. Checked when the flow is
loaded: each problem a :class:`~engine.errors.DefinitionError` naming the
field and what would be valid.

The key is rendered once, when the step run is created, from the job's
parameters as stored (JSON) and the item, and stored with the limit on the
step run's row, so the claim statement enforces it alone (see
``engine_concurrency_slot_free`` in ``migrations/0014_concurrency_waits_children.sql``):
a step run whose key has ``limit`` holders is not claimed, costs no attempt,
and is announced again when a holder finishes. Keys are shared across
flows: two flows declaring ``period:{period}`` exclude each other for the
same period.

A holder is a step run running with a live lease, or one parked waiting (a
signal, a sleep, its children) until it is claimed again, ends or is
cancelled: a waiting run has no lease, so it holds its slot by status (and
keeps it while woken and not yet claimed), since the work it holds the key
for is not finished. A child job inherits its ancestors' slots: the holders
of a key do not count against a step run when they belong to its job's
parent, grandparent, ... (``engine_jobs.parent_job_id``), so a close job
holding ``period:P`` runs the posting and costing of P as its children
while every other job of P waits. Siblings do count against each other.

``per_job=True`` makes the step runs of one job share one slot: the limit
then counts jobs, so a job's fan-out runs in parallel while no step run of
another job with the same key runs beside it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from engine.errors import DefinitionError
from engine.flow.template import template_fields

__all__ = ["Concurrency"]

_MAX_KEY = 200  # rendered keys are compared and indexed: keep them short


@dataclass(frozen=True)
class Concurrency:
    """A concurrency key template over the job's parameters, and its limit."""

    key: str
    limit: int = 1
    per_job: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key.strip():
            raise DefinitionError(
                f"concurrency key must be a non-empty template, got {self.key!r}; "
                "e.g. 'period:{period}'"
            )
        if isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1:
            raise DefinitionError(
                f"concurrency limit must be an integer >= 1, got {self.limit!r} (key {self.key!r})"
            )
        self.fields()  # a malformed template fails at declaration

    def fields(self) -> tuple[str, ...]:
        """The field names the template uses, in order."""
        return template_fields(self.key, f"concurrency key {self.key!r}", "{period}")

    def check(self, params: type[BaseModel], item: type[BaseModel] | None) -> None:
        """Raise :class:`DefinitionError` naming a field no model provides, or two do."""
        from_params = set(params.model_fields)
        from_item = set(item.model_fields) if item is not None else set()
        for name in self.fields():
            if name in from_params and name in from_item:
                raise DefinitionError(
                    f"concurrency key {self.key!r}: field {name!r} is ambiguous: both the "
                    f"parameters ({params.__name__}) and the mapped item "
                    f"({item.__name__ if item else ''}) have it"
                )
            if name not in from_params and name not in from_item:
                valid = sorted(from_params | from_item)
                where = f"the parameters ({params.__name__})"
                if item is not None:
                    where += f" or the mapped item ({item.__name__})"
                raise DefinitionError(
                    f"concurrency key {self.key!r}: unknown field {name!r}: not a field of "
                    f"{where}; valid fields: {', '.join(valid) or 'none'}"
                )

    def render(self, params: Mapping[str, Any], item: Any = None) -> str:
        """The key of one step run, from the job's parameters and its item (JSON)."""
        values = {**(item if isinstance(item, Mapping) else {}), **params}
        rendered = self.key.format_map({n: _text(values.get(n)) for n in self.fields()})
        return rendered[:_MAX_KEY]


def _text(value: Any) -> str:
    # JSON values as a person would write them in a key: 2026-11, ST001, 4, "" for null
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
