"""The chaos run's processes: ``engine worker`` and ``engine submit``, signalled by name.

Each worker is ``python -m engine worker`` with its own ``ENGINE_WORKER_ID``
(``w1``, ``w2``, ...: its leases read ``w1/0``, ``w1/1``) and
``PGAPPNAME=chaos:w1``, so its database sessions can be found and terminated.
Every process runs in its own session (``start_new_session``), so a signal
reaches only it. Output goes to one log file per process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


@dataclass
class Proc:
    name: str
    role: str  # full | reduced:<flow> | point:<point>
    popen: subprocess.Popen[bytes]
    log: Path
    signalled: str = ""  # the signal we sent to end it, if any
    stopped: bool = False  # SIGSTOPped and not yet continued
    reaped: bool = False

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None


@dataclass
class Fleet:
    """Named worker processes of one scenario."""

    base_env: dict[str, str]
    logdir: Path
    concurrency: int
    seed: int
    procs: dict[str, Proc] = field(default_factory=dict)
    hangs: list[str] = field(default_factory=list)

    def _env(self, name: str, extra: dict[str, str]) -> dict[str, str]:
        return {
            **self.base_env,
            "ENGINE_WORKER_ID": name,
            "PGAPPNAME": f"chaos:{name}",
            # engine.infra.faults mixes in the pid: a seed per worker, not a replayable draw
            "ENGINE_FAULT_SEED": str(self.seed * 1000 + len(self.procs)),
            **extra,
        }

    def spawn(self, role: str = "full", **extra: str) -> Proc:
        name = f"w{len(self.procs) + 1}"
        path = self.logdir / f"{name}.log"
        with path.open("wb") as out:
            popen = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "engine",
                    "--log-level",
                    "INFO",
                    "worker",
                    "--concurrency",
                    str(self.concurrency),
                ],
                cwd=ROOT,
                env=self._env(name, extra),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        proc = Proc(name, role, popen, path)
        self.procs[name] = proc
        return proc

    def full(self) -> list[Proc]:
        return [p for p in self.procs.values() if p.role == "full" and p.alive and not p.stopped]

    def owner(self, lease_owner: str | None) -> Proc | None:
        if not lease_owner:
            return None
        return self.procs.get(lease_owner.split("/")[0])

    def signal(self, proc: Proc, sig: signal.Signals) -> None:
        if sig in (signal.SIGKILL, signal.SIGTERM):
            proc.signalled = sig.name
        if proc.alive:
            os.kill(proc.popen.pid, sig)
        if sig == signal.SIGSTOP:
            proc.stopped = True
        elif sig == signal.SIGCONT:
            proc.stopped = False

    def wait_exit(self, proc: Proc, timeout_s: float) -> bool:
        try:
            proc.popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False
        return True

    def reap(self) -> list[Proc]:
        """Workers that exited without being told to (each reported once)."""
        gone = []
        for proc in self.procs.values():
            if not proc.alive and not proc.reaped:
                proc.reaped = True
                if not proc.signalled:
                    gone.append(proc)
        return gone

    def stop_all(self, grace_s: float) -> None:
        """SIGCONT the stopped, SIGTERM the rest; those alive after ``grace_s`` are hangs."""
        for proc in self.procs.values():
            if proc.alive:
                if proc.stopped:
                    self.signal(proc, signal.SIGCONT)
                self.signal(proc, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for proc in self.procs.values():
            if not self.wait_exit(proc, max(0.1, deadline - time.monotonic())):
                self.hangs.append(proc.name)
                self.kill_now(proc)

    def kill_now(self, proc: Proc) -> None:
        if proc.alive:
            os.kill(proc.popen.pid, signal.SIGKILL)
            proc.signalled = proc.signalled or "SIGKILL"
        proc.popen.wait(timeout=30)

    def cleanup(self) -> None:
        """Never leave a child behind (a crash in the harness included)."""
        for proc in self.procs.values():
            if proc.alive:
                os.kill(proc.popen.pid, signal.SIGCONT)
                self.kill_now(proc)

    def tail(self, lines: int = 10) -> str:
        shown = []
        for proc in self.procs.values():
            text = proc.log.read_text(errors="replace").splitlines() if proc.log.exists() else []
            code = proc.popen.returncode
            shown.append(
                f"--- {proc.name} ({proc.role}, exit {code}, signalled {proc.signalled or '-'}) ---"
            )
            shown.extend(text[-lines:])
        return "\n".join(shown)


def run_submit(
    env: dict[str, str], args: list[str], logdir: Path, name: str, timeout_s: float = 60
) -> tuple[int, str]:
    """``engine submit ...`` as a process of its own; its exit code and output."""
    return run_engine(env, ["submit", *args], logdir, name, timeout_s)


def run_engine(
    env: dict[str, str], args: list[str], logdir: Path, name: str, timeout_s: float = 60
) -> tuple[int, str]:
    """``engine ARGS`` (an operator's command) as a process of its own; its exit code and output."""
    path = logdir / f"{name}.log"
    with path.open("wb") as out:
        popen = subprocess.Popen(
            [sys.executable, "-m", "engine", *args],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            code = popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            popen.kill()
            code = popen.wait(timeout=30)
    return code, path.read_text(errors="replace")
