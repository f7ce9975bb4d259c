"""The simulator's worker processes, by name (``w1``, ``w2``, ...): started, killed, replaced.

Each start, kill and stop is also a :class:`~engine.simulate.record.Fault`
stamped by the database clock, because the events cannot show them: a
SIGKILLed worker writes nothing.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from engine.simulate.record import Fault
from engine.worker.processes import WorkerProcess, start_worker, stop_all

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
    procs: dict[str, WorkerProcess] = field(default_factory=dict)

    def spawn(self, why: str) -> str:
        name = f"w{len(self.procs) + 1}"
        env = {**self.env, "ENGINE_DATABASE_URL": self.info, "ENGINE_WORKER_ID": name}
        self.procs[name] = start_worker(
            "--concurrency",
            str(self.concurrency),
            env=env,
            output=self.logdir / f"{name}.log",
            name=name,
        )
        self.faults.append(
            Fault(at=self.clock(), kind="spawn", worker=name, detail=f"{name} {why}")
        )
        return name

    def alive(self, name: str) -> bool:
        proc = self.procs.get(name)
        return proc is not None and proc.alive()

    def kill(self, name: str, detail: str) -> None:
        proc = self.procs[name]
        # the database clock at the kill, not after the reap: the lease ran from here
        proc.send_signal(signal.SIGKILL)
        at = self.clock()
        proc.kill(timeout=10)
        self.faults.append(Fault(at=at, kind="kill", worker=name, detail=detail))

    def stop(self, grace_s: float = 8.0) -> None:
        """SIGTERM the live workers (the graceful path); SIGKILL any left after ``grace_s``."""
        stop_all(self.procs.values(), grace_s)

    def tail(self, lines: int = 15) -> str:
        return "\n".join(
            f"--- {name} ---\n" + "\n".join(proc.tail(lines)) for name, proc in self.procs.items()
        )
