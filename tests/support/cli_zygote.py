"""``engine`` commands for the tests, each in a process forked from one that imported it once.

A CLI test runs ``python -m engine ARGS`` tens of times; each start paid the
interpreter and the engine's imports again (about 0.7-1 s of CPU on the 2-core
CI machine, the largest share of the suite's CPU after PostgreSQL). Here one
server process per xdist worker imports ``engine.cli`` (and the installed
flows) once; each command is a child forked from it, which takes the test's
environment, working directory, ``PYTHONPATH`` and standard input, writes its
standard output and error to files, and ends with the command's exit code: a
real process with its own PID, connections and exit, not a call in the test's
process. What the fork cannot show (what a cold start imports, the installed
script, signals) is tested with real starts (``tests/unit/test_cli_lazy.py``,
``tests/integration/test_installs.py``, ``engine db``, the worker process tests).

The server is single-threaded (a fork copies only the forking thread) and
reaps its children itself; a command past its timeout is killed like
``subprocess.run`` kills it, and raises the same ``TimeoutExpired``.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

SUPPORT = Path(__file__).parent
ROOT = SUPPORT.parent.parent


# -- the server (its own process) -------------------------------------------------------


def _serve(path: str) -> None:
    import pkgutil
    import select

    import engine.cli.main  # noqa: F401  the imports every command pays (read below)
    import flows

    commands = sys.modules["engine.cli.main"].COMMANDS  # `engine.cli.main` is also the group
    for module, _, _ in commands.values():  # every command's own module
        importlib.import_module(module)
    for module in pkgutil.iter_modules(flows.__path__):  # the installed flows (no list set)
        importlib.import_module(f"flows.{module.name}")
    tail = [p for p in sys.path if p and p not in _startup_paths()]
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    print("ready", flush=True)
    while True:
        ready, _, _ = select.select([listener, sys.stdin], [], [])
        if sys.stdin in ready:  # the test process closed our stdin: it is gone
            shutil.rmtree(os.path.dirname(path), ignore_errors=True)
            return
        conn, _ = listener.accept()
        if os.fork() == 0:
            listener.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            _child(conn, tail)  # never returns
        conn.close()


def _startup_paths() -> set[str]:
    """The entries this server's own start put first on ``sys.path`` (its cwd, its
    ``PYTHONPATH``), which a command's start replaces with its own."""
    return {os.getcwd(), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]}


def _child(conn: socket.socket, tail: list[str]) -> None:
    code = 1
    try:
        request = json.loads(conn.makefile("r").readline())
        conn.sendall(json.dumps({"pid": os.getpid()}).encode() + b"\n")
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[:] = [request["cwd"], *extra, *tail]  # as `python -m` in that directory
        importlib.invalidate_caches()
        if "engine.infra.faults" in sys.modules:  # it reads ENGINE_FAULTS at import
            importlib.reload(sys.modules["engine.infra.faults"])
        for fd, name, mode in ((0, "stdin", os.O_RDONLY), (1, "stdout", os.O_WRONLY),
                               (2, "stderr", os.O_WRONLY)):  # fmt: skip
            target = os.open(request[name], mode)
            os.dup2(target, fd)
            os.close(target)
        sys.argv = ["-m", *request["args"]]  # argv[0] becomes engine/__main__.py's path
        code = _run()
    finally:
        try:
            conn.sendall(json.dumps({"returncode": code}).encode() + b"\n")
        finally:
            os._exit(code)


def _run() -> int:
    """The command, as ``python -m engine`` ends: its exit code, atexit handlers run."""
    import runpy

    try:
        runpy.run_module("engine", run_name="__main__", alter_sys=True)  # what `-m` runs
        code: Any = 0
    except SystemExit as exc:
        code = exc.code
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed stream: nothing left to write
            stream.flush()
    return code % 256  # what a parent reads of any exit status


# -- the client (the test's process) ----------------------------------------------------


class CliServer:
    """The server for this test process, started on first use, stopped at exit."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[str] | None = None
        self._dir = ""  # made when the server starts (a process that never runs one makes none)
        self._path = ""

    def _started(self) -> str:
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SUPPORT), str(ROOT)])}
                env.pop("ENGINE_FLOW_MODULES", None)
                if self._dir:
                    shutil.rmtree(self._dir, ignore_errors=True)
                self._dir = tempfile.mkdtemp(prefix="engine-cli-")
                self._path = os.path.join(self._dir, "socket")
                self._proc = subprocess.Popen(
                    [sys.executable, "-c", f"import cli_zygote; cli_zygote._serve({self._path!r})"],
                    env=env,
                    cwd=str(ROOT),
                    stdin=subprocess.PIPE,  # its end when this process ends
                    stdout=subprocess.PIPE,
                    text=True,
                )
                assert self._proc.stdout is not None
                line = self._proc.stdout.readline()
                assert line.strip() == "ready", f"the CLI server did not start: {line!r}"
                atexit.register(self.stop)
            return self._path

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)  # its socket and the commands' files

    def run(
        self,
        args: list[str],
        *,
        env: dict[str, str],
        stdin: str | None,
        timeout: float,
        cwd: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        path = self._started()
        with tempfile.TemporaryDirectory(dir=self._dir) as scratch:
            files = {n: os.path.join(scratch, n) for n in ("stdin", "stdout", "stderr")}
            Path(files["stdin"]).write_text(stdin or "", encoding="utf-8")
            for name in ("stdout", "stderr"):
                Path(files[name]).touch()
            request = {"args": args, "env": env, "cwd": cwd or os.getcwd(), **files}
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.connect(path)
                conn.settimeout(timeout)
                conn.sendall(json.dumps(request).encode() + b"\n")
                answers = conn.makefile("r")
                pid = json.loads(answers.readline())["pid"]
                try:
                    line = answers.readline()
                except TimeoutError:
                    os.kill(pid, signal.SIGKILL)
                    raise subprocess.TimeoutExpired(
                        ["engine", *args], timeout, _text(files["stdout"]), _text(files["stderr"])
                    ) from None
            # no answer: the command died without ending (killed): as a signal's exit
            code = json.loads(line)["returncode"] if line else -signal.SIGKILL
            return subprocess.CompletedProcess(
                [sys.executable, "-m", "engine", *args],
                code,
                _text(files["stdout"]),
                _text(files["stderr"]),
            )


def _text(path: str) -> str:
    """A file's text as ``subprocess.run(text=True)`` reads a pipe (universal newlines)."""
    data = Path(path).read_bytes().decode("utf-8", errors="strict")
    return data.replace("\r\n", "\n").replace("\r", "\n")


SERVER = CliServer()


def run_engine(
    args: list[str] | tuple[str, ...],
    *,
    env: dict[str, str],
    stdin: str | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """``python -m engine ARGS`` as ``subprocess.run(capture_output=True, text=True)`` runs it:
    forked from the server, or started afresh with ``ENGINE_TESTS_CLI_FORK=0``."""
    if os.environ.get("ENGINE_TESTS_CLI_FORK", "1") == "1":
        return SERVER.run(list(args), env=env, stdin=stdin, timeout=timeout)
    return run_cold(args, env=env, stdin=stdin, timeout=timeout)


def run_cold(
    args: list[str] | tuple[str, ...],
    *,
    env: dict[str, str],
    stdin: str | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """``python -m engine ARGS`` started afresh (what a fork is held to)."""
    return subprocess.run(
        [sys.executable, "-m", "engine", *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
