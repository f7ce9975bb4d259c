"""What the three peer runners share; runs in the peers' virtualenv (psycopg, stdlib).

A runner is one script, started by ``python -m bench.peers`` with the peers'
python and the database's URL in ``BENCH_PEER_URL``. As the coordinator
(``run``) it prepares its database and enqueues the whole workload, then
starts its worker processes: the same script with
``worker`` as the first argument. Each worker imports and builds everything it
needs, prints ``ready`` and waits for ``go`` on its standard input, so start-up
is not timed and the workers start together (a barrier release). The
coordinator then polls the database until every job is done, stops the workers
(SIGTERM, SIGKILL after 10 s) and prints one JSON line on stdout: the figures.

The figure is timed from the database's own records of the peer wherever it
keeps them (first job start to last job end), the way the engine is timed from
its events; ``wall_s`` (barrier release to the poll that saw the last job done,
polls every 50 ms) is printed beside it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

POLL_S = 0.05


def log(message: str) -> None:
    print(f"[peers] {message}", file=sys.stderr, flush=True)


def wait_for_go() -> None:
    """A worker's half of the barrier: say ready, wait for the word."""
    print("ready", flush=True)
    line = sys.stdin.readline()
    if line.strip() != "go":
        sys.exit(0)  # the coordinator gave up before the start
    # nobody reads the pipe from here on: whatever the peer prints goes to the log file
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())


def wait_forever() -> None:
    """A worker that does not stop by itself: until SIGTERM (raised as SystemExit)."""

    def stop_on(signum: int, frame: Any) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop_on)
    while True:
        signal.pause()


@dataclass
class Drained:
    done: int
    wall_s: float | None  # None: not every job was done in time
    note: str = ""


def drain(
    script: str,
    worker_args: list[str],
    procs: int,
    info: str,
    progress_sql: str,
    total: int,
    timeout_s: float,
) -> Drained:
    """Start ``procs`` workers, release them together, poll ``progress_sql`` until ``total``.

    The workers get ``worker_args`` after their index (and the URL, from the environment).
    """
    logdir = tempfile.TemporaryDirectory(prefix="bench-peers-")
    workers: list[subprocess.Popen[str]] = []
    logs: list[Path] = []
    try:
        for i in range(procs):
            path = Path(logdir.name) / f"worker-{i}.log"
            logs.append(path)
            with path.open("w") as err:
                workers.append(
                    subprocess.Popen(
                        [sys.executable, script, "worker", str(i), *worker_args],
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        stderr=err,
                        text=True,
                    )
                )
        for w in workers:
            assert w.stdout is not None
            while (line := w.stdout.readline()) and line.strip() != "ready":
                pass
            if not line:
                return Drained(0, None, "a worker exited before it was ready")
        done = 0
        with psycopg.connect(info, autocommit=True) as conn:
            started = time.monotonic()
            for w in workers:
                assert w.stdin is not None
                w.stdin.write("go\n")
                w.stdin.flush()
            deadline = started + timeout_s
            while True:
                done = int(conn.execute(progress_sql).fetchone()[0])  # type: ignore[index]
                if done >= total:
                    return Drained(done, time.monotonic() - started)
                if time.monotonic() > deadline:
                    return Drained(done, None, f"timed out after {timeout_s:g} s")
                if all(w.poll() is not None for w in workers):
                    done = int(conn.execute(progress_sql).fetchone()[0])  # type: ignore[index]
                    if done >= total:
                        return Drained(done, time.monotonic() - started)
                    return Drained(done, None, "every worker exited before the end")
                time.sleep(POLL_S)
    finally:
        stop(workers)
        failed = [p for w, p in zip(workers, logs, strict=False) if w.returncode not in (0, -15)]
        if failed or os.environ.get("BENCH_VERBOSE"):
            for path in failed or logs:
                tail = path.read_text(errors="replace").splitlines()[-30:]
                log(f"--- {path.name}, last {len(tail)} lines")
                for line in tail:
                    print(f"    {line}", file=sys.stderr)
        logdir.cleanup()


def stop(workers: list[subprocess.Popen[str]], timeout_s: float = 10.0) -> None:
    for w in workers:
        if w.poll() is None:
            w.send_signal(signal.SIGTERM)
        if w.stdin is not None:
            with contextlib.suppress(OSError):
                w.stdin.close()
    deadline = time.monotonic() + timeout_s
    for w in workers:
        try:
            w.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            w.kill()
            w.wait()


def elapsed_s(info: str, elapsed_sql: str) -> float | None:
    with psycopg.connect(info, autocommit=True) as conn:
        row = conn.execute(elapsed_sql).fetchone()
    return float(row[0]) if row and row[0] is not None else None


def report(
    peer: str,
    unit: str,
    units_per_job: int,
    drained: Drained,
    db_elapsed: float | None,
    timing: str,
    **extra: Any,
) -> None:
    """The one JSON line the main bench reads: the rate, over database time if there is one."""
    elapsed = db_elapsed if db_elapsed else drained.wall_s
    rate = None
    if drained.wall_s is not None and elapsed:
        rate = units_per_job * drained.done / elapsed
    line = {
        "peer": peer,
        "rate": rate,
        "unit": unit,
        "done": drained.done,
        "elapsed_s": elapsed,
        "wall_s": drained.wall_s,
        "timing": timing if db_elapsed else "wall time, barrier release to last job done",
        "note": drained.note,
        **extra,
    }
    print(json.dumps(line), flush=True)


def main(run: Callable[[list[str]], None], worker: Callable[[int, list[str]], None]) -> None:
    """``script run ARGS`` (the coordinator) or ``script worker I ARGS`` (one worker).

    The database's URL comes from ``BENCH_PEER_URL`` (not the command line, where
    a password would show in ``ps``) and is passed on as the first of ``ARGS``.
    """
    url = os.environ["BENCH_PEER_URL"]
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker(int(sys.argv[2]), [url, *sys.argv[3:]])
    else:
        rest = sys.argv[2:] if len(sys.argv) > 1 and sys.argv[1] == "run" else sys.argv[1:]
        run([url, *rest])
