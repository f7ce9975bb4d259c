"""A TCP fault proxy on 127.0.0.1 between one worker and PostgreSQL.

The harness starts one per partitioned worker (that worker's
``ENGINE_DATABASE_URL`` names the proxy's port) and switches it between:

- ``pass``: bytes go both ways as they come;
- ``blackhole``: a silent partition. Bytes are read and held, never
  forwarded, never answered; no FIN and no RST reach either end, new
  connections are accepted and hear nothing. On the heal the held bytes go
  on in order, as TCP's retransmissions would deliver them once the path is
  back, unless the connection was aborted meanwhile (below);
- ``latency``: each chunk is delivered ``latency_ms`` after it was read;
- ``reset``: every connection is closed with RST (``SO_LINGER`` 0), and so
  is each new one until the mode changes.

A userspace proxy cannot drop packets: its kernel acknowledges every
segment the worker sends and answers every keepalive probe, so the worker's
``tcp_user_timeout`` and keepalives (``engine.store.db.conninfo``) never fire
against it. ``abort_after_s`` stands in for them: in a blackhole, a
connection whose oldest unforwarded byte from the worker is that old (its
``tcp_user_timeout``), or that has been silent for ``idle_abort_s`` (its
keepalive bound), is reset at both ends, as the two kernels would abort it
on a network that drops packets. Set both to ``None`` for a partition that
no TCP bound can see (a proxy or balancer in the path that still
acknowledges). What the worker does about a dead socket (notice, stop its
steps, reconnect) is the engine's own; :attr:`FaultProxy.log` records the
connections, closes and aborts.

One thread runs a selector loop; :meth:`FaultProxy.set_mode` is thread-safe.
Only ever bound to 127.0.0.1, and connecting to 127.0.0.1 (or to the local
server's Unix socket, the embedded server's).
"""

from __future__ import annotations

import collections
import contextlib
import selectors
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

MODES = ("pass", "blackhole", "latency", "reset")
_LOCAL = "127.0.0.1"
_CHUNK = 65536
_TICK_S = 0.02


def _rst(sock: socket.socket | None) -> None:
    """Close ``sock`` with RST: SO_LINGER on with a zero timeout."""
    if sock is None:
        return
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


@dataclass
class _Side:
    sock: socket.socket | None
    out: bytearray = field(default_factory=bytearray)  # to write to this side now
    later: collections.deque[tuple[float, bytes]] = field(default_factory=collections.deque)
    held: bytearray = field(default_factory=bytearray)  # blackholed, for this side
    eof: bool = False  # the other side closed: shut this one once ``out`` is written
    held_eof: bool = False  # ... but that close is held by a blackhole
    read_all: bool = False  # this side closed its end: nothing more to read from it
    read_all: bool = False  # this side closed its end: nothing more to read from it


@dataclass
class _Conn:
    n: int
    client: _Side
    upstream: _Side
    opened: float
    held_since: float | None = None  # oldest byte from the worker held by a blackhole
    quiet_since: float = 0.0  # last byte either way
    closed: bool = False


class FaultProxy:
    """See the module docstring."""

    def __init__(
        self,
        upstream: int | str,
        *,
        name: str = "proxy",
        abort_after_s: float | None = None,
        idle_abort_s: float | None = None,
    ) -> None:
        self.name = name
        self.upstream = upstream  # a port on 127.0.0.1, or a server's Unix socket path
        self.abort_after_s = abort_after_s
        self.idle_abort_s = idle_abort_s
        self.mode = "pass"
        self.latency_s = 0.0
        self.mode_since = time.monotonic()
        self.log: list[tuple[float, str, int]] = []  # (monotonic, what, connection number)
        self._lock = threading.Lock()
        self._sel = selectors.DefaultSelector()
        self._conns: dict[int, _Conn] = {}
        self._next = 0
        self._stop = threading.Event()
        self._listener: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    # -- control (any thread) -----------------------------------------------------------

    def start(self) -> int:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((_LOCAL, 0))
        listener.listen(64)
        listener.setblocking(False)
        self._listener = listener
        self.port = listener.getsockname()[1]
        self._sel.register(listener, selectors.EVENT_READ, None)
        self._thread = threading.Thread(target=self._loop, name=f"proxy-{self.name}", daemon=True)
        self._thread.start()
        return self.port

    def set_mode(self, mode: str, latency_ms: float = 0.0) -> None:
        if mode not in MODES:
            raise ValueError(f"proxy mode {mode!r}; valid: {', '.join(MODES)}")
        with self._lock:
            self.mode = mode
            self.latency_s = latency_ms / 1000
            self.mode_since = time.monotonic()
            self.log.append((self.mode_since, f"mode {mode}", -1))

    def counts(self) -> dict[str, int]:
        with self._lock:
            found: dict[str, int] = collections.Counter(what for _, what, _ in self.log)
        return dict(found)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        for conn in list(self._conns.values()):
            self._close(conn, rst=True, why="")
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.close()
        self._sel.close()

    def __enter__(self) -> FaultProxy:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the loop (its own thread) ------------------------------------------------------

    def _note(self, what: str, n: int) -> None:
        with self._lock:
            self.log.append((time.monotonic(), what, n))

    def _loop(self) -> None:
        previous = "pass"
        while not self._stop.is_set():
            with self._lock:
                mode, latency = self.mode, self.latency_s
            if mode != previous:
                self._switched(previous, mode)
                previous = mode
            for key, events in self._sel.select(timeout=_TICK_S):
                if key.data is None:
                    with self._lock:
                        fresh = self.mode
                    if fresh != previous:  # switched while selecting: the new mode's rules
                        self._switched(previous, fresh)
                        previous = mode = fresh
                    self._accept(mode)
                    continue
                conn, which = key.data
                if conn.closed:
                    continue
                if events & selectors.EVENT_READ:
                    self._read(conn, which, mode, latency)
                if not conn.closed and events & selectors.EVENT_WRITE:
                    self._write(conn, which)
            self._timers(mode)

    def _switched(self, before: str, mode: str) -> None:
        if mode == "reset":
            for conn in list(self._conns.values()):
                self._close(conn, rst=True, why="reset by proxy")
        if before == "blackhole" and mode != "blackhole":
            # the path is back: what TCP held comes through, in order
            for conn in list(self._conns.values()):
                if conn.upstream.sock is None and not conn.closed:
                    self._connect_upstream(conn)
                for side in (conn.client, conn.upstream):
                    side.out += side.held
                    side.held.clear()
                    if side.held_eof:
                        side.eof, side.held_eof = True, False
                conn.held_since = None
                self._interest(conn)

    def _accept(self, mode: str) -> None:
        assert self._listener is not None
        try:
            sock, _ = self._listener.accept()
        except OSError:
            return
        self._next += 1
        n = self._next
        self._note("connect", n)
        if mode == "reset":
            _rst(sock)
            self._note("reset by proxy", n)
            return
        sock.setblocking(False)
        now = time.monotonic()
        conn = _Conn(n, _Side(sock), _Side(None), opened=now, quiet_since=now)
        self._conns[n] = conn
        if mode != "blackhole":
            self._connect_upstream(conn)
        self._interest(conn)

    def _connect_upstream(self, conn: _Conn) -> None:
        try:
            if isinstance(self.upstream, str):
                up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                up.settimeout(5)
                up.connect(self.upstream)
            else:
                up = socket.create_connection((_LOCAL, self.upstream), timeout=5)
        except OSError:
            self._close(conn, rst=True, why="upstream refused")
            return
        up.setblocking(False)
        conn.upstream.sock = up

    def _interest(self, conn: _Conn) -> None:
        for which, side in (("client", conn.client), ("upstream", conn.upstream)):
            if side.sock is None:
                continue
            events = 0 if side.read_all else selectors.EVENT_READ
            if side.out:
                events |= selectors.EVENT_WRITE
            if not events:
                with contextlib.suppress(KeyError, ValueError):
                    self._sel.unregister(side.sock)
                continue
            try:
                self._sel.modify(side.sock, events, (conn, which))
            except KeyError:
                self._sel.register(side.sock, events, (conn, which))
            except (ValueError, OSError):
                pass

    def _read(self, conn: _Conn, which: str, mode: str, latency: float) -> None:
        src = conn.client if which == "client" else conn.upstream
        dst = conn.upstream if which == "client" else conn.client
        assert src.sock is not None
        try:
            data = src.sock.recv(_CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        now = time.monotonic()
        if not data:
            self._note("client closed" if which == "client" else "server closed", conn.n)
            with contextlib.suppress(KeyError, ValueError):
                self._sel.unregister(src.sock)
            src.read_all = True
            if mode == "blackhole":
                dst.held_eof = True
            else:
                dst.eof = True
                if not dst.out and not dst.later:
                    self._close(conn, rst=False, why="")
                    return
            self._interest(conn)
            return
        conn.quiet_since = now
        if mode == "blackhole":
            dst.held += data
            if which == "client" and conn.held_since is None:
                conn.held_since = now
        elif mode == "latency":
            dst.later.append((now + latency, data))
        else:
            dst.out += data
        self._interest(conn)

    def _write(self, conn: _Conn, which: str) -> None:
        side = conn.client if which == "client" else conn.upstream
        if side.sock is None or not side.out:
            return
        try:
            sent = side.sock.send(side.out)
        except BlockingIOError:
            return
        except OSError:
            self._close(conn, rst=True, why="write failed")
            return
        del side.out[:sent]
        if not side.out and side.eof and not side.later:
            self._close(conn, rst=False, why="")
            return
        self._interest(conn)

    def _timers(self, mode: str) -> None:
        now = time.monotonic()
        for conn in list(self._conns.values()):
            if conn.closed:
                continue
            moved = False
            for side in (conn.client, conn.upstream):
                while side.later and side.later[0][0] <= now:
                    side.out += side.later.popleft()[1]
                    moved = True
            if moved:
                self._interest(conn)
            if mode != "blackhole":
                continue
            if (
                self.abort_after_s is not None
                and conn.held_since is not None
                and now - conn.held_since >= self.abort_after_s
            ):
                self._close(conn, rst=True, why="aborted (tcp_user_timeout)")
            elif (
                self.idle_abort_s is not None
                and conn.held_since is None
                and now - max(conn.quiet_since, self.mode_since) >= self.idle_abort_s
            ):
                self._close(conn, rst=True, why="aborted (keepalives)")

    def _close(self, conn: _Conn, *, rst: bool, why: str) -> None:
        if conn.closed:
            return
        conn.closed = True
        for side in (conn.client, conn.upstream):
            if side.sock is None:
                continue
            with contextlib.suppress(KeyError, ValueError, OSError):
                self._sel.unregister(side.sock)
            if rst:
                _rst(side.sock)
            else:
                with contextlib.suppress(OSError):
                    side.sock.close()
        self._conns.pop(conn.n, None)
        if why:
            self._note(why, conn.n)
