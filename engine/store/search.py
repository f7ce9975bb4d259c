"""Searching jobs: one page of the jobs some filters find, newest first (``sql/search.sql``).

Read only. The statement is ``job_search`` with the AND of the filter blocks
(``job_search_where_*``) whose parameters are given, over all jobs or, when
a filter names a set of jobs (free text, ``job_search_source_text``; a
*match*: any of some tags and fan-out keys, ``job_search_match_*``), over
the jobs of the sets' intersection, fetched one by one by their primary key.
The engine gives no tag's name a meaning here. A filter not given is not in
the statement at all, and none makes the plan scan every job. Never
prepared: each search is planned with its values (a rare flow and a common
one want different plans). The caller (:mod:`engine.jobs.search`) checks the
values and makes the cursor.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from engine.store.errors import wrap_errors
from engine.store.queries import load

__all__ = ["job_flow_exists", "job_search", "job_search_statement"]

_q = load("search")
_PARAM = re.compile(r"%\((\w+)\)s")


def _body(name: str) -> str:
    """A block without its comment lines."""
    return "\n".join(line for line in _q[name].splitlines() if not line.startswith("--")).strip()


def _blocks(prefix: str) -> list[tuple[str, frozenset[str]]]:
    """The blocks named ``prefix...``, each with the parameters it binds."""
    return [
        (_body(name), frozenset(_PARAM.findall(_body(name))))
        for name in _q.names()
        if name.startswith(prefix)
    ]


_FILTERS = _blocks("job_search_where_")
_WALK = _body("job_search_from_tag")
_SOURCES = _blocks("job_search_source_")
_MATCH = {"tag": _body("job_search_match_tag"), "key": _body("job_search_match_key")}

Alternative = tuple[str, str, str]
"""One way a job may match: ``("tag", name, value)`` or ``("key", "", value)`` (a fan-out key)."""


@wrap_errors
def job_search(
    conn: psycopg.Connection[Any], filters: Mapping[str, Any], *, limit: int
) -> list[dict[str, Any]]:
    """Jobs newest first, at most ``limit``, matching the ``filters`` given (``None``: any).

    ``filters`` holds the blocks' parameters (``before_at`` and ``before_id``,
    ``job_id``, ``id_low`` and ``id_high``, ``flow``, ``statuses``,
    ``waiting``, ``text``) and ``matches``: a list of matches, each a list of
    :data:`Alternative` of which a job must meet one (every match must hold);
    a block applies when its parameters are all given.
    """
    query, params = job_search_statement(filters, limit=limit)
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(query, params, prepare=False).fetchall()


def job_search_statement(
    filters: Mapping[str, Any], *, limit: int
) -> tuple[sql.Composed, dict[str, Any]]:
    """The statement :func:`job_search` runs and its parameters (to EXPLAIN it, say)."""
    given = {k: v for k, v in filters.items() if v is not None and k != "matches"}
    clauses = [sql.SQL("(" + body + ")") for body, params in _FILTERS if params <= given.keys()]
    sources = [sql.SQL("(" + body + ")") for body, params in _SOURCES if params <= given.keys()]
    matches = list(filters.get("matches") or ())
    order = sql.SQL("j.created_at DESC, j.id DESC")
    jobs: sql.Composable = sql.SQL("engine_jobs AS j")
    if not sources and len(matches) == 1 and len(matches[0]) == 1 and matches[0][0][0] == "tag":
        # one tag alone: walk its index newest first, as a flow's index is walked
        _, given["tag_name"], given["tag_value"] = matches[0][0]
        jobs, order = sql.SQL(_WALK), sql.SQL("t.job_created_at DESC, t.job_id DESC")
        clauses.append(sql.SQL("(" + _body("job_search_from_tag_where") + ")"))
        if "before_at" in given:
            clauses.append(sql.SQL("(" + _body("job_search_from_tag_before") + ")"))
        matches = []
    for i, match in enumerate(matches):
        union: list[str] = []
        for j, (kind, name, value) in enumerate(match):
            # each alternative binds its own parameters: m<match>_<alternative>_<name>
            union.append(_PARAM.sub(rf"%(m{i}_{j}_\1)s", _MATCH[kind]))
            given[f"m{i}_{j}_name"], given[f"m{i}_{j}_value"] = name, value
        if union:
            sources.append(sql.SQL("(" + "\nUNION\n".join(union) + ")"))
    where = sql.SQL("\n      AND ").join(clauses) if clauses else sql.SQL("true")
    if sources:
        candidates = sql.SQL("\nINTERSECT\n").join(sources)
        jobs = sql.SQL(_body("job_search_from_candidates")).format(candidates=candidates)
    statement = sql.SQL(_q["job_search"]).format(jobs=jobs, where=where, order=order)
    return statement, {**given, "limit": limit}


@wrap_errors
def job_flow_exists(conn: psycopg.Connection[Any], flow: str) -> bool:
    """Whether any job is of ``flow``."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(_q["job_search_flow_exists"], {"flow": flow}).fetchone()
    return bool(row and row["found"])
