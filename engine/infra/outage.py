"""Database outages: noticed once, waited out with capped backoff, ended once.

A worker outlives PostgreSQL being unreachable for any length of time
(invariant 15). Any of its loops (receive, slots, heartbeats, sweeper,
relay, start-up) that fails because the database is gone reports it here;
the first report logs the outage at ERROR and sets :attr:`Outage.down`,
which stops the worker from receiving (on SQS, every receive counts towards
the redrive to the dead-letter queue, so messages must not be received that
cannot be claimed). The main loop then probes the database with capped
exponential backoff and jitter (tenacity) until it answers, logs the end of
the outage once, and work resumes; leases that ran out meanwhile are
reclaimed as after any other expiry.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import psycopg

from engine.errors import ConfigError, DatabaseUnavailable
from engine.infra import metrics
from engine.infra.secrets import mask_url

if TYPE_CHECKING:
    from tenacity import RetryCallState

log = logging.getLogger(__name__)

# SQLSTATE classes and codes that mean "the server or the session is gone",
# not "this statement failed": connection exceptions (08), operator
# intervention (57: shutdown, terminated backend) except a cancelled query
# (57014, a statement timeout), too many connections (53300).
_QUERY_CANCELED = "57014"


def is_outage(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) means PostgreSQL cannot be reached."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, DatabaseUnavailable | psycopg.InterfaceError):
            return True
        if isinstance(current, psycopg.OperationalError):
            state = current.sqlstate
            if state is None or state.startswith("08") or state == "53300":
                return True
            if state.startswith("57") and state != _QUERY_CANCELED:
                return True
        if isinstance(current, ConfigError):
            return False  # a refused role or a bad setting: waiting will not fix it
        # follow what the error was raised from; `raise ... from None` ends the chain
        if current.__cause__ is not None:
            current = current.__cause__
        else:
            current = None if current.__suppress_context__ else current.__context__
    return False


class Outage:
    """Whether this worker currently sees PostgreSQL as unreachable; shared by its threads."""

    def __init__(self, backoff_max_s: float, *, initial_s: float = 0.2) -> None:
        self.down = threading.Event()
        self.probes = 0  # failed probes of the current (or last) outage
        self.outages = 0  # outages seen since start
        self._backoff_max_s = backoff_max_s
        self._initial_s = initial_s
        self._lock = threading.Lock()
        self._since = 0.0

    def failed(self, exc: BaseException, where: str) -> None:
        """Report that ``where`` could not reach the database; logged once per outage."""
        with self._lock:
            if self.down.is_set():
                return
            self.down.set()
            self.outages += 1
            self.probes = 0
            self._since = time.monotonic()
        metrics.outage_started()
        log.error(
            "PostgreSQL unreachable (%s: %s); receiving paused until it answers again",
            where,
            mask_url(str(exc)).strip()[:300],
        )

    def recovered(self) -> None:
        with self._lock:
            if not self.down.is_set():
                return
            self.down.clear()
            lasted = time.monotonic() - self._since
            probes = self.probes
        metrics.outage_ended()
        log.warning(
            "PostgreSQL reachable again after %.1f s (%d failed probes); resuming", lasted, probes
        )

    def wait(self, probe: Callable[[], None], stop: threading.Event) -> bool:
        """Probe until it succeeds (``True``, outage over) or ``stop`` is set (``False``).

        Waits grow exponentially with jitter up to ``backoff_max_s``; an error
        that is not an outage is logged and probed again like one.
        """
        # a worker's import (the worker extra): the API install imports this
        # module only for is_outage, through the outbox relay
        from tenacity import Retrying, retry_if_exception, wait_exponential_jitter

        def counted(_state: RetryCallState) -> None:
            with self._lock:
                self.probes += 1

        retrying = Retrying(
            wait=wait_exponential_jitter(
                multiplier=self._initial_s, max=self._backoff_max_s, jitter=self._initial_s
            ),
            retry=retry_if_exception(lambda exc: is_outage(exc) and not stop.is_set()),
            sleep=_sleeper(stop),
            before_sleep=counted,
            reraise=True,
        )
        try:
            for attempt in retrying:
                with attempt:
                    if stop.is_set():
                        return False
                    probe()
        except Exception as exc:
            if not is_outage(exc):
                raise  # a refused role or a bad setting: waiting will not fix it
            return False
        self.recovered()
        return True


def _sleeper(stop: threading.Event) -> Callable[[float], None]:
    """tenacity's sleep, cut short when ``stop`` is set."""

    def sleep(seconds: float) -> None:
        stop.wait(seconds)

    return sleep
