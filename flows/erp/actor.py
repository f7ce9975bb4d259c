"""Who does an operator's action, as the books record it: ``user@host``.

A period's close and reopen (``erp_period_events.actor``) and the jobs an
operator's tool submits (``submitted_by``) name the person at the terminal
this way, unless the command is told otherwise (``--by``).
"""

from __future__ import annotations

import getpass
import os
import socket

__all__ = ["actor"]


def actor() -> str:
    """``user@host`` of this process; the numeric uid when the user has no name."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"
