"""Worker processes: real ``engine worker`` children, started and stopped one way.

The demo, ``engine simulate``, the benchmarks and the acceptance tests run
workers as production does, one process each, and share this launcher so
that they share its rules:

- each child leads its own session, so a signal meant for one worker (a
  crash test's SIGKILL, a SIGSTOP) reaches only it, and the terminal's
  Ctrl-C reaches only the parent, which then stops its workers gracefully;
- stopping is the graceful path first: SIGTERM lets a running step finish
  within the worker's shutdown grace or gives its lease back (invariant 12);
  SIGKILL follows after a bound, so no child outlives the block that
  started it;
- output goes to a log file, a pipe the caller drains, or nowhere; never to
  the parent's terminal, where several workers' lines would interleave.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any, Literal

from pydantic import SecretStr

from engine.config import Settings
from engine.store import db

__all__ = [
    "Output",
    "WorkerProcess",
    "settings_env",
    "start_worker",
    "stop_all",
    "worker_processes",
]

Output = Path | Literal["pipe", "discard"]
"""Where a worker's stdout and stderr go: a log file, a pipe read by the caller, nowhere."""


def settings_env(**values: Any) -> dict[str, str]:
    """``ENGINE_<NAME>`` variables for :class:`Settings` fields, as a child reads them back."""
    env = {}
    for key, value in values.items():
        if isinstance(value, SecretStr):
            text = value.get_secret_value()
        elif isinstance(value, list | tuple):
            text = ",".join(str(v) for v in value)
        elif isinstance(value, bool):
            text = "true" if value else "false"
        else:
            text = str(value)
        env[f"ENGINE_{key.upper()}"] = text
    return env


class WorkerProcess:
    """One worker child; the parts of :class:`subprocess.Popen` callers use, plus stop and kill."""

    def __init__(self, popen: subprocess.Popen[str], name: str, log: Path | None) -> None:
        self.popen = popen
        self.name = name
        self.log = log

    def __repr__(self) -> str:
        return f"<WorkerProcess {self.name} pid={self.pid} returncode={self.returncode}>"

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    @property
    def stdout(self) -> IO[str] | None:
        """The pipe of its output (``output="pipe"``), else ``None``."""
        return self.popen.stdout

    def poll(self) -> int | None:
        return self.popen.poll()

    def alive(self) -> bool:
        return self.popen.poll() is None

    def wait(self, timeout: float | None = None) -> int:
        return self.popen.wait(timeout=timeout)

    def send_signal(self, sig: int) -> None:
        self.popen.send_signal(sig)

    def kill(self, timeout: float = 30.0) -> int:
        """SIGKILL and reap it: a crash, with no shutdown and no lease given back."""
        if self.popen.poll() is None:
            os.kill(self.popen.pid, signal.SIGKILL)
        return self.popen.wait(timeout=timeout)

    def stop(self, grace_s: float) -> bool:
        """SIGTERM, SIGKILL after ``grace_s``; True when it had to be killed."""
        return bool(stop_all([self], grace_s))

    def output(self) -> str:
        """What it wrote to its log file so far ('' without one)."""
        if self.log is None or not self.log.exists():
            return ""
        return self.log.read_text(encoding="utf-8", errors="replace")

    def tail(self, lines: int) -> list[str]:
        return self.output().splitlines()[-lines:]


def start_worker(
    *args: str,
    env: Mapping[str, str] | None = None,
    output: Output = "pipe",
    log_level: str | None = None,
    name: str = "",
    cwd: Path | None = None,
    module: str = "engine",
) -> WorkerProcess:
    """Start ``python -m <module> [--log-level L] worker <args>`` in its own session.

    ``env`` is laid over this process's environment. ``module`` is for a
    benchmark's own entry point around the engine's worker.
    """
    command = [sys.executable, "-m", module]
    if log_level is not None:
        command += ["--log-level", log_level]
    command += ["worker", *args]
    child_env = {**os.environ, **(env or {})}
    log = output if isinstance(output, Path) else None
    with contextlib.ExitStack() as stack:
        if log is not None:
            stdout: Any = stack.enter_context(log.open("wb"))
        else:
            stdout = subprocess.PIPE if output == "pipe" else subprocess.DEVNULL
        popen = subprocess.Popen(  # noqa: S603  our own interpreter and module
            command,
            cwd=cwd,
            env=child_env,
            stdout=stdout,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
    return WorkerProcess(popen, name or str(popen.pid), log)


def stop_all(procs: Iterable[WorkerProcess], grace_s: float) -> list[WorkerProcess]:
    """SIGTERM every live one; SIGKILL those still alive after ``grace_s``, which are returned."""
    procs = list(procs)
    for proc in procs:
        if proc.alive():
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    killed = []
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            killed.append(proc)
            proc.kill()
    return killed


@contextlib.contextmanager
def worker_processes(
    settings: Settings, count: int, *args: str, **env: str
) -> Iterator[list[WorkerProcess]]:
    """``count`` workers on the database of ``settings`` for the block, their output discarded."""
    child_env = dict(env)
    if settings.database_url is not None:
        child_env["ENGINE_DATABASE_URL"] = settings.database_url.get_secret_value()
    else:
        db.conninfo(settings)  # start the embedded server once, before the children race for it
    procs: list[WorkerProcess] = []
    try:
        for _ in range(count):
            procs.append(start_worker(*args, env=child_env, output="discard"))
        yield procs
    finally:
        stop_all(procs, settings.shutdown_grace_s + 10)
