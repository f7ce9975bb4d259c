"""Command line values parsed into the engine's types; a bad one is BadInput naming it."""

from __future__ import annotations

import types
import typing
import uuid
from typing import Any

import click

from engine.config import Settings
from engine.jobs.lookup import job_id_or_prefix, resolve_job_id
from engine.store import db

__all__ = ["option_type", "parse_job_id"]


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


def option_type(annotation: Any) -> click.ParamType[Any, Any]:
    """The click type of an option for a pydantic field: INTEGER or FLOAT for numbers, else TEXT.

    ``--help`` then shows what a number option takes, and click refuses ``--chunks abc``
    (exit 2, naming the value) before anything is submitted. Bounds stay with the
    flow's model, which validates every value, so the CLI and the Python API refuse
    ``--chunks 0`` with the same message. ``int | None`` is an int option one may omit.
    """
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        annotation = args[0]
    if annotation is int:
        return click.INT
    if annotation is float:
        return click.FLOAT
    return click.STRING
