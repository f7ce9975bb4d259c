"""The message envelope: ids only; the database holds everything else."""

from __future__ import annotations

import uuid
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from engine.errors import MalformedMessage

# SQS's limit is 1 MiB counted in bytes; an envelope is ~100 bytes, so anything
# near this is not ours.
MAX_BODY_BYTES = 4096


class StepMessage(BaseModel):
    """ "Step run ``step_run_id`` of job ``job_id`` may be ready": a hint, never the truth."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    v: Literal[1] = 1
    job_id: uuid.UUID
    step_run_id: uuid.UUID

    def encode(self) -> str:
        return self.model_dump_json()

    @classmethod
    def decode(cls, body: str | bytes) -> StepMessage:
        """Parse a body; :class:`MalformedMessage` says what is wrong with it."""
        raw = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body
        if not raw.strip():
            raise MalformedMessage("empty message body")
        if len(raw) > MAX_BODY_BYTES:
            raise MalformedMessage(f"message body of {len(raw)} bytes (at most {MAX_BODY_BYTES})")
        if b"\x00" in raw:
            raise MalformedMessage("message body contains a NUL byte")
        try:
            return cls.model_validate_json(raw)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors()
            )
            raise MalformedMessage(f"not a step message envelope (v=1): {problems}") from None
