"""The embedded PostgreSQL (pgserver) seen from outside: is it running, and stopping it.

:func:`engine.store.db.connect` starts the embedded server in
``ENGINE_PGDATA`` on first use when ``ENGINE_DATABASE_URL`` is unset, and
leaves it running for every later process. ``engine db status`` reads its
``postmaster.pid`` (without starting anything); ``engine db stop`` stops it
with pgserver's own ``pg_ctl``, **as the OS user that owns the data folder**:
run as root, pgserver runs the server as its own user (``pgserver``), and
``pg_ctl`` refuses to be run by root at all, so it is run as that owner.
"""

from __future__ import annotations

import os
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from engine.config import Settings
from engine.errors import ConfigError
from engine.infra.json_fields import json_fields

__all__ = ["EmbeddedServer", "embedded_status", "embedded_stop"]

# postmaster.pid: pid, data folder, start time, port, socket folder, host, shared memory, status
_PID, _PORT, _SOCKET_DIR, _HOST, _STATUS = 0, 3, 4, 5, 7


@dataclass(frozen=True)
class EmbeddedServer:
    """What ``engine db status`` shows of the embedded server in ``pgdata``."""

    pgdata: Path
    initialised: bool
    running: bool
    pid: int | None
    url: str | None  # libpq URL of the engine's database; no password (trust on a socket)
    status: str | None  # postmaster.pid's last line: ready, starting, stopping

    def as_json(self) -> dict[str, Any]:
        return json_fields(self)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process (pgserver's, when we are not root)
        return True
    return True


def embedded_status(settings: Settings) -> EmbeddedServer:
    """The embedded server of ``settings.pgdata`` as its ``postmaster.pid`` says; starts nothing."""
    pgdata = settings.pgdata.expanduser().resolve()
    initialised = (pgdata / "PG_VERSION").is_file()
    pid_file = pgdata / "postmaster.pid"
    try:
        lines = pid_file.read_text(encoding="utf-8").splitlines()
    except (FileNotFoundError, PermissionError):
        return EmbeddedServer(pgdata, initialised, False, None, None, None)
    field = [line.strip() for line in lines] + [""] * 8
    try:
        pid = int(field[_PID])
    except ValueError:
        return EmbeddedServer(pgdata, initialised, False, None, None, None)
    if not _alive(pid):  # a stale file left by a server that was killed
        return EmbeddedServer(pgdata, initialised, False, pid, None, None)
    host = field[_SOCKET_DIR] or field[_HOST] or "localhost"
    query = {"host": host, **({"port": field[_PORT]} if field[_PORT] else {})}
    url = f"postgresql://postgres@/{quote(settings.embedded_database)}?{urlencode(query, safe='/')}"
    return EmbeddedServer(pgdata, initialised, True, pid, url, field[_STATUS] or None)


def _pg_ctl() -> Path:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from pgserver import _commands
    except ImportError:
        from engine.store.db import EMBEDDED_MISSING

        raise ConfigError(EMBEDDED_MISSING) from None
    return Path(_commands.POSTGRES_BIN_PATH) / "pg_ctl"


def embedded_stop(settings: Settings, *, timeout_s: float = 60) -> EmbeddedServer | None:
    """Stop the embedded server (fast shutdown: sessions are ended); what was stopped.

    ``None``: it was not running (nothing done). ``pg_ctl`` runs as the
    owner of the data folder: as root that is pgserver's own user. A failure
    is a :class:`ConfigError` with ``pg_ctl``'s message.
    """
    before = embedded_status(settings)
    if not before.running:
        return None
    owner = before.pgdata.stat().st_uid
    as_owner: dict[str, Any] = {}
    if os.geteuid() == 0 and owner != 0:
        # pg_ctl refuses root; the server's own user may stop it (subprocess sets the uid)
        as_owner = {"user": owner, "group": before.pgdata.stat().st_gid, "extra_groups": []}
    try:
        subprocess.run(  # noqa: S603 (pgserver's own pg_ctl, on our data folder)
            [str(_pg_ctl()), "-D", str(before.pgdata), "-w", "-m", "fast", "stop"],
            check=True,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            cwd="/",  # the owner may not be allowed into ours
            **as_owner,
        )
    except subprocess.CalledProcessError as exc:
        raise ConfigError(
            f"could not stop the embedded PostgreSQL in {before.pgdata}: "
            f"{(exc.stderr or exc.stdout or '').strip() or exc}"
        ) from exc
    except subprocess.TimeoutExpired as exc:
        raise ConfigError(
            f"the embedded PostgreSQL in {before.pgdata} did not stop within {timeout_s:g} s"
        ) from exc
    return before
