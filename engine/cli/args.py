"""Command line values parsed into the engine's types; a bad one is BadInput naming it."""

from __future__ import annotations

import uuid

from engine.config import Settings
from engine.jobs.lookup import job_id_or_prefix, resolve_job_id
from engine.store import db

__all__ = ["parse_job_id"]


def parse_job_id(settings: Settings, value: str) -> uuid.UUID:
    """``value`` as a job id: a UUID, or a unique prefix of one (``acb145ad``).

    Every command that takes a job id comes here, so a prefix copied from
    ``engine runs`` works everywhere (see :func:`engine.jobs.lookup.resolve_job_id`);
    text that is neither is refused before any connection is opened.
    """
    parsed = job_id_or_prefix(value)
    if isinstance(parsed, uuid.UUID):
        return parsed
    with db.connect(settings, autocommit=True) as conn:
        return resolve_job_id(conn, value)
