"""Sign-in cannot be used against the console: limits before any hash, and a bound on hashes.

Each password sign-in costs an argon2 hash (64 MiB, about 0.1 s of a core).
Unthrottled, a few dozen attempts a second exhaust the console's memory and
slow every real sign-in. So an attempt is admitted, or refused before
anything is hashed, by two token buckets in this order:

- its **address's** (``ENGINE_CONSOLE_SIGNIN_PER_ADDRESS_PER_MIN`` a minute,
  an IPv6 address counted as its /64), so one address's flood never spends
  what everyone shares;
- the **global** one (``ENGINE_CONSOLE_SIGNIN_PER_S`` a second, all
  addresses together), which an address a user signed in from in this
  process's last ``session_hours`` skips: a flood from many addresses still
  lets people in from where they signed in before.

An admitted attempt then hashes under a gate of ``ENGINE_CONSOLE_SIGNIN_HASHES``
slots, so memory is bounded; past the slots it waits (up to four attempts
per slot wait), beyond that it is refused at once. An address someone
signed in from waits first and always finds a place. All of this
is per console process (in memory); failed passwords and locks are counted
in the database (:mod:`engine.console.users`) so every process agrees.

The address is the socket peer's, or, when the peer is a trusted proxy
(``ENGINE_CONSOLE_TRUSTED_PROXIES``, e.g. the load balancer's subnets), the
rightmost address of ``X-Forwarded-For`` that is not a trusted proxy: what
the client wrote there itself is never believed.
"""

from __future__ import annotations

import collections
import ipaddress
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network

from starlette.requests import Request

from engine.console.settings import ConsoleSettings
from engine.errors import EngineError

__all__ = ["SignInThrottle", "Throttled", "client_address"]

log = logging.getLogger(__name__)

IPAddress = IPv4Address | IPv6Address
IPNetwork = IPv4Network | IPv6Network

_MAX_ADDRESSES = 10_000  # per-address buckets kept before the full (idle) ones are dropped
_MAX_KNOWN = 10_000  # addresses remembered as signed in from
_REPORT_EVERY_S = 60.0  # at most one log line a minute about refusals before hashing


class Throttled(EngineError):
    """A sign-in refused before any hash: its address's or everyone's limit, or no hash slot.

    ``reason`` (``address``, ``global``, ``busy``) is for the log; the person is
    answered as for a wrong password.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(f"sign-in throttled ({reason})")
        self.reason = reason


class _Buckets:
    """Token buckets by key: ``burst`` tokens, refilled at ``per_s``; each take spends one."""

    def __init__(self, per_s: float, burst: float, clock: Callable[[], float]) -> None:
        self.per_s = per_s
        self.burst = burst
        self.clock = clock
        self._tokens: dict[str, tuple[float, float]] = {}  # key -> (tokens, at)

    def take(self, key: str) -> bool:
        now = self.clock()
        tokens, at = self._tokens.get(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - at) * self.per_s)
        if tokens < 1:
            self._tokens[key] = (tokens, now)
            return False
        self._tokens[key] = (tokens - 1, now)
        if len(self._tokens) > _MAX_ADDRESSES:
            self._drop_full(now)
        return True

    def give_back(self, key: str) -> None:
        if key in self._tokens:
            tokens, at = self._tokens[key]
            self._tokens[key] = (min(self.burst, tokens + 1), at)

    def _drop_full(self, now: float) -> None:
        """Forget buckets refilled by now: a full bucket is the same as none."""
        full = [
            k
            for k, (tokens, at) in self._tokens.items()
            if tokens + (now - at) * self.per_s >= self.burst
        ]
        for k in full:
            del self._tokens[k]


class SignInThrottle:
    """The console process's limits on sign-in attempts and its gate on hashes.

    Thread-safe: :meth:`admit` runs on the event loop, :meth:`hashing` in
    the thread pool. Counters (``hashes``, ``max_in_flight``, ``refused``)
    say what it did.
    """

    def __init__(
        self,
        *,
        per_address_per_min: int,
        per_s: float,
        hashes: int,
        waiting: int | None = None,
        known_for_s: float = 12 * 3600,
        trusted_proxies: Sequence[IPNetwork] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_address_per_min = per_address_per_min
        self.per_s = per_s
        self.bound = hashes
        self.waiting_bound = 4 * hashes if waiting is None else waiting
        self.known_for_s = known_for_s
        self.trusted_proxies = list(trusted_proxies)
        self.clock = clock
        self._lock = threading.Lock()
        self._by_address = _Buckets(per_address_per_min / 60, per_address_per_min, clock)
        self._everyone = _Buckets(per_s, max(1.0, per_s), clock)
        self._known: collections.OrderedDict[str, float] = collections.OrderedDict()
        self._gate = threading.Condition()
        self.in_flight = 0
        self.waiting = 0
        self.known_waiting = 0
        self.max_in_flight = 0
        self.hashes = 0
        self.refused: collections.Counter[str] = collections.Counter()
        self._reported = collections.Counter[str]()
        self._reported_at = clock()

    @classmethod
    def from_settings(cls, console: ConsoleSettings) -> SignInThrottle:
        return cls(
            per_address_per_min=console.signin_per_address_per_min,
            per_s=console.signin_per_s,
            hashes=console.signin_hashes,
            known_for_s=console.session_hours * 3600,
            trusted_proxies=console.trusted_proxies,
        )

    def address(self, request: Request) -> str:
        """The request's client address, as :func:`client_address` decides it."""
        peer = request.client.host if request.client else None
        forwarded = ",".join(request.headers.getlist("x-forwarded-for")) or None
        return client_address(peer, forwarded, self.trusted_proxies)

    # -- before hashing --------------------------------------------------------------------

    def admit(self, address: str) -> None:
        """Spend one attempt of ``address``'s and everyone's allowance; else :class:`Throttled`."""
        with self._lock:
            if not self._by_address.take(address):
                self._refuse("address")
            if not self._is_known(address) and not self._everyone.take("*"):
                self._refuse("global")

    def signed_in(self, address: str) -> None:
        """Someone signed in from ``address``: its attempt is given back (only failures count
        against an address) and the global limit no longer holds it back."""
        with self._lock:
            self._by_address.give_back(address)
            self._known[address] = self.clock()
            self._known.move_to_end(address)
            while len(self._known) > _MAX_KNOWN:
                self._known.popitem(last=False)

    def _is_known(self, address: str) -> bool:
        at = self._known.get(address)
        if at is None:
            return False
        if self.clock() - at > self.known_for_s:
            del self._known[address]
            return False
        return True

    def _refuse(self, reason: str) -> None:
        """Count the refusal (the log says how many, at most once a minute) and raise it."""
        self.refused[reason] += 1
        now = self.clock()
        if now - self._reported_at >= _REPORT_EVERY_S:
            new = self.refused - self._reported
            log.warning(
                "console: %d sign-in attempts refused before hashing in the last %.0f s "
                "(over an address's limit: %d, over the global limit: %d, no hash slot: %d)",
                sum(new.values()),
                now - self._reported_at,
                new["address"],
                new["global"],
                new["busy"],
            )
            self._reported = self.refused.copy()
            self._reported_at = now
        raise Throttled(reason)

    # -- hashing ---------------------------------------------------------------------------

    @contextmanager
    def hashing(self, address: str | None = None) -> Iterator[None]:
        """One of the bounded hash slots for the block; waits for one, or :class:`Throttled`.

        An ``address`` someone signed in from goes before the others and is
        never refused for want of a waiting place (its own rate bounds it).
        """
        with self._lock:
            known = address is not None and self._is_known(address)
        with self._gate:
            if not known and self.in_flight >= self.bound and self.waiting >= self.waiting_bound:
                with self._lock:
                    self._refuse("busy")
            self.waiting += 1
            self.known_waiting += known
            try:
                while self.in_flight >= self.bound or (not known and self.known_waiting):
                    self._gate.wait()
            finally:
                self.waiting -= 1
                self.known_waiting -= known
            self.in_flight += 1
            self.hashes += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            yield
        finally:
            with self._gate:
                self.in_flight -= 1
                self._gate.notify_all()  # a known waiter first: the others wait on


def client_address(peer: str | None, forwarded: str | None, trusted: Sequence[IPNetwork]) -> str:
    """The address to throttle and lock by: the socket ``peer``'s, or behind trusted proxies
    the rightmost ``X-Forwarded-For`` entry that is not one of them.

    An IPv4 address as itself (also when mapped in IPv6); an IPv6 address as its
    /64 (one host's usual allocation); a peer that is no address (a test
    client, a unix socket) as its text.
    """
    hop = _ip(peer)
    if hop is None:
        return (peer or "unknown")[:100]
    for entry in reversed((forwarded or "").split(",") if trusted else []):
        if not any(hop in net for net in trusted):
            break
        before = _ip(entry.strip())
        if before is None:
            break  # the trusted hop passed on something that is no address: stop at the hop
        hop = before
    if isinstance(hop, IPv6Address):
        return str(ipaddress.ip_network(f"{hop}/64", strict=False))
    return str(hop)


def _ip(text: str | None) -> IPAddress | None:
    try:
        found = ipaddress.ip_address((text or "").strip())
    except ValueError:
        return None
    if isinstance(found, IPv6Address) and found.ipv4_mapped is not None:
        return found.ipv4_mapped
    return found
