"""The SQS transport: a standard queue (boto3) with the engine's at-least-once contract.

Workers on several machines share one queue; the database claim decides who
runs a step run, so nothing here needs to be exact. Messages carry ids only
(:class:`~engine.transports.message.StepMessage`); the engine checks what it sends
itself (UTF-8 byte size, XML-legal characters, delays of at most 900 s),
because emulators do not.

- Receiving long-polls (``WaitTimeSeconds`` up to 20, repeated until the
  caller's wait is over) for up to 10 messages at once.
- Sending, deleting and visibility changes use the batch calls, in chunks of
  10 entries, and every batch response is checked entry by entry: a batch
  call can succeed with some entries failed.
- Extending visibility never asks for more than SQS's 12 hours counted from
  the receive; a receipt that SQS refuses (received again, deleted, past the
  12 hours) is reported as not extended: "this copy is lost", not an error.
- API errors (throttling, 5xx, connection resets) are retried by botocore's
  ``standard`` retry mode with bounded, jittered backoff. An error that
  outlives those retries is raised by ``publish``, ``send_raw`` and
  ``receive`` (the outbox keeps the rows; the worker receives again), and
  logged and swallowed by ``delete``, ``release`` and ``extend``: a delete
  that failed only causes a redelivery, which the claim absorbs.
- The dead-letter queue is fed by SQS itself (redrive after
  ``maxReceiveCount`` receives); ``transport.dead_letters``
  (:mod:`engine.transports.sqs_dead_letters`) lets the sweeper record those
  messages in ``engine_dead_letters``.
- Creating the two queues and their redrive policy is not the transport's
  (nor the worker's, whose IAM role may not): :mod:`engine.transports.sqs_queues`.

Settings come from ``ENGINE_SQS_*`` (:class:`SqsSettings`, with the client,
the limits and the error mapping in :mod:`engine.transports.sqs_client`);
boto3 reads credentials and ``AWS_ENDPOINT_URL`` (emulators) itself.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from engine.errors import BadInput, ConfigError, SqsError
from engine.transports.base import Outgoing, QueueProbe, Received
from engine.transports.sqs_client import (
    MAX_BATCH,
    MAX_DELAY_S,
    MAX_VISIBILITY_S,
    MAX_WAIT_S,
    MISSING_QUEUE_CODES,
    RECEIVE_COUNT,
    SqsSettings,
    api_call,
    check_body,
    error_code,
    received_from,
    sqs_client,
    whole_seconds,
)
from engine.transports.sqs_dead_letters import SqsDeadLetters

__all__ = ["SqsSettings", "SqsTransport"]

log = logging.getLogger(__name__)

# Asked-for visibility stays this far inside the 12 hours: our clock started
# after SQS's (the receive's round trip), and a refused extension is a lost copy.
_VISIBILITY_MARGIN_S = 30.0
# Entry failures that mean "this receipt is not current": received again,
# deleted, or past the 12 hours. A lost copy, never an error.
_STALE_CODES = frozenset(
    {
        "ReceiptHandleIsInvalid",
        "InvalidReceiptHandle",
        "MessageNotInflight",
        "AWS.SimpleQueueService.MessageNotInflight",
        "InvalidParameterValue",
    }
)
_SEND_ENTRY_ATTEMPTS = 3  # partial batch failures are not retried by botocore


def _chunks(items: Sequence[Any], size: int = MAX_BATCH) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _unique(receipts: Sequence[str]) -> list[str]:
    # a batch with the same receipt twice is refused by SQS as a whole
    return list(dict.fromkeys(receipts))


class _Deliveries:
    """Each delivery handed out by this transport: when it was received (monotonic clock),
    its body and its receive count.

    The time bounds extensions to 12 hours from the receive; the body and the
    count let a copy worn by returns be sent again fresh (:meth:`SqsTransport.give_back`).
    Receipts left in the queue (a refused claim leaves its copy) are forgotten
    after 12 hours.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._of: OrderedDict[str, tuple[float, str, int]] = OrderedDict()

    def add(self, received: Sequence[Received], at: float) -> None:
        with self._lock:
            for r in received:
                self._of[r.receipt] = (at, r.body, r.receive_count)
            while self._of:
                oldest, (when, _, _) = next(iter(self._of.items()))
                if at - when <= MAX_VISIBILITY_S:
                    break
                del self._of[oldest]

    def forget(self, receipts: Sequence[str]) -> None:
        with self._lock:
            for receipt in receipts:
                self._of.pop(receipt, None)

    def left_s(self, receipt: str, now: float) -> float:
        """Seconds of visibility SQS still allows this receipt (12 h if unknown)."""
        with self._lock:
            known = self._of.get(receipt)
        if known is None:
            return MAX_VISIBILITY_S - _VISIBILITY_MARGIN_S
        return MAX_VISIBILITY_S - _VISIBILITY_MARGIN_S - (now - known[0])

    def worn(self, receipts: Sequence[str], receives: int) -> dict[str, str]:
        """The bodies of these deliveries received ``receives`` times or more, by receipt."""
        with self._lock:
            known = [(r, self._of.get(r)) for r in receipts]
        return {r: k[1] for r, k in known if k is not None and k[2] >= receives}

    def __len__(self) -> int:
        with self._lock:
            return len(self._of)


class SqsTransport:
    """Step messages on an SQS standard queue; see the module docstring."""

    name = "sqs"
    transactional = False
    max_delay_s = float(MAX_DELAY_S)

    def __init__(self, sqs: SqsSettings | None = None, *, client: Any | None = None) -> None:
        self.settings = sqs if sqs is not None else SqsSettings()
        if not self.settings.queue_url:
            raise ConfigError(
                "ENGINE_SQS_QUEUE_URL is not set: the SQS transport needs the step queue's URL "
                "(`engine queues create` creates the queues and prints it)"
            )
        self.queue_url: str = self.settings.queue_url
        self.client: Any = client if client is not None else sqs_client(self.settings)
        self._deliveries = _Deliveries()
        self._closed = False
        self._calls_lock = threading.Lock()
        self._calls: Counter[str] = Counter()
        self.client.meta.events.register("request-created.sqs", self._count_call)
        self.dead_letters = SqsDeadLetters(self)

    # -- observability -----------------------------------------------------------------

    def _count_call(self, operation_name: str = "", **_: Any) -> None:
        # request-created fires once per HTTP request, retries included: what SQS bills
        with self._calls_lock:
            self._calls[operation_name] += 1

    def api_calls(self) -> dict[str, int]:
        """HTTP requests made to SQS so far, per operation (retries included)."""
        with self._calls_lock:
            return dict(self._calls)

    def check_open(self) -> None:
        """Raise :class:`SqsError` once :meth:`close` was called."""
        if self._closed:
            raise SqsError("the sqs transport is closed")

    # -- sending -----------------------------------------------------------------------

    def publish(self, conn: Any, messages: Sequence[Outgoing]) -> None:
        """Send ``messages`` at once (``conn`` is ignored: SQS is not transactional).

        Everything is checked before anything is sent (delays, body sizes).
        Raises :class:`SqsError` if some entry could not be sent; entries sent
        before that stay sent, and a retry of the whole batch only duplicates them.
        """
        if not messages:
            return
        entries: list[tuple[str, int]] = []
        for m in messages:
            if not 0 <= m.delay_s <= self.max_delay_s:
                raise BadInput(
                    f"delay of {m.delay_s} s for step run {m.message.step_run_id}: "
                    f"must be between 0 and {self.max_delay_s:g} s "
                    "(longer waits stay in the outbox)"
                )
            body = m.message.encode()
            check_body(body)
            entries.append((body, whole_seconds(m.delay_s, MAX_DELAY_S)))
        self.check_open()
        for chunk in _chunks(entries):
            self._send_batch(chunk)

    def send_raw(self, body: str) -> None:
        """Send ``body`` as is, visible at once (replays of dead letters, tests)."""
        check_body(body)
        self.check_open()
        self._send_batch([(body, 0)])

    def _send_batch(self, chunk: Sequence[tuple[str, int]]) -> None:
        pending = {
            str(i): {"Id": str(i), "MessageBody": body, "DelaySeconds": delay}
            for i, (body, delay) in enumerate(chunk)
        }
        for attempt in range(1, _SEND_ENTRY_ATTEMPTS + 1):
            with api_call("SendMessageBatch"):
                response = self.client.send_message_batch(
                    QueueUrl=self.queue_url, Entries=list(pending.values())
                )
            sent = {e["Id"] for e in response.get("Successful", [])}
            failed = {e["Id"]: e for e in response.get("Failed", [])}
            pending = {i: e for i, e in pending.items() if i not in sent}
            if not pending:
                return
            blamed = [f for f in failed.values() if f.get("SenderFault")]
            if blamed or attempt == _SEND_ENTRY_ATTEMPTS:
                worst = (blamed or list(failed.values()) or [{}])[0]
                raise SqsError(
                    f"SQS SendMessageBatch: {len(pending)} of {len(chunk)} message(s) not sent "
                    f"({worst.get('Code', 'no result')}: {worst.get('Message', '')})"
                )
            # server-side entry failures are transient: send only those again
            time.sleep(0.05 * 2**attempt)

    # -- receiving ---------------------------------------------------------------------

    def receive(self, max_messages: int, visibility_s: float, wait_s: float) -> list[Received]:
        """Up to ``max_messages`` (at most 10) messages, each hidden for ``visibility_s``.

        Long-polls in rounds of at most 20 s until a message arrives or
        ``wait_s`` is over; a positive wait under one second polls for one
        second (SQS counts whole seconds; zero would be a busy loop). Returns
        ``[]`` once the transport is closed (a round in flight runs out first).
        """
        if max_messages < 1:
            raise BadInput(f"max_messages must be at least 1, got {max_messages}")
        visibility = whole_seconds(visibility_s, MAX_VISIBILITY_S)
        deadline = time.monotonic() + max(0.0, wait_s)
        while not self._closed:
            remaining = deadline - time.monotonic()
            wait = 0 if wait_s <= 0 else whole_seconds(max(remaining, 1.0), MAX_WAIT_S)
            with api_call("ReceiveMessage"):
                response = self.client.receive_message(
                    QueueUrl=self.queue_url,
                    MaxNumberOfMessages=min(max_messages, MAX_BATCH),
                    VisibilityTimeout=visibility,
                    WaitTimeSeconds=wait,
                    MessageSystemAttributeNames=[RECEIVE_COUNT],
                )
            received = [received_from(m) for m in response.get("Messages", [])]
            self._deliveries.add(received, time.monotonic())
            if received and self._closed:
                # closed while polling: hand them back to the other receivers at once
                self._change_visibility([(r.receipt, 0) for r in received], "release")
                return []
            if received or time.monotonic() >= deadline:
                return received
        return []

    # -- visibility and deletes --------------------------------------------------------

    def extend(self, receipts: Sequence[str], visibility_s: float) -> set[str]:
        """Hide these deliveries for ``visibility_s`` more (from now); those extended.

        A receipt SQS refuses, or one whose 12 hours would be exceeded, is
        left out of the result (the copy is lost). API errors that outlive
        botocore's retries are logged; their receipts are left out too.
        """
        self.check_open()
        now = time.monotonic()
        entries: list[tuple[str, int]] = []
        for receipt in _unique(receipts):
            allowed = self._deliveries.left_s(receipt, now)
            if allowed < 1:
                # asking for 0 s would release the copy rather than keep it
                log.info("receipt at SQS's 12-hour visibility limit: this copy is lost")
                continue
            entries.append((receipt, whole_seconds(min(visibility_s, allowed), MAX_VISIBILITY_S)))
        return self._change_visibility(entries, "extend")

    def release(self, receipts: Sequence[str]) -> None:
        """Make these deliveries visible at once (errors are logged, not raised)."""
        self.give_back(receipts, 0)

    def give_back(self, receipts: Sequence[str], after_s: float) -> None:
        """Return these deliveries to the queue, visible again after ``after_s``: never the
        message's fault (a shutdown, a lost lock race, a step run held or not due yet).

        SQS counts every receive, and moves a copy received ``maxReceiveCount`` times to
        the dead-letter queue instead of delivering it again: a dead letter and an alert
        for a step run nothing was wrong with. So a copy received ``maxReceiveCount - 1``
        times or more is sent again as a fresh copy (due after ``after_s``, at most 900 s),
        and only then deleted; should the send fail it is returned as it is. Errors are
        logged, not raised.
        """
        self.check_open()
        unique = _unique(receipts)
        worn = self._deliveries.worn(unique, max(1, self.settings.max_receive_count - 1))
        if worn:
            try:
                delay = whole_seconds(min(after_s, MAX_DELAY_S), MAX_DELAY_S)
                for chunk in _chunks(list(worn.values())):
                    self._send_batch([(body, delay) for body in chunk])
            except SqsError as exc:
                log.warning("could not send %d worn message(s) again: %s", len(worn), exc)
                worn = {}  # returned as they are, below
            else:
                self.delete(list(worn))
                log.info(
                    "%d delivery(ies) given back after %d receives or more sent again fresh",
                    len(worn),
                    self.settings.max_receive_count - 1,
                )
        rest = [r for r in unique if r not in worn]
        if after_s > 0:
            self.extend(rest, after_s)
        else:
            self._change_visibility([(r, 0) for r in rest], "release")
            self._deliveries.forget(rest)

    def _change_visibility(self, entries: Sequence[tuple[str, int]], what: str) -> set[str]:
        changed: set[str] = set()
        for chunk in _chunks(entries):
            by_id = {str(i): receipt for i, (receipt, _) in enumerate(chunk)}
            try:
                with api_call("ChangeMessageVisibilityBatch"):
                    response = self.client.change_message_visibility_batch(
                        QueueUrl=self.queue_url,
                        Entries=[
                            {"Id": str(i), "ReceiptHandle": receipt, "VisibilityTimeout": seconds}
                            for i, (receipt, seconds) in enumerate(chunk)
                        ],
                    )
            except SqsError as exc:
                log.warning("%s of %d message(s) failed: %s", what, len(chunk), exc)
                continue
            changed.update(by_id[e["Id"]] for e in response.get("Successful", []))
            self._log_failed(what, response.get("Failed", []))
        return changed

    def delete(self, receipts: Sequence[str], conn: Any = None) -> None:
        """Delete these deliveries in batches of 10 (``conn`` is ignored).

        Stale receipts delete nothing and raise nothing; any other failure is
        logged and swallowed: the message comes back and the claim absorbs it.
        """
        self.check_open()
        unique = _unique(receipts)
        self.delete_from(self.queue_url, unique)
        self._deliveries.forget(unique)

    def delete_from(self, queue_url: str, receipts: Sequence[str]) -> None:
        """Batch-delete ``receipts`` from ``queue_url``; failures are logged, not raised."""
        for chunk in _chunks(receipts):
            try:
                with api_call("DeleteMessageBatch"):
                    response = self.client.delete_message_batch(
                        QueueUrl=queue_url,
                        Entries=[{"Id": str(i), "ReceiptHandle": r} for i, r in enumerate(chunk)],
                    )
            except SqsError as exc:
                log.warning(
                    "delete of %d message(s) failed (they will be redelivered): %s",
                    len(chunk),
                    exc,
                )
                continue
            self._log_failed("delete", response.get("Failed", []))

    @staticmethod
    def _log_failed(what: str, failed: Sequence[dict[str, Any]]) -> None:
        for entry in failed:
            code = entry.get("Code", "")
            level = logging.DEBUG if code in _STALE_CODES else logging.WARNING
            log.log(level, "%s refused for one message: %s %s", what, code, entry.get("Message"))

    def dead_letter(self, received: Received, reason: str) -> None:
        """Remove a delivery that can never be handled from the queue.

        The runner has already recorded it and ``reason`` in
        ``engine_dead_letters``; sending it to the SQS dead-letter queue as
        well would have the DLQ drain record it (and alert) a second time.
        """
        self.delete([received.receipt])

    # -- queue facts and the dead-letter queue ------------------------------------------

    def queue_visibility_s(self) -> float:
        """The queue's own ``VisibilityTimeout`` attribute, read from SQS (seconds)."""
        found = self.queue_attributes(self.queue_url, ["VisibilityTimeout"])
        return float(found["VisibilityTimeout"])

    def probe(self) -> QueueProbe:
        """The queue answers ``GetQueueAttributes``: its visibility timeout and depth.

        A queue that does not exist is a :class:`~engine.errors.ConfigError`
        naming its URL.
        """
        found = self.queue_attributes(
            self.queue_url, ["VisibilityTimeout", "ApproximateNumberOfMessages"]
        )
        visibility = float(found["VisibilityTimeout"])
        messages = int(found.get("ApproximateNumberOfMessages", "0"))
        return QueueProbe(
            f"SQS {self.queue_url}: ~{messages} messages, visibility timeout {visibility:g} s",
            messages,
            visibility,
        )

    def drain_dead_letters(self, record: Callable[[Received, str], None], limit: int = 100) -> int:
        """The sweeper's seam: :meth:`SqsDeadLetters.drain` of this queue's dead letters."""
        return self.dead_letters.drain(record, limit)

    def queue_attributes(self, queue_url: str, names: list[str]) -> dict[str, str]:
        """``GetQueueAttributes``; a missing queue is a :class:`ConfigError` naming the fix."""
        self.check_open()
        try:
            response = self.client.get_queue_attributes(QueueUrl=queue_url, AttributeNames=names)
        except ClientError as exc:
            if error_code(exc) in MISSING_QUEUE_CODES:
                raise ConfigError(
                    f"SQS queue {queue_url} does not exist; create it with `engine queues create`"
                    " and set ENGINE_SQS_QUEUE_URL"
                ) from exc
            raise SqsError(f"SQS GetQueueAttributes failed: {exc}") from exc
        except BotoCoreError as exc:
            raise SqsError(f"SQS GetQueueAttributes failed: {exc}") from exc
        return dict(response.get("Attributes", {}))

    def close(self) -> None:
        """Stop: a receive in flight returns ``[]`` once its poll ends; other calls raise."""
        self._closed = True
        self.client.close()
