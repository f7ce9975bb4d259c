"""Searching runs: the console's runs page and ``engine runs``, newest first, a page at a time.

A :class:`RunQuery` names what to find: a job id or a unique prefix of one
(else the text is matched as any tag's value or a fan-out's key, or a flow's
name), a flow, a state (``waiting`` derived as everywhere: active, a step run
waiting and none pending or running), and *matches*: a searchable parameter
as submitted (``params``), a tag a step gave its job (``tags``,
:meth:`engine.StepContext.tag`), or any of several of these and fan-out keys
(:class:`RunMatch`). The engine gives no parameter or tag a meaning: a flow
declares which of its parameters are searchable (``Flow(searchable=...)``),
and :mod:`engine.jobs.submit` tags them (``param.NAME``) in the submit's
transaction, so every match is a lookup of one index, whatever the flow. A
domain package adds its own options (``engine runs --NAME``) as
:class:`SearchField`, each a value turned into a :class:`RunMatch`.

:func:`search_runs` answers one page, newest first by ``(created_at, id)``;
:attr:`RunPage.next_before` is an opaque cursor for the page after it
(keyset paging: a page costs the same however deep, and a job submitted
meanwhile neither repeats nor hides one). Every filter is an equality an
index answers, never a scan of all jobs.

:func:`parse_run_query` reads one from a web form or a query string; a bad
value is :class:`~engine.errors.BadInput` naming it and what is valid.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg

from engine import store
from engine.errors import BadInput
from engine.infra.json_fields import json_fields
from engine.jobs.lookup import job_id_or_prefix
from engine.store.status import wait_text

__all__ = [
    "MAX_LIMIT",
    "PARAM_TAG",
    "STATES",
    "RunMatch",
    "RunPage",
    "RunQuery",
    "RunRow",
    "SearchField",
    "encode_cursor",
    "parse_pair",
    "parse_run_query",
    "search_filters",
    "search_runs",
]

STATES = ("pending", "running", "waiting", "done", "failed", "cancelled")
"""The states a search may ask for: a job's status, or ``waiting`` (derived)."""

MAX_LIMIT = 200
"""Rows a page may ask for at most."""

PARAM_TAG = "param."
"""The tag of a searchable parameter ``NAME`` is ``param.NAME`` (written at submit)."""

_FLOW = re.compile(r"[a-z][a-z0-9_-]*")
_NAME = re.compile(r"[a-z][a-z0-9_.-]{0,62}")  # a tag's name (engine_job_tags' CHECK)
_MAX_VALUE = 200  # as long as a tag's value may be
_FIELDS = ("text", "flow", "status", "before", "limit")

Pair = tuple[str, str]


@dataclass(frozen=True)
class RunMatch:
    """A job matches when it has any of these: a searchable parameter, a tag, a fan-out key.

    ``params`` and ``tags`` are ``(name, value)`` pairs; ``keys`` are fan-out
    keys (a step's run per item). A domain's option that finds a thing
    however a job names it is ``RunMatch(params=(("x", v),), tags=(("x", v),),
    keys=(v,))``.
    """

    params: tuple[Pair, ...] = ()
    tags: tuple[Pair, ...] = ()
    keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class SearchField:
    """A search option a domain package adds to ``engine runs`` and the console's runs form.

    A module the registry loads may export ``search_fields``, a list of these:
    ``engine runs --NAME VALUE`` and the form's field ``NAME`` call
    ``match(VALUE)``, which returns the :class:`RunMatch` it means or raises
    :class:`~engine.errors.BadInput` naming the bad value.
    """

    name: str
    help: str
    match: Callable[[str], RunMatch]
    placeholder: str = ""


@dataclass(frozen=True)
class RunQuery:
    """What to search for; every filter given must hold (``None``, ``""``, ``()``: any)."""

    text: str = ""  # a job id or unique id prefix, else any tag's value, a fan-out key or a flow
    flow: str | None = None
    status: str | None = None  # one of STATES; waiting is derived
    params: tuple[Pair, ...] = ()  # searchable parameters as submitted, each must hold
    tags: tuple[Pair, ...] = ()  # tags some step gave the job, each must hold
    matches: tuple[RunMatch, ...] = ()  # each must hold (one of its alternatives)
    before: str | None = None  # the cursor of the previous page (RunPage.next_before)
    limit: int = 50  # 1..MAX_LIMIT

    def next_page(self, before: str) -> RunQuery:
        """The same search, from the cursor ``before`` on."""
        return dataclasses.replace(self, before=before)


@dataclass(frozen=True)
class RunRow:
    """One job as the runs page lists it."""

    job_id: uuid.UUID
    flow: str
    status: str  # the state people read: waiting derived, else the job's status
    waiting_for: list[str]  # what it waits for (each wait once), empty unless waiting
    params: dict[str, Any]
    submitted_by: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    duration_s: float | None  # started to finished (to now while it runs); None before it starts
    parent_id: uuid.UUID | None  # the job whose step submitted it, when a child job
    error: str | None
    stored_status: str = ""  # the status column itself (running for a waiting job)

    def as_json(self) -> dict[str, Any]:
        """JSON-ready: ids as strings, times in ISO 8601 (the stored status is not shown)."""
        return json_fields(self, omit=("stored_status",))


@dataclass(frozen=True)
class RunPage:
    """One page of a search, newest first; ``next_before`` is ``None`` on the last page."""

    rows: list[RunRow]
    next_before: str | None
    query: RunQuery = field(default_factory=RunQuery)

    @property
    def next_query(self) -> RunQuery | None:
        """The query of the next page, or ``None`` on the last one."""
        return None if self.next_before is None else self.query.next_page(self.next_before)


def parse_run_query(values: Mapping[str, str], fields: Sequence[SearchField] = ()) -> RunQuery:
    """A query from a web form's or query string's values (names as :class:`RunQuery`'s fields,
    or a :class:`SearchField`'s name).

    Empty values and names that are neither (a CSRF token, a button) are
    ignored; every given value is checked as :func:`search_runs` checks it,
    and ``limit`` must be a whole number. A bad one is
    :class:`~engine.errors.BadInput` naming it and what is valid.
    """
    given = {k: v.strip() for k, v in values.items() if v and v.strip()}
    limit = 50
    if "limit" in given:
        try:
            limit = int(given["limit"])
        except ValueError:
            raise BadInput(
                f"bad limit {values['limit']!r}: a whole number of rows, 1 to {MAX_LIMIT}"
            ) from None
    plain = {k: v for k, v in given.items() if k in _FIELDS and k != "limit"}
    matches = tuple(f.match(given[f.name]) for f in fields if f.name in given)
    query = RunQuery(
        text=plain.get("text", ""),
        flow=plain.get("flow"),
        status=plain.get("status"),
        matches=matches,
        before=plain.get("before"),
        limit=limit,
    )
    search_filters(query)  # the same checks as a search's
    return query


def parse_pair(what: str, text: str) -> Pair:
    """``NAME=VALUE`` as ``(name, value)``; :class:`BadInput` naming it when it is not one."""
    name, sep, value = text.partition("=")
    name, value = name.strip(), value.strip()
    if not sep or not _NAME.fullmatch(name) or not value or len(value) > _MAX_VALUE:
        raise BadInput(
            f"bad {what} {text[:60]!r}: NAME=VALUE, a name of lower-case letters, digits, "
            f"'_', '.' and '-' starting with a letter, a value of 1 to {_MAX_VALUE} characters "
            "(e.g. region=north)"
        )
    return name, value


def search_runs(conn: psycopg.Connection[Any], query: RunQuery) -> RunPage:
    """One page of the jobs ``query`` finds, newest first, and the cursor of the next page.

    Reads only, in ``conn``'s transaction (the caller's, or autocommit). A bad
    value of ``query`` is :class:`~engine.errors.BadInput` naming it.
    """
    filters = search_filters(query, conn)
    rows = store.job_search(conn, filters, limit=query.limit + 1)
    more = len(rows) > query.limit
    shown = [_row(r) for r in rows[: query.limit]]
    after = encode_cursor(shown[-1].created_at, shown[-1].job_id) if more and shown else None
    return RunPage(shown, after, query)


def search_filters(query: RunQuery, conn: psycopg.Connection[Any] | None = None) -> dict[str, Any]:
    """``job_search``'s parameters for ``query`` (``None``: no filter, the limit aside);
    bad values refused (an EXPLAIN of a search, in the bench, binds the same).

    With ``conn``, text that names a flow some job has is a search by that flow
    (its jobs are many: no set of them is built, the flow's index is walked).
    """
    if not isinstance(query.limit, int) or not 1 <= query.limit <= MAX_LIMIT:
        raise BadInput(f"bad limit {query.limit!r}: a whole number of rows, 1 to {MAX_LIMIT}")
    filters: dict[str, Any] = {
        "before_at": None,
        "before_id": None,
        "job_id": None,
        "id_low": None,
        "id_high": None,
        "flow": None,
        "statuses": None,
        "waiting": None,
        "text": None,
        "matches": None,
    }
    if query.before:
        filters["before_at"], filters["before_id"] = decode_cursor(query.before)
    text = (query.text or "").strip()
    if text:
        try:
            named = job_id_or_prefix(text)
        except BadInput:
            filters["text"] = _key("text", text)
        else:
            if isinstance(named, uuid.UUID):
                filters["job_id"] = named
            else:  # the ids a prefix covers are one range of the primary key
                filters["id_low"] = uuid.UUID(named.ljust(32, "0"))
                filters["id_high"] = uuid.UUID(named.ljust(32, "f"))
    if query.flow:
        if not _FLOW.fullmatch(query.flow):
            raise BadInput(
                f"bad flow {query.flow!r}: a flow's name is lower-case letters, digits, "
                "'_' and '-', starting with a letter (e.g. posting)"
            )
        filters["flow"] = query.flow
    if query.status:
        filters.update(_status(query.status))
    matches = [RunMatch(params=(p,)) for p in query.params]
    matches += [RunMatch(tags=(t,)) for t in query.tags]
    matches += query.matches
    if matches:
        filters["matches"] = [_alternatives(m) for m in matches]
    text = filters["text"]
    if (
        conn is not None
        and text is not None
        and _FLOW.fullmatch(text)
        and filters["flow"] in (None, text)
        and store.job_flow_exists(conn, text)
    ):
        filters.update(flow=text, text=None)
    return filters


def _status(status: str) -> dict[str, Any]:
    """The statuses stored and the waiting condition of a state people ask for."""
    if status not in STATES:
        raise BadInput(f"bad status {status!r}: one of {', '.join(STATES)}")
    if status == "waiting":
        return {"statuses": ["pending", "running"], "waiting": True}
    if status in ("pending", "running"):
        # a waiting job is running in the engine's state machine, not here
        return {"statuses": [status], "waiting": False}
    return {"statuses": [status], "waiting": None}


def _alternatives(match: RunMatch) -> list[tuple[str, str, str]]:
    """A match as ``job_search``'s alternatives; a parameter is its tag ``param.NAME``."""
    if not isinstance(match, RunMatch):
        raise BadInput(f"bad match {match!r}: an engine.RunMatch")
    found: list[tuple[str, str, str]] = []
    for what, prefix, pairs in (("param", PARAM_TAG, match.params), ("tag", "", match.tags)):
        for name, value in pairs:
            name, value = parse_pair(what, f"{name}={value}")
            if len(prefix + name) > 63:
                raise BadInput(f"bad {what} {name!r}: a name of at most {63 - len(prefix)}")
            found.append(("tag", prefix + name, value))
    found += [("key", "", _key("fan-out key", k)) for k in match.keys]
    if not found:
        raise BadInput("bad match: it names no parameter, tag or fan-out key")
    return found


def _key(what: str, value: str) -> str:
    value = value.strip()
    if not value or len(value) > _MAX_VALUE:
        raise BadInput(f"bad {what} {value[:40]!r}: 1 to {_MAX_VALUE} characters")
    return value


def encode_cursor(created_at: datetime, job_id: uuid.UUID) -> str:
    """The opaque cursor of a row: the page after it starts below it."""
    raw = f"{created_at.isoformat()}|{job_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    """The row a cursor of :func:`encode_cursor` stands for; :class:`BadInput` if it is none."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        at, _, job_id = raw.partition("|")
        created_at = datetime.fromisoformat(at)
        if created_at.tzinfo is None:
            raise ValueError("no time zone")
        return created_at, uuid.UUID(job_id)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise BadInput(
            f"bad cursor {cursor[:60]!r}: not one this search gave (use a page's next_before, "
            "or start again from the first page)"
        ) from None


def _row(r: Mapping[str, Any]) -> RunRow:
    waits: list[str] = []
    for w in r["waits"] or []:
        until = None if w["until"] is None else datetime.fromisoformat(w["until"])
        text = wait_text(w["signal"], until, bool(w["children"]))
        if text not in waits:
            waits.append(text)
    return RunRow(
        job_id=r["id"],
        flow=r["flow"],
        status="waiting" if waits else r["status"],
        waiting_for=waits,
        params=dict(r["params"]),
        submitted_by=r["submitted_by"],
        created_at=r["created_at"],
        started_at=r["started_at"],
        finished_at=r["finished_at"],
        duration_s=r["duration_s"],
        parent_id=r["parent_job_id"],
        error=r["error"],
        stored_status=r["status"],
    )
