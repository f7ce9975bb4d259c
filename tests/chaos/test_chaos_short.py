"""The short chaos run of ``make test``: one scenario per transport, each fault kind once.

``python -m tests.chaos`` as a process of its own (it starts workers, moto's
server and an outage of its scratch database), with the kinds split between
the two transports so that each kind runs once and each half stays short;
``make chaos`` runs every kind on both, and the pooler scenario. Size with
``CHAOS_SHORT_ROUNDS``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.acceptance

ROOT = Path(__file__).resolve().parent.parent.parent
KINDS = {
    "postgres": "kill,pause,outage,rollback,submit_kill,point_kill,schedule",
    "sqs": "term,terminate,duplicate,sqs_errors,deploy,term_last,partition",
}


@pytest.mark.parametrize("transport", sorted(KINDS))
def test_chaos_short__every_oracle_holds_under_seeded_faults(transport: str, pg_admin: str) -> None:
    kinds = KINDS[transport]
    rounds = os.environ.get("CHAOS_SHORT_ROUNDS") or str(len(kinds.split(",")))
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("CHAOS_")},
        "ENGINE_DATABASE_URL": pg_admin,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests" / "support")]),
        "CHAOS_TRANSPORTS": transport,
        "CHAOS_SEED": os.environ.get("CHAOS_SEED") or "1",
        "CHAOS_ROUNDS": rounds,
        "CHAOS_FAULTS": kinds,
        # the pooler scenario (every worker behind PgBouncer) is a whole scenario
        # more: `make chaos` runs it, the short run stays two scenarios
        "CHAOS_POOLER": "none",
        # the bound's margin term is for machine load: here the rest of the suite
        # shares the two cores (xdist)
        "CHAOS_MARGIN_S": os.environ.get("CHAOS_MARGIN_S") or "5",
    }
    done = subprocess.run(
        [sys.executable, "-m", "tests.chaos"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    report = "\n".join(json.dumps(line, indent=1) for line in lines)
    assert lines, f"no scenario line (exit {done.returncode}):\n{done.stderr[-4000:]}"
    failed = [line for line in lines if line["result"] != "pass"]
    assert not failed, (
        f"chaos failed: {[f for line in failed for f in line['failures']]}\n"
        f"replay: {failed[0]['replay']}\n{report}\n--- stderr (end) ---\n{done.stderr[-3000:]}"
    )
    assert done.returncode == 0, done.stderr[-3000:]
