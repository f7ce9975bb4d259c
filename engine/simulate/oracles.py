"""The oracles of RELIABILITY.md, checked by SQL on the scratch database after a run.

Each oracle is one query of ``simulate.sql`` (``oracle_*``) whose counts must
be zero (or equal to what was submitted); its detail line says what was
counted, so a failure names what went wrong, not only that something did.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg

from engine.simulate.flow import STEPS
from engine.simulate.record import Fault, Oracle
from engine.store.named import NamedQueries
from engine.store.queries import load

__all__ = ["check_oracles", "oracle_lines"]

_sql = NamedQueries(load(str(Path(__file__).with_name("simulate.sql"))))


def _one(conn: psycopg.Connection[Any], name: str, **params: Any) -> dict[str, Any]:
    return _sql.one(conn, name, params)


def check_oracles(
    conn: psycopg.Connection[Any], *, expected_jobs: int, faults: Sequence[Fault]
) -> list[Oracle]:
    """Every oracle, once the workers are stopped; ``expected_jobs`` counts late new jobs."""
    steps = len(STEPS)
    effects = _one(conn, "oracle_no_double_effect", steps=steps)
    fencing = _one(conn, "oracle_fencing")
    lost = _one(conn, "oracle_nothing_lost")
    stuck = _one(conn, "oracle_no_expired_running")
    attempts = _one(conn, "oracle_attempts")
    overlap = _one(conn, "oracle_one_active_per_fingerprint")
    refused = sum(1 for f in faults if f.kind == "resubmit" and "active job" in f.detail)
    return [
        Oracle(
            name="no double effect",
            passed=effects["jobs_off"] == 0 and effects["refused_by_key"] == 0,
            detail=f"{effects['effects']} effects, {effects['jobs_off']} job(s) without "
            f"exactly {steps}, {effects['refused_by_key']} refused by the unique key",
        ),
        Oracle(
            name="fencing",
            passed=fencing["unfenced"] == 0,
            detail=f"{fencing['effects'] - fencing['unfenced']}/{fencing['effects']} effects "
            "written by the attempt that checkpointed; "
            f"{fencing['fenced_commits']} commit(s) fenced",
        ),
        Oracle(
            name="nothing lost",
            passed=lost["jobs"] == expected_jobs
            and lost["done"] == expected_jobs
            and lost["steps_not_done"] == 0,
            detail=f"{lost['done']}/{expected_jobs} jobs done "
            f"({lost['jobs']} in the database), "
            f"{lost['steps_not_done']} step run(s) not done",
        ),
        Oracle(
            name="no expired lease left running",
            passed=stuck["stuck"] == 0,
            detail=f"{stuck['stuck']} step run(s) running under an expired lease",
        ),
        Oracle(
            name="attempts within the cap",
            passed=attempts["over_cap"] == 0 and attempts["miscounted"] == 0,
            detail=f"max {attempts['max_attempts_used']} of {attempts['cap']}; "
            f"{attempts['miscounted']} step run(s) whose attempts differ from their claims",
        ),
        Oracle(
            name="one active job per fingerprint",
            passed=overlap["overlapping"] == 0,
            detail=f"{overlap['overlapping']} overlapping pair(s); {refused} duplicate "
            "submit(s) returned the active job",
        ),
    ]


def oracle_lines(oracles: Sequence[Oracle]) -> list[str]:
    """The oracles as console lines: ``oracle <name> .... pass  <detail>``."""
    width = max((len(o.name) for o in oracles), default=0) + 4
    return [
        f"oracle {o.name} {'.' * (width - len(o.name))} {verdict}  {o.detail}"
        for o, verdict in ((o, "pass" if o.passed else "FAIL") for o in oracles)
    ]
