"""The column shapes the read-side models share (models.py, kept_models.py)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Column, DateTime, Text
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlmodel import Field

__all__ = ["_json", "_text", "_ts", "_uuid_or_none"]


def _ts(nullable: bool) -> Any:
    return Field(default=None, sa_column=Column(DateTime(timezone=True), nullable=nullable))


def _json(nullable: bool) -> Any:
    return Field(default=None, sa_column=Column(JSONB, nullable=nullable))


def _text(nullable: bool) -> Any:
    return Field(default=None, sa_column=Column(Text, nullable=nullable))


def _uuid_or_none() -> Any:
    return Field(default=None, sa_column=Column(UUID(as_uuid=True), nullable=True))
