"""The worker launcher: its own session, SIGTERM first, SIGKILL after the grace."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from engine.worker.processes import WorkerProcess, settings_env, start_worker, stop_all

SUPPORT = Path(__file__).parent.parent / "support"


def _sleeper(*args: str) -> WorkerProcess:
    proc = start_worker(*args, env={"PYTHONPATH": str(SUPPORT)}, module="sleeper")
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc


def test_settings_env__names_and_values_as_settings_reads_them() -> None:
    env = settings_env(flow_modules=["a", "b"], report_on_end=False, lease_s=2.5, worker_role="")
    assert env == {
        "ENGINE_FLOW_MODULES": "a,b",
        "ENGINE_REPORT_ON_END": "false",
        "ENGINE_LEASE_S": "2.5",
        "ENGINE_WORKER_ROLE": "",
    }


def test_start_worker__runs_in_its_own_session() -> None:
    proc = _sleeper()
    try:
        assert os.getsid(proc.pid) == proc.pid != os.getsid(0)
    finally:
        proc.kill()


def test_stop_all__a_worker_that_exits_on_sigterm_is_not_killed() -> None:
    proc = _sleeper()
    assert stop_all([proc], grace_s=10) == []
    assert proc.returncode == -signal.SIGTERM


def test_stop_all__a_worker_ignoring_sigterm_is_killed_after_the_grace() -> None:
    stubborn, polite = _sleeper("--ignore-sigterm"), _sleeper()
    assert stop_all([stubborn, polite], grace_s=0.5) == [stubborn]
    assert stubborn.returncode == -signal.SIGKILL
    assert polite.returncode == -signal.SIGTERM


def test_kill__is_a_crash_and_reaps_the_process() -> None:
    proc = _sleeper()
    assert proc.kill() == -signal.SIGKILL
    assert not proc.alive()
    assert proc.kill() == -signal.SIGKILL, "killing a dead worker again is harmless"
