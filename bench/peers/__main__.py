"""``python -m bench.peers`` (``make bench-peers``): engine, floor and three peers in one run.

The same no-op workload everywhere, in alternating rounds (floor, engine,
Procrastinate, DBOS, pgqueuer one at a time, pgqueuer batched, then again),
each on a fresh database of the engine's server (``ENGINE_DATABASE_URL``, else
the embedded one) with durable commits, then the medians and a table of the
engine's steps/s over each of them, with issue 15's and 38's goals: >= 1.2x the
per-row floor, >= 2x Procrastinate, >= 3x DBOS per step, >= 1x pgqueuer in
batches of 10 (batches of 1 for reference). Figures are reported, never failed
on time; the run fails (exit 1) when the engine or a peer asked for has no figure.

The floor and the engine are ``bench.floor.run`` and ``bench.throughput.run``
(``make bench``'s). The peers run in their own virtualenv, one script each
(``bench/peers/<peer>_run.py``); every peer is timed from its own database
records, first job start to last job end, as the engine is from its events
(the output says which records, or wall time where there are none).

Sizes (environment):

    BENCH_JOBS=2000             engine noop jobs (3 steps each) and DBOS workflows (3 steps each)
    BENCH_PEER_JOBS=3*JOBS      Procrastinate and pgqueuer jobs (one no-op job per step)
    BENCH_FLOOR_ROWS=3*JOBS     rows of the floor table
    BENCH_ROUNDS=3              rounds; medians and ratios of medians are reported
    BENCH_PROCS=2               worker processes, for everyone (floor included)
    BENCH_CONCURRENCY=2         engine slots per worker process
    BENCH_PEER_CONCURRENCY=10   Procrastinate concurrency and DBOS worker_concurrency per process
    BENCH_DBOS_POLL_S=0.01      DBOS queue polling interval (its default, 1 s, caps a process
                                at worker_concurrency workflows a second)
    BENCH_PGQUEUER_BATCHES=1,10 pgqueuer batch sizes (1: one job per dequeue and per log write)
    BENCH_PEERS=procrastinate,dbos,pgqueuer
    BENCH_PEERS_PYTHON=bench/.peers-venv/bin/python
    BENCH_TIMEOUT_S=150         bound on one run
    BENCH_DATABASE=engine_bench_peers  scratch database of the floor and the engine; the
                                peers' are named after it (<name>_procrastinate, ...)
    BENCH_VERBOSE=1             show the workers' logs
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote, urlencode

from psycopg.conninfo import conninfo_to_dict

from bench import common, floor, throughput
from bench.common import (
    drop_database,
    emit,
    env_float,
    env_int,
    env_ints,
    fresh_database,
    log,
    masked,
    server_conninfo,
)
from bench.peers import ratios

HERE = Path(__file__).resolve().parent
PEERS_VENV = HERE.parent / ".peers-venv"


def pip_install(python: Path) -> str:
    """The command that makes the peers' virtualenv of ``python`` (``<venv>/bin/python``)."""
    venv = python.parent.parent
    return (
        f"python3 -m venv {venv} && {venv}/bin/pip install "
        "procrastinate dbos pgqueuer 'psycopg[binary]'"
    )


PEERS = ("procrastinate", "dbos", "pgqueuer")  # import and distribution names alike


def as_url(info: str) -> str:
    """A libpq key=value string as a postgresql:// URL (DBOS, through SQLAlchemy, wants one)."""
    parts = conninfo_to_dict(info)
    auth = quote(str(parts.pop("user", "") or ""), safe="")
    if password := parts.pop("password", None):
        auth += ":" + quote(str(password), safe="")
    host = str(parts.pop("host", "") or "")
    port = parts.pop("port", None)
    dbname = quote(str(parts.pop("dbname", "") or ""), safe="")
    query = {k: str(v) for k, v in parts.items() if v is not None}
    netloc = ""
    if host.startswith("/"):  # a Unix socket (the embedded server): in the query
        query["host"] = host
        if port:
            query["port"] = str(port)
    else:
        netloc = host + (f":{port}" if port else "")
    url = f"postgresql://{auth + '@' if auth else ''}{netloc}/{dbname}"
    # %20 for a space, never urlencode's default `+`: libpq does not decode `+`, and the
    # engine's conninfo carries its connection bounds in `options` ("-c a=b -c ...")
    return url + (f"?{urlencode(query, quote_via=quote)}" if query else "")


def peers_available(python: Path, wanted: list[str]) -> list[str]:
    """The peers that import in the peers' virtualenv (their versions logged); pip for the rest."""
    found = []
    for peer in wanted:
        probe = f"import {peer}, importlib.metadata as m; print(m.version('{peer}'))"
        proc = (
            subprocess.run([str(python), "-c", probe], capture_output=True, text=True, check=False)
            if python.exists()
            else None
        )
        if proc is not None and proc.returncode == 0:
            found.append(peer)
            log(f"{peer} {proc.stdout.strip()} ({python})")
    if missing := [p for p in wanted if p not in found]:
        log(f"not installed in {python}, skipped: {', '.join(missing)}; install with:")
        log(f"    {pip_install(python)}")
    return found


def run_peer(
    python: Path, script: str, dbname: str, args: list[str], timeout_s: float
) -> dict[str, object] | None:
    """One runner in the peers' virtualenv on a fresh database; its JSON line (None on failure)."""
    url = as_url(fresh_database(migrate=False, dbname=dbname))
    try:
        proc = subprocess.run(
            [
                str(python),
                str(HERE / script),
                "run",
                *args,
                str(timeout_s),
                *extra_args(script),
            ],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "BENCH_PEER_URL": url},  # not argv, where ps shows a password
            timeout=timeout_s + 120,
            check=False,
        )
    except subprocess.TimeoutExpired:
        log(f"{script}: no answer in {timeout_s + 120:g} s")
        return None
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        log(f"{script} exited {proc.returncode} without figures")
        return None
    result: dict[str, object] = json.loads(lines[-1])
    return result


def extra_args(script: str) -> list[str]:
    if script == "dbos_run.py":
        return [str(env_float("BENCH_DBOS_POLL_S", 0.01))]
    return []


# each series' unit (the peers' from their runners)
UNITS = {ratios.FLOOR: "rows/s", ratios.ENGINE: "steps/s"}


def record(key: str, result: dict[str, object] | None, rates: dict[str, list[float]]) -> None:
    if result is None:
        return
    rate = result.get("rate")
    bench = f"peers/{key}"
    UNITS[key] = str(result["unit"])
    emit(bench, "rate", rate if isinstance(rate, float | int) else None, UNITS[key])
    done = result.get("done")
    emit(bench, "done", done if isinstance(done, int) else None, str(result.get("done_unit")))
    if result.get("note"):
        log(f"{key}: {result['note']}")
    if isinstance(rate, float | int):
        rates.setdefault(key, []).append(float(rate))
        log(
            f"{key}: {rate:.0f} {result['unit']} ({result['done']} done in "
            f"{result['elapsed_s']:.2f} s, timed by {result['timing']}; "
            f"wall {result['wall_s']:.2f} s)"
        )


def main() -> int:
    jobs = env_int("BENCH_JOBS", 2000)
    peer_jobs = env_int("BENCH_PEER_JOBS", 3 * jobs)
    floor_rows = env_int("BENCH_FLOOR_ROWS", 3 * jobs)
    rounds = max(1, env_int("BENCH_ROUNDS", 3))
    procs = env_int("BENCH_PROCS", 2)
    concurrency = env_int("BENCH_CONCURRENCY", 2)
    peer_concurrency = env_int("BENCH_PEER_CONCURRENCY", 10)
    batches = env_ints("BENCH_PGQUEUER_BATCHES", "1,10")
    timeout_s = env_float("BENCH_TIMEOUT_S", 150)
    wanted = (os.environ.get("BENCH_PEERS") or "procrastinate,dbos,pgqueuer").split(",")
    python = Path(os.environ.get("BENCH_PEERS_PYTHON") or PEERS_VENV / "bin" / "python")
    started = time.monotonic()
    log(f"server: {masked(server_conninfo())}")
    log(
        f"engine {jobs} jobs x 3 steps ({procs} procs x {concurrency} slots); floor {floor_rows} "
        f"rows ({procs} procs); Procrastinate {peer_jobs} jobs ({procs} x {peer_concurrency}); "
        f"DBOS {jobs} workflows x 3 steps ({procs} x {peer_concurrency}); pgqueuer {peer_jobs} "
        f"jobs ({procs} procs, batches {batches}); {rounds} round(s)"
    )
    emit("config", "jobs", jobs, "jobs")
    emit("config", "cpus", os.cpu_count() or 0, "cpus")
    peers = peers_available(python, [p for p in wanted if p in PEERS])
    rates: dict[str, list[float]] = {}
    rows_per_step: list[float] = []  # the engine's, per no-op step (issue 38: was 7.3)
    # its own scratch databases, apart from make bench's engine_bench: two benches on one
    # server must not drop each other's database (or drain each other's jobs)
    scratch = common.SCRATCH_DB = os.environ.get("BENCH_DATABASE") or "engine_bench_peers"
    databases = [scratch]
    try:
        for n in range(1, rounds + 1):
            log(f"round {n} of {rounds}")
            info = fresh_database(migrate=False)
            if (rate := floor.run(info, floor_rows, procs, timeout_s)) is not None:
                rates.setdefault(ratios.FLOOR, []).append(rate)
            result = throughput.run(jobs, procs, concurrency, timeout_s)
            if result.steps_per_s is not None:
                rates.setdefault(ratios.ENGINE, []).append(result.steps_per_s)
            if result.rows_per_step is not None:
                rows_per_step.append(result.rows_per_step)
            if "procrastinate" in peers:
                databases.append(f"{scratch}_procrastinate")
                args = [str(peer_jobs), str(procs), str(peer_concurrency)]
                outcome = run_peer(python, "procrastinate_run.py", databases[-1], args, timeout_s)
                record(ratios.PROCRASTINATE, outcome, rates)
            if "dbos" in peers:
                databases.append(f"{scratch}_dbos")
                args = [str(jobs), str(procs), str(peer_concurrency)]
                record(
                    ratios.DBOS,
                    run_peer(python, "dbos_run.py", databases[-1], args, timeout_s),
                    rates,
                )
            if "pgqueuer" in peers:
                databases.append(f"{scratch}_pgqueuer")
                for batch in batches:
                    args = [str(peer_jobs), str(procs), str(batch)]
                    record(
                        ratios.pgqueuer_key(batch),
                        run_peer(python, "pgqueuer_run.py", databases[-1], args, timeout_s),
                        rates,
                    )
    finally:
        for name in dict.fromkeys(databases):
            try:
                drop_database(name)
            except Exception as exc:
                log(f"could not drop the scratch database {name}: {exc}")
    medians = {key: ratios.median(values) for key, values in rates.items()}
    for key, value in medians.items():
        emit(f"peers/{key}", "rate_median", value, UNITS.get(key, "per s"))
    table = ratios.rows(medians, ratios.lines_for(batches))
    for row in table:
        emit("ratio", f"engine_over/{row.against.key}", row.ratio, "x")
    text = ratios.render(table, medians.get(ratios.ENGINE), {k: len(v) for k, v in rates.items()})
    if (rows_median := ratios.median(rows_per_step)) is not None:
        emit("peers/engine", "rows_written_per_step_median", rows_median, "rows/step")
        text += f"\nengine: {rows_median:.2f} rows written per no-op step (median)"
    print(f"\n{text}\n", file=sys.stderr, flush=True)
    log(f"done in {time.monotonic() - started:.0f} s")
    if missing := ratios.unmeasured(table, [p for p in wanted if p in PEERS]):
        log(f"FAILED: not measured: {', '.join(missing)} (see the log above for why)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
