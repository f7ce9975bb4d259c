"""What an operator reads on the console is true: the workers' running step runs, and an
outage of the database said as one (503, with the console's security headers).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import psycopg
from harness import fast_settings, flows_registry, thread_worker, wait_until

from engine import submit
from engine.config import Settings


def _workers(html: str) -> dict[str, int]:
    """The Workers page's rows: worker id -> the step runs it holds (the "running" column)."""
    rows = re.findall(r"<tr><td class=\"mono\">([^<]+)</td>.*?</tr>", html, flags=re.S)
    running = re.findall(
        r"<tr><td class=\"mono\">[^<]+</td>(?:<td[^>]*>.*?</td>){5}<td class=\"num\">(\d+)</td>",
        html,
        flags=re.S,
    )
    assert len(rows) == len(running), html
    return {w: int(n) for w, n in zip(rows, running, strict=True)}


def test_workers__a_worker_holding_two_step_runs_shows_two_running(
    client_for: Any, settings: Settings, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    fast = fast_settings(settings, concurrency=2)
    holds = [tmp_path / "one", tmp_path / "two"]
    for n, hold in enumerate(holds):
        params = {"n": n, "hold_file": str(hold), "hold_step": "a"}
        submit("chain", params, settings=settings, registry=flows_registry())
    with thread_worker(fast, worker_id="ops-host:4242") as worker:
        try:
            for hold in holds:
                wait_until(
                    lambda h=hold: Path(f"{h}.started").exists(), what=f"{hold.name} to start"
                )
            owners = {
                r["lease_owner"]
                for r in conn.execute(
                    "SELECT lease_owner FROM engine_step_runs WHERE status = 'running'"
                )
            }
            # as a worker writes them: one lease per slot, the slot after the worker's id
            assert owners == {"ops-host:4242/0", "ops-host:4242/1"}
            page = client_for("vera").get("/workers").text
            assert _workers(page) == {worker.worker_id: 2}
        finally:
            for hold in holds:
                Path(f"{hold}.release").touch()
