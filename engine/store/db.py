"""Connections to PostgreSQL: the configured server or the embedded one.

``ENGINE_DATABASE_URL`` wins. Without it, an embedded PostgreSQL (``pgserver``)
is started in ``ENGINE_PGDATA`` on first use and left running, so every later
process (CLI, workers, tests) reuses the same server.

A process whose settings name a ``session_role`` (``engine worker`` sets it
from ``ENGINE_WORKER_ROLE``) takes that role on every connection it opens,
through libpq's ``options=-c role=...``: its statements then run with the
role's privileges, not the login's.

Every connection is bounded, and :func:`conninfo` is the one place that says
how (issue 27): ``lock_timeout`` and ``statement_timeout`` (an operator command
asks for a shorter lock wait), and TCP keepalives plus ``tcp_user_timeout`` at
both ends, as libpq parameters for the client's socket and as settings for the
server's. A heartbeat never blocks forever on a dead socket, and a session
whose worker vanished behind a silent partition is ended by the server, its
row locks released. The settings decide: they replace the same parameters
in the URL.
"""

from __future__ import annotations

import contextlib
import fcntl
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import dict_row

from engine.config import Settings
from engine.errors import ConfigError
from engine.infra.secrets import mask_url
from engine.store import pooler, prepared
from engine.store import server as server_store
from engine.store.errors import connect_errors

_embedded_lock = threading.Lock()
_embedded_conninfo: dict[Path, str] = {}


def conninfo(
    settings: Settings,
    *,
    lock_timeout_s: float | None = None,
    statement_timeout_s: float | None = None,
) -> str:
    """The libpq connection string for ``settings`` (may contain a secret).

    It carries the bounds of every engine connection (module docstring):
    ``lock_timeout_s`` and ``statement_timeout_s`` when given, else the
    settings' (0: unbounded, for migrations only), and ``-c role=<session_role>``
    when ``settings`` names one, so every connection made from it (psycopg,
    SQLAlchemy) is bounded and runs under that role. This is the direct
    connection's form: :func:`connect` knows the pooled one.
    """
    info = _client_conninfo(settings, _server_conninfo(settings))
    values = _session_values(settings, lock_timeout_s, statement_timeout_s, socket=True)
    # after the URL's own options: the settings decide (a URL made by this
    # function and passed on keeps no stale bound)
    return _with_options(info, " ".join(f"-c {name}={value}" for name, value in values))


def _client_conninfo(settings: Settings, server: str) -> str:
    """``server`` with the client's own parameters: libpq's, never sent to the server."""
    keepalives = {
        "keepalives": 1,
        "keepalives_idle": settings.tcp_keepalives_idle_s,
        "keepalives_interval": settings.tcp_keepalives_interval_s,
        "keepalives_count": settings.tcp_keepalives_count,
        "tcp_user_timeout": _ms(settings.tcp_user_timeout_s),
    }
    # named in pg_stat_activity (and in an operator's "busy" message) unless the URL names it
    return make_conninfo(server, fallback_application_name="engine", **keepalives)


def _session_values(
    settings: Settings,
    lock_timeout_s: float | None,
    statement_timeout_s: float | None,
    *,
    socket: bool,
) -> list[tuple[str, str]]:
    """The server settings of an engine session: its bounds, then its role.

    ``socket``: the server's end of the socket too, so that a vanished client's
    session (and its row locks) ends within the same bound; meaningless for
    one transaction behind a pooler, whose own settings bound that leg. That
    includes a session busy in a statement (a lock wait above all): the server
    looks at its client every keepalive interval
    (``client_connection_check_interval``), so a killed worker's session ends
    then, not when its lock wait does, and frees the locks it held meanwhile.
    """
    lock = settings.lock_timeout_s if lock_timeout_s is None else lock_timeout_s
    statement = settings.statement_timeout_s if statement_timeout_s is None else statement_timeout_s
    values = [("lock_timeout", str(_ms(lock))), ("statement_timeout", str(_ms(statement)))]
    if socket:
        values += [
            ("tcp_keepalives_idle", str(settings.tcp_keepalives_idle_s)),
            ("tcp_keepalives_interval", str(settings.tcp_keepalives_interval_s)),
            ("tcp_keepalives_count", str(settings.tcp_keepalives_count)),
            ("tcp_user_timeout", str(_ms(settings.tcp_user_timeout_s))),
            ("client_connection_check_interval", str(_ms(settings.tcp_keepalives_interval_s))),
        ]
    if settings.session_role:
        values.append(("role", settings.session_role))
    return values


def _option_values(options: str) -> list[tuple[str, str]]:
    """``-c name=value`` settings of a libpq ``options`` string (``--name=value`` too)."""
    values: list[tuple[str, str]] = []
    words = options.split()
    for i, word in enumerate(words):
        if word == "-c" and i + 1 < len(words):
            word = words[i + 1]
        elif word.startswith(("-c", "--")):
            word = word[2:]
        else:
            continue
        name, sep, value = word.partition("=")
        if sep:
            values.append((name.replace("-", "_"), value))
    return values


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


def _with_options(info: str, options: str) -> str:
    # after the URL's own options, never instead of them
    current = conninfo_to_dict(info).get("options")
    return make_conninfo(info, options=f"{current} {options}" if current else options)


def _server_conninfo(settings: Settings) -> str:
    if settings.database_url is not None:
        url = settings.database_url.get_secret_value()
        try:
            conninfo_to_dict(url)
        except psycopg.ProgrammingError:
            # `from None`: the driver's message may quote the URL, password included
            raise ConfigError(
                f"ENGINE_DATABASE_URL is not a valid PostgreSQL URL: {mask_url(url)!r} "
                "(expected e.g. postgresql://user@127.0.0.1:5432/dbname)"
            ) from None
        return url
    return _embedded(settings)


EMBEDDED_MISSING = (
    "ENGINE_DATABASE_URL is unset and the embedded PostgreSQL (pgserver) is not installed: "
    "set ENGINE_DATABASE_URL=postgresql://USER@HOST:5432/DBNAME, or for development "
    "install the dev extra: pip install 'erp-engine[dev]'"
)


def _embedded(settings: Settings) -> str:
    try:
        with warnings.catch_warnings():
            # platformdirs warns about XDG_RUNTIME_DIR in containers; harmless here
            warnings.simplefilter("ignore")
            import pgserver
    except ImportError:
        # the API and worker installs never carry it (the dev extra does)
        raise ConfigError(EMBEDDED_MISSING) from None
    pgdata = settings.pgdata.expanduser().resolve()
    with _embedded_lock:
        if pgdata in _embedded_conninfo:
            return _embedded_conninfo[pgdata]
        pgdata.mkdir(parents=True, exist_ok=True)
        # pgserver serialises start-up itself only within one process; a file
        # lock keeps two processes from initdb-ing the same folder at once.
        with (pgdata.parent / f"{pgdata.name}.lock").open("w") as lock_file:
            fcntl.flock(lock_file, fcntl.LOCK_EX)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    server = pgserver.get_server(pgdata, cleanup_mode=None)  # type: ignore[attr-defined]
            except Exception as exc:
                raise ConfigError(
                    f"could not start the embedded PostgreSQL in {pgdata}: {exc}; "
                    "set ENGINE_DATABASE_URL to use another server"
                ) from exc
            admin = server.get_uri()
            with psycopg.connect(admin, autocommit=True) as conn:
                server_store.database_create_if_absent(conn, settings.embedded_database)
        info = make_conninfo(admin, dbname=settings.embedded_database)
        _embedded_conninfo[pgdata] = info
        return info


def connect(
    settings: Settings,
    *,
    autocommit: bool = False,
    lock_timeout_s: float | None = None,
    statement_timeout_s: float | None = None,
    **kwargs: Any,
) -> psycopg.Connection[Any]:
    """Open a new, bounded connection (rows as dicts). Errors name the masked URL.

    ``lock_timeout_s`` and ``statement_timeout_s`` replace the settings' bounds
    for this connection (see :func:`conninfo`). ``options`` (e.g. ``-c
    idle_in_transaction_session_timeout=...``) are added to those of the URL
    and of the session role, never replacing them. Behind a transaction pooler
    (:mod:`engine.store.pooler`, detected at the first connection with
    ``ENGINE_POOLER=auto``) the same settings are set by each transaction.
    """
    extra = str(kwargs.pop("options", None) or "")
    kwargs.setdefault("row_factory", dict_row)
    server = _server_conninfo(settings)
    route = pooler.known(settings, server)
    with connect_errors(settings):
        if route is None or not route.pooled:
            info = conninfo(
                settings, lock_timeout_s=lock_timeout_s, statement_timeout_s=statement_timeout_s
            )
            if extra:
                info = _with_options(info, extra)
            try:
                conn = psycopg.connect(
                    info,
                    autocommit=autocommit,
                    connect_timeout=settings.connect_timeout_s,
                    **kwargs,
                )
            except psycopg.OperationalError as exc:
                if route is not None or not pooler.refused_options(exc):
                    raise
                route = pooler.remember(
                    server, pooler.Route(True, "the startup options were refused (PgBouncer)")
                )
            else:
                if route is None:
                    try:
                        route = pooler.remember(server, pooler.probe(conn))
                    except BaseException:
                        conn.close()
                        raise
                if not route.pooled:
                    prepared.configure(conn, enabled=pooler.prepared_enabled(settings, route))
                    return conn
                conn.close()  # its options may have been dropped by the pooler
        return _connect_pooled(
            settings,
            server,
            route,
            autocommit=autocommit,
            values=_session_values(settings, lock_timeout_s, statement_timeout_s, socket=False)
            + _option_values(extra),
            **kwargs,
        )


def _connect_pooled(
    settings: Settings,
    server: str,
    route: pooler.Route,
    *,
    autocommit: bool,
    values: list[tuple[str, str]],
    **kwargs: Any,
) -> psycopg.Connection[Any]:
    """A connection through a transaction pooler: no startup options, no prepared statements."""
    if not pooler.HOOKABLE:
        # never silently unbounded: each transaction could not set its bounds
        raise ConfigError(
            f"psycopg {psycopg.__version__} lacks the internals the engine uses behind a "
            "transaction pooler (engine/store/pooler.py); install the psycopg version the "
            "engine pins, or connect without a pooler"
        )
    params = conninfo_to_dict(_client_conninfo(settings, server))
    url_options = str(params.pop("options", None) or "")
    conn = pooler.PooledConnection.connect(
        make_conninfo("", **params),
        autocommit=autocommit,
        # psycopg's own (protocol-level) prepared statements: not tracked either
        prepare_threshold=None,
        cursor_factory=pooler.PooledCursor,
        connect_timeout=settings.connect_timeout_s,
        **kwargs,
    )
    conn._set_local = pooler.set_local(conn, _option_values(url_options) + values)
    if pooler.first_of(server, settings.session_role):
        # once per process: a refused role or setting is the connection's
        # error (as the startup options' would be), not every transaction's
        try:
            with conn.transaction():
                pass
        except psycopg.Error as exc:
            conn.close()
            pooler.forget_first(server, settings.session_role)
            raise psycopg.OperationalError(str(exc)) from exc
    prepared.configure(conn, enabled=pooler.prepared_enabled(settings, route))
    return conn


def pooled(settings: Settings) -> bool:
    """Whether connections reach the server through a transaction pooler (one connection
    is opened to find out, the first time, with ``ENGINE_POOLER=auto``)."""
    route = pooler.known(settings, _server_conninfo(settings))
    if route is None:
        connect(settings, autocommit=True).close()
        route = pooler.known(settings, _server_conninfo(settings))
    return route is not None and route.pooled


@contextlib.contextmanager
def transaction(settings: Settings) -> Iterator[psycopg.Connection[Any]]:
    """A connection inside one transaction: committed on success, rolled back on error."""
    with connect(settings) as conn, conn.transaction():
        yield conn
