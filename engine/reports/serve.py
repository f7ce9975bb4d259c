"""``engine reports serve``: the reports folder over HTTP, read-only.

``GET /`` and ``/index.html`` re-render the index first, so new runs appear
without a restart; ``/runs/<job id>.html`` is rendered on demand when it does
not exist yet. Everything else is a plain static file of the folder. Only GET
and HEAD are answered; the default address is 127.0.0.1.
"""

from __future__ import annotations

import logging
import re
import uuid
from functools import partial
from http import HTTPStatus
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from engine.config import Settings
from engine.errors import NoSuchJob
from engine.reports.render import render_index, render_job_report

__all__ = ["ReportsHandler", "make_server"]

log = logging.getLogger(__name__)

_RUN = re.compile(r"/runs/(?P<id>[0-9a-fA-F-]{36})\.html")


class ReportsHandler(SimpleHTTPRequestHandler):
    """Static files of the reports folder, with the index and missing reports rendered live."""

    def __init__(self, *args: Any, settings: Settings, directory: str, **kwargs: Any) -> None:
        self.settings = settings
        super().__init__(*args, directory=directory, **kwargs)

    def _refresh(self) -> bool:
        path = self.path.split("?", 1)[0].split("#", 1)[0]
        out_dir = Path(self.directory)
        try:
            if path in ("/", "/index.html"):
                render_index(self.settings, out_dir=out_dir)
            elif (match := _RUN.fullmatch(path)) is not None:
                job_id = uuid.UUID(match["id"])
                if not (out_dir / "runs" / f"{job_id}.html").exists():
                    render_job_report(self.settings, job_id, out_dir=out_dir)
        except NoSuchJob:
            return True  # no such job: the static handler answers 404
        except Exception:
            log.exception("rendering %s failed", path)
            self.send_error(HTTPStatus.INTERNAL_SERVER_ERROR, "report rendering failed")
            return False
        return True

    def do_GET(self) -> None:
        if self._refresh():
            super().do_GET()

    def do_HEAD(self) -> None:
        if self._refresh():
            super().do_HEAD()

    def list_directory(self, path: Any) -> None:
        """No directory listings: only the index and the reports are browsed."""
        self.send_error(HTTPStatus.NOT_FOUND, "not found")

    def log_message(self, format: str, *args: Any) -> None:
        log.info("%s %s", self.address_string(), format % args)


def make_server(settings: Settings, host: str, port: int, out_dir: Path) -> ThreadingHTTPServer:
    """An HTTP server of ``out_dir`` (created if missing); call ``serve_forever`` on it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    handler = partial(ReportsHandler, settings=settings, directory=str(out_dir.resolve()))
    return ThreadingHTTPServer((host, port), handler)
