"""The sign-in throttle (engine.console.throttle) with real threads, without a database.

Limiters run on a clock the test moves; the hash gate is driven by threads
held inside it until the test lets them go, so every count is exact.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from ipaddress import ip_network

import pytest

from engine.console.settings import ConsoleSettings
from engine.console.throttle import SignInThrottle, Throttled, client_address


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _until(condition: Callable[[], bool], what: str) -> None:
    """Wait for a state the threads reach on their own (a bound on a hang, not a tuned sleep)."""
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, f"never reached: {what}"
        time.sleep(0.005)


def test_throttle__hashes_in_flight_never_exceed_the_bound() -> None:
    gate = SignInThrottle(per_address_per_min=1000, per_s=1000, hashes=2, waiting=10)
    start = threading.Barrier(8)
    inside = threading.Event()
    seen: list[int] = []
    lock = threading.Lock()

    def attempt() -> None:
        start.wait()
        with gate.hashing():
            with lock:
                seen.append(gate.in_flight)
            inside.wait()

    threads = [threading.Thread(target=attempt) for _ in range(8)]
    for t in threads:
        t.start()
    _until(lambda: gate.in_flight == 2 and gate.waiting == 6, "2 hashing, 6 waiting")
    assert (gate.in_flight, gate.waiting, gate.hashes) == (2, 6, 2)
    inside.set()
    for t in threads:
        t.join()
    assert gate.hashes == 8
    assert gate.max_in_flight == 2
    assert max(seen) <= 2
    assert (gate.in_flight, gate.waiting) == (0, 0)


def test_throttle__past_its_waiting_places_an_attempt_is_refused_without_hashing() -> None:
    gate = SignInThrottle(per_address_per_min=1000, per_s=1000, hashes=1, waiting=1)
    release = threading.Event()

    def hold() -> None:
        with gate.hashing():
            release.wait()

    holders = [threading.Thread(target=hold) for _ in range(2)]
    for t in holders:
        t.start()
    _until(lambda: gate.in_flight == 1 and gate.waiting == 1, "1 hashing, 1 waiting")
    with pytest.raises(Throttled) as refused, gate.hashing():
        pytest.fail("entered a full gate")
    assert refused.value.reason == "busy"
    release.set()
    for t in holders:
        t.join()
    assert gate.hashes == 2
    assert gate.refused["busy"] == 1


def test_throttle__an_address_that_signed_in_waits_first_and_always_finds_a_place() -> None:
    gate = SignInThrottle(per_address_per_min=1000, per_s=1000, hashes=1, waiting=1)
    gate.signed_in("192.0.2.10")
    release = threading.Event()
    order: list[str] = []

    def attempt(who: str, address: str) -> None:
        with gate.hashing(address):
            order.append(who)
            release.wait()

    holder = threading.Thread(target=attempt, args=("holder", "203.0.113.1"))
    holder.start()
    _until(lambda: gate.in_flight == 1, "the slot taken")
    stranger = threading.Thread(target=attempt, args=("stranger", "203.0.113.2"))
    stranger.start()
    _until(lambda: gate.waiting == 1, "the stranger waiting")
    # the waiting place is taken: a stranger is refused
    with pytest.raises(Throttled), gate.hashing("203.0.113.3"):
        pytest.fail("entered a full gate")
    user = threading.Thread(target=attempt, args=("user", "192.0.2.10"))
    user.start()  # the user waits anyway
    _until(lambda: gate.waiting == 2, "the user waiting too")
    release.set()
    for t in (holder, stranger, user):
        t.join()
    assert order == ["holder", "user", "stranger"]
    assert gate.max_in_flight == 1


def test_throttle__one_address_is_refused_past_its_rate_and_another_is_not() -> None:
    clock = Clock()
    gate = SignInThrottle(per_address_per_min=3, per_s=1000, hashes=1, clock=clock)
    for _ in range(3):
        gate.admit("203.0.113.7")
    with pytest.raises(Throttled) as refused:
        gate.admit("203.0.113.7")
    assert refused.value.reason == "address"
    gate.admit("198.51.100.1")  # another address has its own allowance
    clock.now += 20  # a third of a minute: one more attempt
    gate.admit("203.0.113.7")
    with pytest.raises(Throttled):
        gate.admit("203.0.113.7")
    assert gate.refused["address"] == 2


def test_throttle__all_addresses_together_are_refused_past_the_global_rate() -> None:
    clock = Clock()
    gate = SignInThrottle(per_address_per_min=1000, per_s=2, hashes=1, clock=clock)
    gate.admit("192.0.2.1")
    gate.admit("192.0.2.2")
    with pytest.raises(Throttled) as refused:
        gate.admit("192.0.2.3")
    assert refused.value.reason == "global"
    clock.now += 0.5
    gate.admit("192.0.2.4")
    assert gate.refused["global"] == 1


def test_throttle__a_flood_from_one_address_does_not_spend_the_global_allowance() -> None:
    clock = Clock()
    gate = SignInThrottle(per_address_per_min=2, per_s=3, hashes=1, clock=clock)
    for _ in range(50):
        with contextlib.suppress(Throttled):
            gate.admit("203.0.113.7")
    gate.admit("192.0.2.1")  # 2 of 3 spent by the flood: one left for everyone else


def test_throttle__an_address_that_signed_in_is_not_held_by_the_global_rate() -> None:
    clock = Clock()
    gate = SignInThrottle(per_address_per_min=5, per_s=1, hashes=1, clock=clock)
    gate.admit("192.0.2.10")
    gate.signed_in("192.0.2.10")
    with pytest.raises(Throttled):
        gate.admit("203.0.113.1")  # the global allowance is spent
    gate.admit("192.0.2.10")  # known: only its own rate holds it
    gate.admit("192.0.2.10")


def test_throttle__a_successful_sign_in_does_not_count_against_its_address() -> None:
    clock = Clock()
    gate = SignInThrottle(per_address_per_min=2, per_s=1000, hashes=1, clock=clock)
    for _ in range(5):
        gate.admit("192.0.2.10")
        gate.signed_in("192.0.2.10")
    gate.admit("192.0.2.10")
    gate.admit("192.0.2.10")
    with pytest.raises(Throttled):
        gate.admit("192.0.2.10")


def test_throttle__an_ipv6_address_counts_as_its_slash_64() -> None:
    clock = Clock()
    gate = SignInThrottle(per_address_per_min=2, per_s=1000, hashes=1, clock=clock)
    gate.admit(client_address("2001:db8:1:2::1", None, []))
    gate.admit(client_address("2001:db8:1:2:ffff::9", None, []))
    with pytest.raises(Throttled):
        gate.admit(client_address("2001:db8:1:2:abcd::1", None, []))
    gate.admit(client_address("2001:db8:1:3::1", None, []))


TRUSTED = [ip_network("10.0.0.0/16")]


@pytest.mark.parametrize(
    ("peer", "forwarded", "trusted", "client"),
    [
        # nothing trusted: the header is anyone's to write, the peer is the client
        ("192.0.2.1", "203.0.113.5", [], "192.0.2.1"),
        # an untrusted peer's header is ignored even when proxies are trusted
        ("192.0.2.1", "203.0.113.5", TRUSTED, "192.0.2.1"),
        # behind the load balancer: the address it appended (the rightmost)
        ("10.0.3.4", "203.0.113.5", TRUSTED, "203.0.113.5"),
        # what the client wrote itself (left of it) is not believed
        ("10.0.3.4", "198.51.100.77, 203.0.113.5", TRUSTED, "203.0.113.5"),
        # through two trusted hops
        ("10.0.3.4", "203.0.113.5, 10.0.9.9", TRUSTED, "203.0.113.5"),
        # garbage after the trusted hop: the last hop that can be named
        ("10.0.3.4", "not-an-address", TRUSTED, "10.0.3.4"),
        # no header: the peer
        ("10.0.3.4", None, TRUSTED, "10.0.3.4"),
        # IPv4 mapped in IPv6 is the IPv4 address
        ("::ffff:192.0.2.1", None, [], "192.0.2.1"),
        ("2001:db8:1:2::1", None, [], "2001:db8:1:2::/64"),
        # a peer that is not an address (a test client, a unix socket)
        ("testclient", "203.0.113.5", TRUSTED, "testclient"),
        (None, None, [], "unknown"),
    ],
)
def test_client_address__trusts_the_forwarded_header_only_from_a_trusted_proxy(
    peer: str | None, forwarded: str | None, trusted: list, client: str
) -> None:
    assert client_address(peer, forwarded, trusted) == client


def test_throttle__is_made_from_the_console_settings() -> None:
    conf = ConsoleSettings(
        signin_per_address_per_min=7,
        signin_per_s=3,
        signin_hashes=4,
        trusted_proxies="10.0.0.0/16, 192.168.1.1",  # type: ignore[arg-type]
    )
    gate = SignInThrottle.from_settings(conf)
    assert (gate.per_address_per_min, gate.per_s, gate.bound) == (7, 3, 4)
    assert [str(n) for n in conf.trusted_proxies] == ["10.0.0.0/16", "192.168.1.1/32"]
