"""One identity of the books (``engine books check``): its result, and how details are written."""

from __future__ import annotations

from pydantic import BaseModel

__all__ = ["Check", "examples", "skipped"]


class Check(BaseModel):
    """One identity: whether it holds, and what was compared (or why it was skipped)."""

    name: str
    ok: bool
    skipped: bool = False
    detail: str


def skipped(name: str, why: str) -> Check:
    return Check(name=name, ok=True, skipped=True, detail=f"skipped: {why}")


def examples(items: list[str], shown: int = 5) -> str:
    more = f" and {len(items) - shown} more" if len(items) > shown else ""
    return ", ".join(items[:shown]) + more
