"""``hold``: one step that writes its worker's pid to a file, then sleeps.

The recovery benchmark kills that worker with SIGKILL mid-step. (A module
registers one ``flow``, so this lives beside ``noop`` rather than in it.)
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from pydantic import BaseModel

from engine import Flow


class HoldParams(BaseModel):
    path: str
    seconds: float = 120.0


class Held(BaseModel):
    pid: int


flow = Flow("hold", params=HoldParams, description="benchmark: a step that holds its lease")


@flow.step()
def hold(params: HoldParams) -> Held:
    Path(params.path).write_text(str(os.getpid()))
    deadline = time.monotonic() + params.seconds
    while time.monotonic() < deadline:
        time.sleep(0.05)
    return Held(pid=os.getpid())
