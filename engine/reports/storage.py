"""Where reports are stored: a local folder, or S3 when ``ENGINE_REPORTS_URL`` is set.

Both stores keep the layout of :mod:`engine.reports.links`: ``index.html``,
``runs/<job_id>.html``, and files written beside the reports (a migration's
rejected rows) at the top. :func:`report_store` chooses one from the settings;
every writer of a report (the worker when a job ends, ``engine report``,
``engine reports build``, a flow through :func:`write_report_file`) goes
through it, so a worker on ECS, whose disk is thrown away, writes nothing
locally once ``reports_url`` is set.

The S3 store is the only module that talks to S3 (``put_object``, nothing
else: the worker's role needs ``s3:PutObject`` on the prefix only).
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from engine.config import Settings
from engine.errors import BadInput, ReportStoreError
from engine.reports.links import s3_location

if TYPE_CHECKING:
    from botocore.exceptions import ClientError

__all__ = [
    "CSV",
    "HTML",
    "FolderStore",
    "ReportStore",
    "S3Store",
    "report_store",
    "write_atomically",
    "write_report_file",
]

HTML = "text/html; charset=utf-8"
CSV = "text/csv; charset=utf-8"

# a relative path of plain parts: nothing a store could resolve outside itself
_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,199}")


def check_name(name: str) -> str:
    """``name`` if it is a relative path of ``[A-Za-z0-9._-]`` parts, else :class:`BadInput`."""
    parts = name.split("/")
    if not all(_PART.fullmatch(p) for p in parts):
        raise BadInput(
            f"report file name {name!r} is not valid: use a relative path of parts made of "
            "letters, digits, '.', '_' and '-' (not starting with '.'), "
            "e.g. 'migration-1a2b3c-rejects.csv'"
        )
    return name


class ReportStore(Protocol):
    """A place reports are written to, under the layout of :mod:`engine.reports.links`."""

    def put(self, name: str, body: str | bytes, content_type: str) -> str:
        """Store ``body`` as ``name`` (e.g. ``runs/<id>.html``); return where it went."""
        ...

    def describe(self) -> str:
        """The store for a person: a folder, or ``s3://bucket/prefix``."""
        ...


def write_atomically(path: Path, body: str | bytes) -> Path:
    """Write ``body`` under a temporary name, then rename: a reader never sees half a page."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = body.encode("utf-8") if isinstance(body, str) else body
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


class FolderStore:
    """Reports in a folder of this machine (``reports_dir``, or ``--out``)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def put(self, name: str, body: str | bytes, content_type: str) -> str:
        """Write the file atomically; return its absolute path."""
        return str(write_atomically(self.folder / check_name(name), body).resolve())

    def describe(self) -> str:
        return str(self.folder)


def s3_client() -> Any:
    """A boto3 S3 client with bounded retries and timeouts (region: the environment's)."""
    # imported here: `import engine` (write_report_file is public) need not load boto3
    import boto3
    from botocore.config import Config

    session = boto3.session.Session()  # one per client: the default session is not thread-safe
    config = Config(
        region_name=session.region_name or "us-east-1",
        retries={"total_max_attempts": 3, "mode": "standard"},
        connect_timeout=5,
        read_timeout=30,
    )
    return session.client("s3", config=config)


class S3Store:
    """Reports as objects under ``s3://bucket/prefix`` (``ENGINE_REPORTS_URL``)."""

    def __init__(self, reports_url: str, client: Any | None = None) -> None:
        self.reports_url = reports_url
        self.bucket, self.prefix = s3_location(reports_url)
        self._client = client

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = s3_client()
        return self._client

    def key(self, name: str) -> str:
        """The object key of ``name`` under the prefix."""
        name = check_name(name)
        return f"{self.prefix}/{name}" if self.prefix else name

    def put(self, name: str, body: str | bytes, content_type: str) -> str:
        """``put_object`` with its content type; return ``s3://bucket/key``.

        Raises :class:`ReportStoreError` naming the bucket (and what to do) when
        S3 refuses or cannot be reached; the botocore error is ``__cause__``.
        """
        from botocore.exceptions import BotoCoreError, ClientError

        key = self.key(name)
        data = body.encode("utf-8") if isinstance(body, str) else body
        try:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=data, ContentType=content_type)
        except ClientError as exc:
            raise self._error(key, exc) from exc
        except BotoCoreError as exc:
            raise ReportStoreError(
                f"could not write s3://{self.bucket}/{key} (ENGINE_REPORTS_URL="
                f"{self.reports_url}): {exc}"
            ) from exc
        return f"s3://{self.bucket}/{key}"

    def describe(self) -> str:
        return self.reports_url

    def _error(self, key: str, exc: ClientError) -> ReportStoreError:
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        where = f"ENGINE_REPORTS_URL={self.reports_url}"
        if code == "NoSuchBucket":
            return ReportStoreError(
                f"the reports bucket {self.bucket!r} does not exist ({where}); create it, "
                "or set ENGINE_REPORTS_URL to s3://<an existing bucket>/<prefix>"
            )
        if code in ("AccessDenied", "AllAccessDisabled", "InvalidAccessKeyId"):
            return ReportStoreError(
                f"writing s3://{self.bucket}/{key} was refused ({code}; {where}): the "
                f"worker's role needs s3:PutObject on arn:aws:s3:::{self.bucket}/"
                f"{self.prefix + '/' if self.prefix else ''}*"
            )
        return ReportStoreError(
            f"could not write s3://{self.bucket}/{key} ({where}): {code}: "
            f"{error.get('Message', '')}"
        )


def report_store(settings: Settings, out_dir: Path | None = None) -> ReportStore:
    """Where reports go: ``out_dir``, else S3 (``reports_url``), else ``reports_dir``."""
    if out_dir is not None:
        return FolderStore(out_dir)
    if settings.reports_url:
        return S3Store(settings.reports_url)
    return FolderStore(settings.reports_dir)


def write_report_file(
    name: str,
    body: str | bytes,
    *,
    content_type: str = CSV,
    settings: Settings | None = None,
) -> str:
    """Write a file beside the reports (e.g. a flow's rejected rows); return where it went.

    ``name`` is relative (``migration-1a2b3c-rejects.csv``). The file goes where
    the reports go: ``s3://bucket/prefix/<name>`` when ``ENGINE_REPORTS_URL`` is
    set, otherwise ``<ENGINE_REPORTS_DIR>/<name>`` (the absolute path is returned).
    ``settings`` defaults to the environment's, as a worker process reads them.
    """
    return report_store(settings or Settings()).put(name, body, content_type)
