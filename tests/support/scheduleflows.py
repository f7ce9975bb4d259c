"""A flow whose admission a test steers, for schedules that cannot fire.

Loaded with ENGINE_FLOW_MODULES=testflows,scheduleflows. ``gated`` refuses
its submit (``engine.Refused``) while the file ``refuse_while`` exists, the
way costing refuses a period that is not ready.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
from pydantic import BaseModel

from engine import Flow, Refused


class GateParams(BaseModel):
    n: int = 0
    refuse_while: str = ""


class Opened(BaseModel):
    n: int


gated = Flow("gated", params=GateParams, description="refused while a file says not ready")


@gated.admit
def admit(params: GateParams, conn: psycopg.Connection[Any]) -> None:
    """Not while ``refuse_while`` exists."""
    if params.refuse_while and Path(params.refuse_while).exists():
        raise Refused(f"{Path(params.refuse_while).name} says the period is not ready")


@gated.step()
def open_gate(params: GateParams) -> Opened:
    return Opened(n=params.n)


flow = gated
