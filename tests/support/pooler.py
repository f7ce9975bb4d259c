"""A real PgBouncer in front of the test PostgreSQL, for tests and the chaos run.

Production PostgreSQL on AWS usually sits behind PgBouncer in transaction
pooling mode: a client connection gets a server session for one transaction
at a time, and the next transaction may run on another session. This module
starts the Debian ``pgbouncer`` binary on 127.0.0.1 (a free port) with that
mode and a small pool, so that server sessions really rotate between clients.

The API is small on purpose (other tests build on it)::

    with PgBouncer(upstream_url, tmp_path, pool_size=2) as bouncer:
        url = bouncer.url          # also returned by start()
        other = bouncer.url_for("other_db")

Any database of the upstream server is reachable through it (a ``*``
fallback entry): :meth:`PgBouncer.url_for` names another one. Clients
authenticate with ``trust`` and PgBouncer logs in upstream with the user (and
password) of ``upstream_url``. ``options`` in the startup packet is refused,
as a default PgBouncer does (``unsupported startup parameter: options``),
unless ``ignore_startup_parameters="options"`` makes it drop them silently.
The URLs are libpq conninfo strings (``host=127.0.0.1 port=... dbname=...``).
As root, PgBouncer (which refuses to run as root) runs as ``postgres`` or
``nobody``, or as the owner of the upstream's socket folder; it logs to
``workdir/pgbouncer.stderr`` (:meth:`PgBouncer.log`).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

from psycopg.conninfo import conninfo_to_dict, make_conninfo

__all__ = ["INSTALL_COMMAND", "PgBouncer", "ensure_pgbouncer"]

INSTALL_COMMAND = "apt-get update && apt-get install -y pgbouncer"
_SEARCH = ("/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin")
# PgBouncer refuses to run as root; as root it is started as this user
_UNPRIVILEGED = ("postgres", "nobody")


def ensure_pgbouncer() -> str:
    """The path of the ``pgbouncer`` binary; raises naming the install command without it."""
    found = shutil.which("pgbouncer") or next(
        (f"{d}/pgbouncer" for d in _SEARCH if os.access(f"{d}/pgbouncer", os.X_OK)), None
    )
    if found is None:
        raise RuntimeError(
            f"pgbouncer is not installed; install it (as root) with: {INSTALL_COMMAND} "
            "(or run `make test` or `make chaos`, which do it when they run as root)"
        )
    return found


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _quote(value: str) -> str:
    return '"' + value.replace('"', '""') + '"'


class PgBouncer:
    """One PgBouncer process between clients and ``upstream_url``'s server.

    ``pool_mode`` is PgBouncer's (``transaction``, ``session``, ``statement``);
    ``pool_size`` is the number of server sessions per database and user;
    ``ignore_startup_parameters`` (e.g. ``options``) makes PgBouncer drop those
    startup parameters silently instead of refusing the connection.
    """

    def __init__(
        self,
        upstream_url: str,
        workdir: Path,
        pool_mode: str = "transaction",
        pool_size: int = 2,
        *,
        ignore_startup_parameters: str = "",
    ) -> None:
        self.upstream = conninfo_to_dict(upstream_url)
        self.workdir = Path(workdir)
        self.pool_mode = pool_mode
        self.pool_size = pool_size
        self.ignore_startup_parameters = ignore_startup_parameters
        self.port: int | None = None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The client URL of the upstream's database, through PgBouncer."""
        return self.url_for(str(self.upstream.get("dbname") or "postgres"))

    def url_for(self, dbname: str) -> str:
        """The client URL of another database of the same server, through PgBouncer."""
        if self.port is None:
            raise RuntimeError("PgBouncer is not started")
        return make_conninfo(
            host="127.0.0.1", port=self.port, dbname=dbname, user=self._user, sslmode="disable"
        )

    @property
    def _user(self) -> str:
        return str(self.upstream.get("user") or pwd.getpwuid(os.getuid()).pw_name)

    def _write_config(self, port: int) -> Path:
        self.workdir.mkdir(parents=True, exist_ok=True)
        host = str(self.upstream.get("host") or "127.0.0.1")
        server = f"host={host} port={self.upstream.get('port') or 5432} user={self._user}"
        password = str(self.upstream.get("password") or "")
        if password:
            server += f" password={password}"
        ini = self.workdir / "pgbouncer.ini"
        ini.write_text(
            "\n".join(
                [
                    "[databases]",
                    f"* = {server}",
                    "[pgbouncer]",
                    "listen_addr = 127.0.0.1",
                    f"listen_port = {port}",
                    "unix_socket_dir =",
                    "auth_type = trust",
                    f"auth_file = {self.workdir / 'userlist.txt'}",
                    f"pool_mode = {self.pool_mode}",
                    f"default_pool_size = {self.pool_size}",
                    "min_pool_size = 0",
                    "reserve_pool_size = 0",
                    "max_client_conn = 200",
                    # a client waits for a server session, never for ever
                    "query_wait_timeout = 30",
                    "server_reset_query =",
                    f"ignore_startup_parameters = {self.ignore_startup_parameters}",
                    "server_check_delay = 0",
                    # no logfile, no pidfile: run as another user (as root), PgBouncer
                    # may not reach the folder; it logs to the stderr file opened here
                    "admin_users = " + self._user,
                    "",
                ]
            )
        )
        (self.workdir / "userlist.txt").write_text(f"{_quote(self._user)} {_quote(password)}\n")
        return ini

    def _run_as(self) -> list[str]:
        if os.getuid() != 0:
            return []
        names = list(_UNPRIVILEGED)
        host = str(self.upstream.get("host") or "")
        if host.startswith("/") and Path(host).is_dir():
            # a local socket (the embedded server's): its folder's owner may reach it
            owner = Path(host).stat().st_uid
            if owner != 0:
                names.insert(0, pwd.getpwuid(owner).pw_name)
        for name in names:
            try:
                pwd.getpwnam(name)
            except KeyError:
                continue
            return ["-u", name]
        raise RuntimeError(f"running as root and none of the users {names} exists")

    def start(self) -> str:
        """Start PgBouncer and wait until it accepts connections; the client URL."""
        binary = ensure_pgbouncer()
        last = ""
        for _ in range(5):  # a free port can be taken between the probe and the bind
            port = _free_port()
            ini = self._write_config(port)
            # a file, not a pipe: a long run's log lines must never block it
            with (self.workdir / "pgbouncer.stderr").open("wb") as stderr:
                self._process = subprocess.Popen(
                    [binary, *self._run_as(), str(ini)],
                    stdout=subprocess.DEVNULL,
                    stderr=stderr,
                )
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and self._process.poll() is None:
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                    if s.connect_ex(("127.0.0.1", port)) == 0:
                        self.port = port
                        return self.url
                time.sleep(0.02)
            last = self._failure()
            self.stop()
        raise RuntimeError(f"pgbouncer did not start: {last}")

    def _failure(self) -> str:
        return self.log()[-3000:].strip() or "no output"

    def log(self) -> str:
        """PgBouncer's log so far (for assertion messages)."""
        log = self.workdir / "pgbouncer.stderr"
        return log.read_text(errors="replace") if log.exists() else ""

    def stop(self) -> None:
        """Stop PgBouncer (SIGINT: at once, closing every connection); idempotent."""
        process, self._process, self.port = self._process, None, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def __enter__(self) -> PgBouncer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
