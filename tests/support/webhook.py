"""A webhook receiver on 127.0.0.1 for the alert tests: records each POST, answers as scripted."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# a Slack-like URL whose path is the credential: it must never reach a log line
SECRET_PATH = "/services/T0SECRET/B0SECRET/xoxsecrettoken42"


@dataclass
class Receiver:
    """What the server received; ``statuses`` are answered in turn, the last one repeated."""

    url: str
    statuses: list[int]
    posts: list[dict[str, Any]] = field(default_factory=list)
    answered: list[int] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    received: threading.Condition = field(init=False)

    def __post_init__(self) -> None:
        self.received = threading.Condition(self.lock)

    def accepted(self) -> list[dict[str, Any]]:
        """The bodies answered with a 2xx."""
        with self.lock:
            return [p for p, s in zip(self.posts, self.answered, strict=True) if 200 <= s < 300]


@contextmanager
def webhook_server(statuses: Sequence[int] = (200,)) -> Iterator[Receiver]:
    """A receiver at ``http://127.0.0.1:<port>`` + :data:`SECRET_PATH` for the block."""
    receiver: Receiver | None = None

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            assert receiver is not None
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"null")
            with receiver.lock:
                status = receiver.statuses[min(len(receiver.posts), len(receiver.statuses) - 1)]
                receiver.posts.append(body)
                receiver.answered.append(status)
                receiver.received.notify_all()
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: Any) -> None:
            pass  # quiet: pytest shows failures, not every request

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver = Receiver(f"http://127.0.0.1:{server.server_port}{SECRET_PATH}", list(statuses))
    thread = threading.Thread(target=server.serve_forever, name="webhook", daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
