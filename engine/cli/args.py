"""Command line values parsed into the engine's types; a bad one is BadInput naming it."""

from __future__ import annotations

import uuid

from engine.errors import BadInput

__all__ = ["parse_job_id"]


def parse_job_id(value: str) -> uuid.UUID:
    """``value`` as a job id (a UUID)."""
    try:
        return uuid.UUID(value)
    except ValueError:
        raise BadInput(f"invalid job id {value!r}: expected a UUID") from None
