"""``engine demo``: migrate, start two worker processes, run a job end to end.

The workers are real ``engine worker`` processes on the same database, as in
production; they are stopped with SIGTERM at the end (the graceful path).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

from engine import db
from engine.config import Settings


@contextlib.contextmanager
def worker_processes(settings: Settings, count: int, **env: str) -> Iterator[list[Any]]:
    """``count`` worker processes for the duration of the block."""
    child_env = {**os.environ, **env}
    if settings.database_url is not None:
        child_env["ENGINE_DATABASE_URL"] = settings.database_url.get_secret_value()
    else:
        db.conninfo(settings)  # start the embedded server once, before the children race for it
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "engine", "worker", "--concurrency", "2"],
            env=child_env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(count)
    ]
    try:
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=settings.shutdown_grace_s + 10)
            except subprocess.TimeoutExpired:
                proc.kill()
