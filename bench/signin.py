"""Sign-in under attack (issue 34): the console's memory and a real user's sign-in time
while ``BENCH_SIGNIN_RATE`` wrong attempts a second hit it.

Each scenario serves ``engine console`` in a process of its own on a scratch
database (one admin user), behind a pretend proxy (``ENGINE_CONSOLE_TRUSTED_PROXIES``
is 127.0.0.1, so each request names its client in ``X-Forwarded-For``). The
real user signs in once from their address first, then ``BENCH_SIGNIN_USER_N``
times spread over the flood; attackers send wrong passwords for the admin
and unknown names on an open loop (``BENCH_SIGNIN_RATE`` a second, whatever
the answers' speed). The console process's RSS (``/proc/<pid>/status``) is
sampled every 50 ms.

- ``quiet``: no flood (the reference).
- ``one_address``: the flood from one address (the default limits).
- ``many_addresses``: each attempt from a new address (the default limits).
- ``limits_off``: many addresses with the limits lifted and 12 hashes at once
  (what the console did before the throttle, bounded by 12 so as not to
  exhaust the machine: the issue measured 769 MiB at 12 concurrent attempts).

Figures are reported, never failed.

    BENCH_SIGNIN_RATE=50          attempts a second
    BENCH_SIGNIN_S=10             seconds of flood per scenario
    BENCH_SIGNIN_USER_N=10        real sign-ins measured per scenario
    BENCH_SIGNIN_SCENARIOS=quiet,one_address,many_addresses,limits_off
    BENCH_SIGNIN_DATABASE=engine_bench_signin
"""

from __future__ import annotations

import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench.common import ROOT, drop_database, emit, env_float, env_int, fresh_database, log
from engine.config import Settings
from engine.console.users import add_user

USER, PASSWORD = "bench-admin", "the-real-admin-password-1"
USER_ADDRESS = "192.0.2.10"
FLOOD_ADDRESS = "203.0.113.9"
SECRET = "bench-session-key-0123456789-abcdefghij"
_BACKLOG = 96  # attempts sent and not answered yet, at most (one per flooding thread)

SCENARIOS: dict[str, dict[str, str]] = {
    "quiet": {},
    "one_address": {},
    "many_addresses": {},
    "limits_off": {
        "ENGINE_CONSOLE_SIGNIN_PER_ADDRESS_PER_MIN": "10000",
        "ENGINE_CONSOLE_SIGNIN_PER_S": "1000",
        "ENGINE_CONSOLE_SIGNIN_HASHES": "12",
    },
}


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


@dataclass
class Console:
    proc: subprocess.Popen[bytes]
    url: str
    rss: list[float] = field(default_factory=list)


@contextmanager
def serve(info: str, extra: dict[str, str]) -> Iterator[Console]:
    """``engine console`` in its own process on a free port; stopped on exit, its errors shown."""
    port = _free_port()
    env = {**os.environ, **extra}
    env.update(
        ENGINE_DATABASE_URL=info,
        ENGINE_CONSOLE_SECRET=SECRET,
        ENGINE_CONSOLE_TRUSTED_PROXIES="127.0.0.1",
        PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p),
    )
    cmd = [sys.executable, "-m", "engine", "console", "--port", str(port)]
    with tempfile.TemporaryFile() as output:
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stderr=output)
        try:
            yield _started(Console(proc, f"http://127.0.0.1:{port}"))
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            output.seek(0)
            lines = output.read().decode(errors="replace").splitlines()
            errors = [line for line in lines if "Error" in line or "Traceback" in line]
            for line in lines if os.environ.get("BENCH_VERBOSE") else errors[-10:]:
                log(f"console: {line}")


def _started(console: Console) -> Console:
    deadline = time.monotonic() + 60
    while True:
        if console.proc.poll() is not None:
            raise RuntimeError(f"engine console exited with {console.proc.returncode}")
        try:
            if httpx.get(f"{console.url}/signin", timeout=2).status_code == 200:
                return console
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("engine console did not answer in 60 s")
        time.sleep(0.1)


def _session(url: str, address: str) -> tuple[httpx.Client, str]:
    client = httpx.Client(base_url=url, headers={"x-forwarded-for": address}, timeout=60)
    page = client.get("/signin").text
    token = page.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    return client, token


def sign_in_once(url: str, address: str) -> tuple[float, bool]:
    """A real user's sign-in (its POST): seconds, and whether it got in."""
    client, token = _session(url, address)
    try:
        started = time.perf_counter()
        r = client.post("/signin", data={"name": USER, "password": PASSWORD, "csrf": token})
        took = time.perf_counter() - started
    finally:
        client.close()
    ok = r.status_code == 303 and r.headers.get("location") == "/"
    if not ok:
        log(f"the real user refused: {r.status_code} {r.headers.get('location')}")
    return took, ok


class Flood:
    """Wrong sign-ins at ``rate`` a second on an open loop, from one address or a new one each.

    An attempt due while ``_BACKLOG`` are unanswered is skipped (and counted), so the
    flood ends when it should and the bench does not exhaust its own machine.
    """

    def __init__(self, url: str, rate: float, *, many: bool) -> None:
        self.url = url
        self.rate = rate
        self.many = many
        self.sent = 0
        self.skipped = 0
        self.answered = 0
        self.failed = 0
        self._stop = threading.Event()
        self._local = threading.local()
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=96, thread_name_prefix="flood")
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._rng = random.Random(34)

    def _attempt(self, i: int, address: str) -> None:
        try:
            if not hasattr(self._local, "client"):
                self._local.client, self._local.token = _session(self.url, FLOOD_ADDRESS)
            client: httpx.Client = self._local.client
            name = USER if i % 2 else f"nobody{i}"
            data = {"name": name, "password": f"guess-{i}", "csrf": self._local.token}
            client.post("/signin", data=data, headers={"x-forwarded-for": address})
            with self._lock:
                self.answered += 1
        except httpx.HTTPError:
            with self._lock:
                self.failed += 1

    def _run(self) -> None:
        started = time.monotonic()
        while not self._stop.is_set():
            due = started + (self.sent + self.skipped) / self.rate
            if (wait := due - time.monotonic()) > 0:
                self._stop.wait(wait)
                continue
            address = (
                f"198.18.{self._rng.randrange(256)}.{self._rng.randrange(1, 255)}"
                if self.many
                else FLOOD_ADDRESS
            )
            with self._lock:
                backlog = self.sent - self.answered - self.failed
            if backlog >= _BACKLOG:  # the console answers slower than the rate: skip this one
                self.skipped += 1
            else:
                self._pool.submit(self._attempt, self.sent, address)
                self.sent += 1

    def __enter__(self) -> Flood:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._pool.shutdown(wait=True, cancel_futures=True)


def _sample(console: Console, stop: threading.Event) -> None:
    while not stop.wait(0.05):
        if (mib := _rss_mib(console.proc.pid)) is not None:
            console.rss.append(mib)


def run_scenario(info: str, name: str, rate: float, seconds: float, user_n: int) -> None:
    times: list[float] = []
    refused = 0
    lock = threading.Lock()
    with serve(info, SCENARIOS[name]) as console:
        sign_in_once(console.url, USER_ADDRESS)  # the user has signed in from here before
        idle = _rss_mib(console.proc.pid) or 0.0
        stop = threading.Event()
        sampler = threading.Thread(target=_sample, args=(console, stop), daemon=True)
        flood = Flood(console.url, rate, many=name != "one_address")

        def user() -> None:
            nonlocal refused
            took, ok = sign_in_once(console.url, USER_ADDRESS)
            with lock:
                times.append(took)
                refused += not ok

        # the real user's sign-ins spread over the flood, each on time whatever the others take
        users = [threading.Timer((k + 0.5) * seconds / user_n, user) for k in range(user_n)]
        sampler.start()
        try:
            for t in users:
                t.start()
            if name == "quiet":
                time.sleep(seconds)
            else:
                with flood:
                    time.sleep(seconds)
            for t in users:
                t.join()
        finally:
            stop.set()
            sampler.join()
    bench = f"signin/{name}"
    rss = console.rss or [idle]
    emit(bench, "console_rss_mib_idle", idle, "MiB")
    emit(bench, "console_rss_mib_median", statistics.median(rss), "MiB")
    emit(bench, "console_rss_mib_max", max(rss), "MiB")
    emit(bench, "user_signin_s_median", statistics.median(times), "s")
    emit(bench, "user_signin_s_max", max(times), "s")
    emit(bench, "user_signins_refused", refused, f"of {len(times)}")
    if name != "quiet":
        emit(bench, "attempts_sent_per_s", flood.sent / seconds, "attempts/s")
        emit(bench, "attempts_answered_per_s", flood.answered / seconds, "attempts/s")
    log(
        f"{bench}: RSS idle {idle:.0f} MiB, median {statistics.median(rss):.0f}, "
        f"max {max(rss):.0f}; the user's sign-in median {statistics.median(times):.3f} s "
        f"(max {max(times):.3f} s, {refused} of {len(times)} refused)"
        + (
            ""
            if name == "quiet"
            else f"; {flood.sent} attempts sent in {seconds:.0f} s, {flood.answered} answered "
            f"({flood.skipped} skipped while {_BACKLOG} were unanswered)"
        )
    )


def run() -> None:
    rate = env_float("BENCH_SIGNIN_RATE", 50)
    seconds = env_float("BENCH_SIGNIN_S", 10)
    user_n = max(1, env_int("BENCH_SIGNIN_USER_N", 10))
    chosen = (os.environ.get("BENCH_SIGNIN_SCENARIOS") or ",".join(SCENARIOS)).split(",")
    dbname = os.environ.get("BENCH_SIGNIN_DATABASE") or "engine_bench_signin"
    info = fresh_database(dbname=dbname)
    try:
        add_user(Settings(database_url=info), USER, "admin", PASSWORD, actor="bench")
        log(f"sign-in under {rate:.0f} attempts/s for {seconds:.0f} s per scenario: {chosen}")
        for name in chosen:
            if name not in SCENARIOS:
                log(f"unknown sign-in scenario {name!r}; known: {', '.join(SCENARIOS)}")
                continue
            run_scenario(info, name, rate, seconds, user_n)
    finally:
        drop_database(dbname)
