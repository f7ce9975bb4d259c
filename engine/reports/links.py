"""Where a job's report can be opened from outside the worker (an alert's link).

Reports live under ``Settings.reports_url`` (``s3://bucket/prefix``) when it is
set, otherwise under ``Settings.reports_dir`` on this machine. Both keep the
same layout: ``index.html`` and ``runs/<job_id>.html``.
"""

from __future__ import annotations

import uuid
from urllib.parse import quote

from engine.config import Settings

__all__ = ["report_link", "run_href", "s3_location"]


def run_href(job_id: str | uuid.UUID) -> str:
    """Where a job's report lives, relative to the reports folder (or S3 prefix)."""
    return f"runs/{job_id}.html"


def s3_location(reports_url: str) -> tuple[str, str]:
    """``(bucket, prefix)`` of ``s3://bucket/prefix``; the prefix without end slashes."""
    rest = reports_url.removeprefix("s3://")
    bucket, _, prefix = rest.partition("/")
    return bucket, prefix.strip("/")


def report_link(settings: Settings, job_id: uuid.UUID | str) -> str:
    """The URL of a job's report: its S3 object's HTTPS address, or a ``file://`` path."""
    href = run_href(job_id)
    if settings.reports_url:
        bucket, prefix = s3_location(settings.reports_url)
        key = f"{prefix}/{href}" if prefix else href
        return f"https://{bucket}.s3.amazonaws.com/{quote(key)}"
    return (settings.reports_dir / href).resolve().as_uri()
