"""A pooler between the engine and PostgreSQL: PgBouncer (transaction pooling), RDS Proxy.

Behind a transaction pooler a client connection borrows a server session for
one transaction at a time; its next transaction may run on another session,
which other clients used in between. Whatever lives in a session rather than
in a transaction is then lost, or worse, found by someone else (issue 27):

- **Startup options.** The bounds and the session role of every engine
  connection (:func:`engine.store.db.conninfo`) travel as ``options=-c ...``
  in the startup packet. PgBouncer refuses the packet ("unsupported startup
  parameter: options"), or with ``ignore_startup_parameters = options``
  drops them silently. Behind a pooler they are not sent: every transaction
  starts with one ``SELECT set_config(name, value, true)`` statement
  (``SET LOCAL``) that sets them for that transaction, on whichever server
  session it runs (one round trip more per transaction). A statement on an
  autocommit connection (a queue receive, a heartbeat renewal) would have no
  ``BEGIN``, hence no bounds and no role: it is given a transaction of its
  own (``BEGIN``, the settings, the statement, ``COMMIT``: three round trips
  more). Only statements sent by ``execute`` are (a ``COPY`` or
  ``executemany`` in autocommit is not; the engine sends none). The client's
  TCP keepalives and ``tcp_user_timeout`` are libpq's own and still apply;
  the pooler-to-server leg has the pooler's (``tcp_keepalive``).
- **Prepared statements.** The checkpoint's SQL-level ``PREPARE``/``EXECUTE``
  (:mod:`engine.store.prepared`) is tracked by neither pooler, and neither
  are psycopg's protocol-level ones with Debian 12's PgBouncer 1.18
  (PgBouncer 1.21+ tracks protocol-level ones when ``max_prepared_statements``
  is set; the engine does not rely on it). Behind a pooler both are off
  (``ENGINE_PREPARED_STATEMENTS=auto``); a statement found missing all the
  same is "not done, try again" at no attempt, and its connection stops
  preparing.
- **LISTEN.** A ``LISTEN`` registers a server session the client no longer
  holds once its transaction ends: it hears nothing. Behind a pooler the
  PostgreSQL transport and the outbox relay poll every
  ``ENGINE_POOLED_POLL_S`` instead.

``ENGINE_POOLER`` says which it is; ``auto`` (the default) finds out at the
first connection of the process to a server, once: a pooler that refuses the
startup options is one, and otherwise the server is asked where it saw the
connection arrive (``inet_server_addr()``, ``inet_server_port()``, its own
``port``): a different address or port than the one the client dialed means
something sits between them. Its limits: a port mapping or a load balancer
that is no pooler (Docker's ``-p 15432:5432``, a Kubernetes Service, an NLB)
is taken for one, which is safe and only slower (set ``ENGINE_POOLER=none``);
a pooler that kept both the address and the port the server listens on (one
listening on the server's own address and port, which the server holds) or a
proxy that forges the server's view of the socket would be missed: set
``ENGINE_POOLER=transaction`` there. ``ENGINE_PREPARED_STATEMENTS=off`` is
always safe.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import ClientCursor, pq
from psycopg.rows import dict_row

from engine.config import Settings
from engine.store.errors import wrap_errors
from engine.store.queries import load

__all__ = [
    "PooledConnection",
    "PooledCursor",
    "Route",
    "prepared_enabled",
    "probe",
    "refused_options",
    "remember",
    "set_local",
]

log = logging.getLogger(__name__)
_q = load("server")

_lock = threading.Lock()
_routes: dict[str, Route] = {}
_tried: set[tuple[str, str]] = set()


@dataclass(frozen=True)
class Route:
    """How connections reach the server: ``pooled`` through a transaction pooler, and why."""

    pooled: bool
    reason: str


def known(settings: Settings, server: str) -> Route | None:
    """The route to ``server`` (a conninfo without the engine's options), if known yet."""
    if settings.pooler == "none":
        return Route(False, "ENGINE_POOLER=none")
    if settings.pooler == "transaction":
        return Route(True, "ENGINE_POOLER=transaction")
    with _lock:
        return _routes.get(server)


def remember(server: str, route: Route) -> Route:
    """Keep what ``auto`` found for ``server``, for every later connection of this process."""
    with _lock:
        if server not in _routes:
            log.log(
                logging.INFO if route.pooled else logging.DEBUG,
                "database connection %s: %s",
                "through a transaction pooler" if route.pooled else "direct",
                route.reason,
            )
        return _routes.setdefault(server, route)


def forget_routes() -> None:
    """Detect again at the next connection (tests)."""
    with _lock:
        _routes.clear()
        _tried.clear()


def first_of(server: str, role: str) -> bool:
    """True the first time a pooled connection to ``server`` takes ``role`` in this process."""
    with _lock:
        if (server, role) in _tried:
            return False
        _tried.add((server, role))
        return True


def forget_first(server: str, role: str) -> None:
    """The first try failed: the next connection tries again."""
    with _lock:
        _tried.discard((server, role))


def refused_options(exc: BaseException) -> bool:
    """``exc`` is a pooler refusing the startup packet's ``options`` (PgBouncer's message)."""
    return "unsupported startup parameter" in str(exc)


@wrap_errors
def probe(conn: psycopg.Connection[Any]) -> Route:
    """Compare where ``conn`` dialed with where the server saw it arrive (module docstring)."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(_q["server_select_address"]).fetchone()
    if not conn.autocommit:
        conn.rollback()
    assert row is not None, "the probe returns one row"
    addr, port, listen_port = row["addr"], row["port"], row["listen_port"]
    dialed_addr, dialed_port = conn.info.hostaddr, int(conn.info.port)
    dialed = f"{dialed_addr or 'a local socket'}:{dialed_port}"
    if addr is None:  # the server saw a local socket
        if dialed_addr:
            return Route(True, f"dialed {dialed}, the server saw a local socket")
        if dialed_port != listen_port:
            return Route(True, f"dialed {dialed}, the server listens on port {listen_port}")
        return Route(False, f"a local socket, port {listen_port}")
    if not dialed_addr:
        return Route(True, f"dialed {dialed}, the server saw TCP to {addr}:{port}")
    if dialed_port != port or not _same_address(dialed_addr, addr):
        return Route(True, f"dialed {dialed}, the server saw {addr}:{port}")
    return Route(False, f"{addr}:{port}")


def _same_address(a: str, b: str) -> bool:
    try:
        return ipaddress.ip_address(a) == ipaddress.ip_address(b)
    except ValueError:
        return a == b


def prepared_enabled(settings: Settings, route: Route) -> bool:
    """Whether the engine's SQL-level prepared statements are used on this route."""
    if settings.prepared_statements == "auto":
        return not route.pooled
    return settings.prepared_statements == "on"


def set_local(conn: psycopg.Connection[Any], values: Sequence[tuple[str, str]]) -> bytes:
    """The statement that sets ``values`` for the current transaction only, bound for ``conn``."""
    binder = ClientCursor(conn)
    params = {"names": [n for n, _ in values], "values": [v for _, v in values]}
    return binder.mogrify(_q["session_set_local"], params).encode()


# the psycopg internals PooledConnection follows; checked where it is used
HOOKABLE = all(
    callable(getattr(psycopg.Connection, name, None))
    for name in ("_exec_command", "_get_tx_start_command")
)


class PooledCursor(psycopg.Cursor[Any]):
    """A statement on an autocommit pooled connection runs in a transaction of its own.

    It has no ``BEGIN`` otherwise, hence no ``SET LOCAL``: it would run with
    neither the bounds nor the role (a heartbeat renewal blocked on a lock
    for ever). Three round trips more per statement (``BEGIN``, the settings,
    ``COMMIT``); its rows are fetched before the commit.
    """

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        conn = self.connection
        if (
            conn.autocommit
            and isinstance(conn, PooledConnection)
            and conn._set_local
            and conn.pgconn.transaction_status == pq.TransactionStatus.IDLE
        ):
            with conn.transaction():
                return super().execute(query, params, **kwargs)
        return super().execute(query, params, **kwargs)


class PooledConnection(psycopg.Connection[Any]):
    """A connection through a transaction pooler: each transaction first sets its settings.

    ``BEGIN`` is followed at once by :func:`set_local`'s statement, whichever way
    the transaction begins (``conn.transaction()`` or a first statement outside
    autocommit; in autocommit, :class:`PooledCursor` gives each statement its
    own). psycopg has no public hook for it: this follows its internal
    ``_exec_command``, through which it sends ``BEGIN``; psycopg is pinned to
    the versions it was tested on (pyproject.toml) and
    ``tests/integration/test_psycopg_seams.py`` fails if that changes.
    """

    _set_local: bytes = b""

    def _exec_command(
        self, command: Any, result_format: pq.Format = pq.Format.TEXT
    ) -> Generator[Any, Any, Any]:
        result = yield from super()._exec_command(command, result_format)
        if self._set_local and command == self._get_tx_start_command():
            yield from super()._exec_command(self._set_local)
        return result
