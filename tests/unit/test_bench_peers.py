"""``make bench-peers``'s closing table: ratios of medians, goals met or not (no peer needed)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the bench package, at the top

from bench.peers import ratios
from bench.peers.__main__ import as_url

LINES = ratios.lines_for((1, 10))


def verdicts(medians: dict[str, float | None]) -> dict[str, tuple[float | None, str]]:
    return {r.against.key: (r.ratio, r.verdict) for r in ratios.rows(medians, LINES)}


def test_rows__engine_over_each_median_against_issue_15_goals() -> None:
    got = verdicts(
        {
            "engine": 2000.0,
            "floor": 1600.0,
            "procrastinate": 1000.0,
            "dbos": 800.0,
            "pgqueuer/batch=1": 500.0,
            "pgqueuer/batch=10": 5000.0,
        }
    )
    assert got == {
        "floor": (1.25, "goal met"),
        "procrastinate": (2.0, "goal met"),  # the goal is >=: exactly 2x meets it
        "dbos": (2.5, "goal not met"),
        "pgqueuer/batch=1": (4.0, "reference"),
        "pgqueuer/batch=10": (0.4, "goal not met"),  # issue 38: at least even
    }


def test_rows__just_under_a_goal_is_not_met() -> None:
    got = verdicts({"engine": 999.0, "floor": 1000.0})
    assert got["floor"] == (pytest.approx(0.999), "goal not met")


def test_rows__a_skipped_peer_or_engine_is_not_measured() -> None:
    got = verdicts({"engine": 1000.0, "floor": 800.0, "dbos": None})
    assert got["floor"] == (1.25, "goal met")
    assert got["dbos"] == (None, "not measured")
    assert got["procrastinate"] == (None, "not measured")  # absent altogether
    assert {v for _, v in verdicts({"floor": 1000.0}).values()} == {"not measured"}


def test_median__of_the_rounds_or_none() -> None:
    assert ratios.median([3.0, 1.0, 2.0]) == 2.0
    assert ratios.median([1.0, 2.0]) == 1.5
    assert ratios.median([]) is None


def test_lines_for__goals_and_the_pgqueuer_batches_asked_for() -> None:
    goals = {a.key: a.goal for a in ratios.lines_for((1, 25))}
    assert goals == {
        "floor": 1.2,
        "procrastinate": 2.0,
        "dbos": 3.0,
        "pgqueuer/batch=1": None,
        "pgqueuer/batch=25": None,
    }


def test_render__one_line_per_peer_with_its_ratio_and_verdict() -> None:
    medians = {"engine": 1318.0, "floor": 1957.0, "procrastinate": 788.0, "dbos": None}
    text = ratios.render(ratios.rows(medians, LINES), 1318.0, {"engine": 3, "floor": 3})
    lines = text.splitlines()
    assert lines[0] == "engine: 1,318 steps/s (median of 3 runs)"
    by_label = {line.split("  ")[0]: line for line in lines[2:]}
    assert by_label["per-row floor"].endswith("0.67x >=1.2x  goal not met")
    assert by_label["Procrastinate"].endswith("1.67x   >=2x  goal not met")
    assert by_label["DBOS, per step"].endswith("-   >=3x  not measured")
    assert "batches of 10" in text and "one at a time" in text


def test_as_url__a_unix_socket_goes_to_the_query_and_secrets_are_quoted() -> None:
    assert (
        as_url("host=/tmp/pg port=5433 user=postgres dbname=engine_bench_dbos")
        == "postgresql://postgres@/engine_bench_dbos?host=%2Ftmp%2Fpg&port=5433"
    )
    assert (
        as_url("host=127.0.0.1 port=5432 user=u password=p@ss/w dbname=d")
        == "postgresql://u:p%40ss%2Fw@127.0.0.1:5432/d"
    )


def test_as_url__the_connection_bounds_reach_libpq_with_spaces_not_plus_signs() -> None:
    # the engine's conninfo carries its bounds in `options`; urlencode's `+` for a space
    # is not decoded by libpq, so every peer failed to connect (issue 38)
    from psycopg.conninfo import conninfo_to_dict

    info = "host=127.0.0.1 user=postgres dbname=d options='-c statement_timeout=5000 -c x=y'"
    assert conninfo_to_dict(as_url(info))["options"] == "-c statement_timeout=5000 -c x=y"


def test_unmeasured__names_the_engine_and_every_peer_asked_for_without_a_figure() -> None:
    lines = ratios.lines_for((10,))
    wanted = ["procrastinate", "pgqueuer"]
    table = ratios.rows({"engine": 2000.0, "floor": 1500.0, "dbos": 800.0}, lines)
    assert ratios.unmeasured(table, wanted) == ["procrastinate", "pgqueuer/batch=10"]
    table = ratios.rows({"floor": 1500.0, "procrastinate": 1.0, "pgqueuer/batch=10": 1.0}, lines)
    assert ratios.unmeasured(table, wanted) == ["engine"]
    full = {"engine": 1.0, "floor": 1.0, "procrastinate": 1.0, "pgqueuer/batch=10": 1.0}
    assert ratios.unmeasured(ratios.rows(full, lines), wanted) == []
