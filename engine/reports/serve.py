"""``engine reports serve``: the reports, live from the database, read-only.

``GET /`` (and ``/index.html``) and ``/runs/<job id>.html`` are rendered from
the database on every request, with the same builders as the stored reports,
so a running job's page shows its state now. While a job is active its page
carries ``<meta http-equiv="refresh">`` (the index does while any job is), so
the browser reloads it until the job ends; the page of an ended job, like
every stored report, never reloads. Anything else is a plain file of the
reports folder (a migration's rejected rows), when there is one. Only GET and
HEAD are answered; the default address is 127.0.0.1.
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

from jinja2 import Environment
from sqlalchemy import Engine

from engine.config import Settings
from engine.errors import EngineError, NoSuchJob
from engine.flow.registry import Registry
from engine.reports.context import build_index, build_run_report
from engine.reports.render import environment, render_index_html, render_run_html
from engine.store.models import JobStatus
from engine.store.read import sqlalchemy_engine

__all__ = ["LivePages", "ReportsHandler", "ReportsServer", "make_server"]

log = logging.getLogger(__name__)

_RUN = re.compile(r"/runs/(?P<id>[0-9a-fA-F-]{36})\.html")


def _active(status: str) -> bool:
    # "waiting" is a running job whose steps all wait: still active, still live
    return status in (JobStatus.PENDING, JobStatus.RUNNING, "waiting")


class LivePages:
    """The index and run pages rendered from the database, reloading while jobs are active."""

    def __init__(self, settings: Settings, refresh_s: float) -> None:
        self.refresh_s = refresh_s
        self.engine: Engine = sqlalchemy_engine(settings)
        self.env: Environment = environment()
        try:
            self.registry: Registry | None = Registry.load(settings.flow_modules)
        except EngineError:
            self.registry = None  # pages still render, without graphs

    def index(self) -> str:
        """The index; it reloads itself while any job is pending or running."""
        index = build_index(self.engine)
        live = any(_active(row.status) for row in index.rows)
        return render_index_html(index, self.env, refresh_s=self.refresh_s if live else None)

    def run(self, job_id: uuid.UUID) -> str:
        """A job's page (:class:`NoSuchJob` if none); it reloads itself while the job is active."""
        report = build_run_report(self.engine, job_id, self.registry)
        live = _active(report.status)
        return render_run_html(report, self.env, refresh_s=self.refresh_s if live else None)

    def close(self) -> None:
        self.engine.dispose()


class ReportsHandler(SimpleHTTPRequestHandler):
    """Live index and run pages; other paths are static files of the reports folder."""

    def __init__(self, *args: Any, pages: LivePages, directory: str, **kwargs: Any) -> None:
        self.pages = pages
        super().__init__(*args, directory=directory, **kwargs)

    def _live(self, head: bool) -> bool:
        """Answer the index or a run page; False when the path is neither."""
        path = self.path.split("?", 1)[0].split("#", 1)[0]
        match = _RUN.fullmatch(path)
        if path not in ("/", "/index.html") and match is None:
            return False
        try:
            html = self.pages.run(uuid.UUID(match["id"])) if match else self.pages.index()
        except (NoSuchJob, ValueError):
            self.send_error(HTTPStatus.NOT_FOUND, "no such job")
            return True
        except Exception:
            log.exception("rendering %s failed", path)
            self.send_error(HTTPStatus.INTERNAL_SERVER_ERROR, "report rendering failed")
            return True
        body = html.encode("utf-8")
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")  # each reload asks the database again
        self.end_headers()
        if not head:
            self.wfile.write(body)
        return True

    def do_GET(self) -> None:
        if not self._live(head=False):
            super().do_GET()

    def do_HEAD(self) -> None:
        if not self._live(head=True):
            super().do_HEAD()

    def list_directory(self, path: Any) -> None:
        """No directory listings: only the index and the reports are browsed."""
        self.send_error(HTTPStatus.NOT_FOUND, "not found")

    def log_message(self, format: str, *args: Any) -> None:
        log.info("%s %s", self.address_string(), format % args)


class ReportsServer(ThreadingHTTPServer):
    """The HTTP server of :func:`make_server`; closing it also closes its database pool."""

    def __init__(self, address: tuple[str, int], handler: Any, pages: LivePages) -> None:
        self.pages = pages
        super().__init__(address, handler)

    def server_close(self) -> None:
        super().server_close()
        self.pages.close()


def make_server(
    settings: Settings,
    host: str = "127.0.0.1",
    port: int = 8000,
    out_dir: Path | None = None,
    *,
    refresh_s: float = 5.0,
) -> ReportsServer:
    """A live reports server (``serve_forever`` on it); static files come from ``out_dir``.

    ``out_dir`` defaults to ``settings.reports_dir``; it need not exist.
    """
    folder = (out_dir or settings.reports_dir).resolve()
    pages = LivePages(settings, refresh_s)
    handler = partial(ReportsHandler, pages=pages, directory=str(folder))
    try:
        return ReportsServer((host, port), handler, pages)
    except BaseException:
        pages.close()
        raise
