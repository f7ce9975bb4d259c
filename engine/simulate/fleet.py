"""The simulator's worker processes, by name (``w1``, ``w2``, ...): started, killed, replaced.

Each start, kill and stop is also a :class:`~engine.simulate.record.Fault`
stamped by the database clock, because the events cannot show them: a
SIGKILLed worker writes nothing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from engine.simulate.record import Fault

__all__ = ["Fleet"]


@dataclass
class Fleet:
    """The worker processes: started, killed and replaced by name (``w1``, ``w2``, ...)."""

    info: str
    env: Mapping[str, str]
    concurrency: int
    clock: Callable[[], datetime]
    faults: list[Fault]
    logdir: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def spawn(self, why: str) -> str:
        name = f"w{len(self.procs) + 1}"
        env = {
            **os.environ,
            **self.env,
            "ENGINE_DATABASE_URL": self.info,
            "ENGINE_WORKER_ID": name,
        }
        with (self.logdir / f"{name}.log").open("wb") as out:
            self.procs[name] = subprocess.Popen(  # noqa: S603  our own interpreter and module
                [sys.executable, "-m", "engine", "worker", "--concurrency", str(self.concurrency)],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.faults.append(
            Fault(at=self.clock(), kind="spawn", worker=name, detail=f"{name} {why}")
        )
        return name

    def alive(self, name: str) -> bool:
        proc = self.procs.get(name)
        return proc is not None and proc.poll() is None

    def kill(self, name: str, detail: str) -> None:
        proc = self.procs[name]
        proc.send_signal(signal.SIGKILL)
        at = self.clock()
        proc.wait(timeout=10)
        self.faults.append(Fault(at=at, kind="kill", worker=name, detail=detail))

    def stop(self, grace_s: float = 8.0) -> None:
        """SIGTERM the live workers (the graceful path); SIGKILL any left after ``grace_s``."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)

    def tail(self, lines: int = 15) -> str:
        shown = []
        for name in self.procs:
            path = self.logdir / f"{name}.log"
            text = path.read_text(errors="replace").splitlines()[-lines:] if path.exists() else []
            shown.append(f"--- {name} ---\n" + "\n".join(text))
        return "\n".join(shown)
