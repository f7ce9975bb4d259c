"""``engine prune``, ``engine pin``, and a pruned job's ``status`` and ``report`` (the CLI)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harness import engine_cli, fast_settings, flows_registry, thread_worker, wait_job_ended
from testflows import chain

from engine.config import Settings
from engine.jobs.submit import submit
from engine.store import db

pytestmark = pytest.mark.acceptance


def test_cli__prune_dry_run_pin_and_a_pruned_jobs_status_and_report(
    settings: Settings, tmp_path: Path
) -> None:
    fast = fast_settings(settings)
    kept, pruned = (submit(chain, {"n": n}, settings=fast).job_id for n in (1, 2))
    with thread_worker(fast, flows_registry()), db.connect(fast, autocommit=True) as c:
        for job in (kept, pruned):
            wait_job_ended(c, job)
        c.execute(
            "UPDATE engine_jobs SET finished_at = now() - interval '20 days' WHERE id = ANY(%s)",
            ([kept, pruned],),
        )
    env = {"ENGINE_REPORTS_DIR": str(tmp_path / "reports")}

    def engine(*args: str) -> tuple[int, str, str]:
        result = engine_cli(settings, *args, env=env)
        return result.returncode, result.stdout, result.stderr

    code, out, err = engine("pin", str(kept)[:8], "--until", "2099-01-01", "--reason", "audit")
    assert code == 0, err
    assert "pinned until 2099-01-01" in out
    code, _, err = engine("pin", str(kept), "--until", "next week", "--reason", "audit")
    assert code == 2 and "next week" in err  # a bad date names itself

    with db.connect(settings, autocommit=True) as c:
        # the job's event rows (a first claim and a success are columns of its step runs)
        row = c.execute("SELECT count(*) AS n FROM engine_events WHERE job_id = %s", (pruned,))
        events = row.fetchone()["n"]
    code, out, err = engine("prune", "--dry-run", "--json")
    assert code == 0, err
    planned = json.loads(out)
    assert planned["by_flow"] == [
        {"flow": "chain", "status": "done", "jobs": 1, "step_runs": 3, "events": events, "tags": 0}
    ]
    code, out, err = engine("prune", "--dry-run")
    assert code == 0, err
    assert f"would remove 1 job(s), 3 step run(s), {events} event(s)" in out

    code, out, err = engine("prune", "--json")
    assert code == 0, err
    assert json.loads(out)["by_flow"] == planned["by_flow"]
    with db.connect(settings, autocommit=True) as c:
        left = c.execute("SELECT id FROM engine_jobs ORDER BY id").fetchall()
    assert [r["id"] for r in left] == [kept]

    code, out, err = engine("status", str(pruned))
    assert code == 0, err
    assert "pruned on" in out and "status done" in out and "step runs 3/3 done" in out
    code, out, err = engine("status", str(pruned)[:8])  # a prefix finds the pruned job too
    assert code == 0, err
    assert "pruned on" in out and str(pruned) in out
    code, out, err = engine("status", str(pruned), "--json")
    assert code == 0, err
    shown = json.loads(out)
    assert shown["pruned"] is True and shown["job"]["status"] == "done"

    code, out, err = engine("report", str(pruned))
    assert code == 0, err
    stored = Path(out.strip())
    assert stored.is_file() and str(pruned) in stored.read_text(encoding="utf-8")
    assert "pruned on" in err


def test_cli__pin_of_an_unknown_job_exits_2(settings: Settings) -> None:
    result = engine_cli(
        settings,
        "pin",
        "00000000-0000-0000-0000-000000000001",
        "--until",
        "2099-01-01",
        "--reason",
        "x",
    )
    assert result.returncode == 2
    assert "no job with id" in result.stderr
