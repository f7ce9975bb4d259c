"""The ERP's options of ``engine runs`` and the console's runs search: period, store, document.

The engine knows no flow's meaning (issue 37): it finds jobs by a flow's
searchable parameters, by the tags its steps give them and by fan-out keys
(:class:`engine.RunMatch`). These fields say what the ERP's words mean in
those terms, and the registry hands them to ``engine runs`` (``--period``,
``--store``, ``--document``) and to the console's runs form:

- a period: the parameter ``period`` as submitted (costing, posting, close,
  which declare it searchable);
- a store: the parameter ``store`` (a costing of one store), a costing's
  fan-out run of that store (``map_over`` keyed by store code), or the tag
  ``store`` a costing step gives the job for each store it costed;
- a document: the tag ``document`` a posting chunk gives the job for each
  document it posted or rejected.
"""

from __future__ import annotations

from engine import BadInput, RunMatch, SearchField
from flows.costing import STORE_TAG
from flows.erp.types import parse_period
from flows.posting import DOCUMENT_TAG

__all__ = ["search_fields"]

_MAX = 200  # as long as a tag's value may be


def _code(what: str, value: str) -> str:
    value = value.strip()
    if not value or len(value) > _MAX:
        raise BadInput(f"bad {what} {value[:40]!r}: 1 to {_MAX} characters")
    return value


def _period(value: str) -> RunMatch:
    return RunMatch(params=(("period", parse_period(value.strip())),))


def _store(value: str) -> RunMatch:
    code = _code("store", value)
    return RunMatch(params=(("store", code),), tags=((STORE_TAG, code),), keys=(code,))


def _document(value: str) -> RunMatch:
    return RunMatch(tags=((DOCUMENT_TAG, _code("document", value)),))


search_fields = [
    SearchField("period", "only jobs submitted for this period (YYYY-MM)", _period, "2026-11"),
    SearchField(
        "store",
        "only jobs for this store: a parameter, a fan-out key or a tag",
        _store,
        "ST001",
    ),
    SearchField(
        "document",
        "only the jobs that posted or rejected this document number",
        _document,
        "SI-000123",
    ),
]
"""What ``engine runs`` and the console's runs form add: ``period``, ``store``, ``document``."""
