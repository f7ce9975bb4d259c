"""The closing table of ``make bench-peers``: the engine's median against each other median.

Pure functions over figures (no database, no peers installed), so a unit test
can check the arithmetic and the goal lines.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

ENGINE = "engine"
FLOOR = "floor"
PROCRASTINATE = "procrastinate"
DBOS = "dbos"


def pgqueuer_key(batch: int) -> str:
    return f"pgqueuer/batch={batch}"


@dataclass(frozen=True)
class Against:
    """One line: what the engine's steps/s is divided by, and the goal if there is one."""

    key: str
    label: str
    unit: str
    goal: float | None  # None: for reference only


def lines_for(pgqueuer_batches: Sequence[int] = (1, 10)) -> list[Against]:
    """The lines of the table, in order (issue 15's goals; issue 38's for the floor, 1.2x,
    and for pgqueuer in batches of 10, even)."""
    lines = [
        Against(FLOOR, "per-row floor", "rows/s", 1.2),
        Against(PROCRASTINATE, "Procrastinate", "jobs/s", 2.0),
        Against(DBOS, "DBOS, per step", "steps/s", 3.0),
    ]
    for batch in pgqueuer_batches:
        what = "one at a time" if batch == 1 else f"batches of {batch}"
        goal = 1.0 if batch == 10 else None
        lines.append(Against(pgqueuer_key(batch), f"pgqueuer, {what}", "jobs/s", goal))
    return lines


@dataclass(frozen=True)
class Row:
    against: Against
    engine: float | None
    other: float | None

    @property
    def ratio(self) -> float | None:
        if self.engine is None or not self.other:
            return None
        return self.engine / self.other

    @property
    def verdict(self) -> str:
        if self.ratio is None:
            return "not measured"
        if self.against.goal is None:
            return "reference"
        return "goal met" if self.ratio >= self.against.goal else "goal not met"


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def rows(medians: Mapping[str, float | None], lines: Sequence[Against]) -> list[Row]:
    """One row per line: the engine's median over that line's median (None where missing)."""
    engine = medians.get(ENGINE)
    return [Row(a, engine, medians.get(a.key)) for a in lines]


def unmeasured(table: Sequence[Row], peers: Sequence[str]) -> list[str]:
    """What has no figure among the engine and the ``peers`` asked for (pgqueuer: each batch).

    Not empty: the bench measured nothing to compare with, and must not pass as if it had.
    """
    missing = ["engine"] if table and table[0].engine is None else []
    for row in table:
        if row.other is None and row.against.key.split("/")[0] in peers:
            missing.append(row.against.key)
    return missing


def render(table: Sequence[Row], engine: float | None, rounds: Mapping[str, int]) -> str:
    """The table as text: one line per peer, with its ratio, goal and verdict."""

    def rate(value: float | None) -> str:
        return "-" if value is None else f"{value:,.0f}"

    out = [
        f"engine: {rate(engine)} steps/s (median of {rounds.get(ENGINE, 0)} runs)",
        f"{'against':<28} {'median':>10} {'unit':<8} {'runs':>4} {'engine/it':>9} "
        f"{'goal':>6}  verdict",
    ]
    for row in table:
        a = row.against
        ratio = "-" if row.ratio is None else f"{row.ratio:.2f}x"
        goal = "-" if a.goal is None else f">={a.goal:g}x"
        out.append(
            f"{a.label:<28} {rate(row.other):>10} {a.unit:<8} {rounds.get(a.key, 0):>4} "
            f"{ratio:>9} {goal:>6}  {row.verdict}"
        )
    return "\n".join(out)
