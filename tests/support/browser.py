"""Headless Chromium for the browser tests: found on PATH, or a failure naming the install command.

Every browser test drives the Debian Chromium through Playwright (one driver):
the session fixture ``browser`` (``tests/conftest.py``) launches it once, and
the tests that use it run on one xdist worker (``xdist_group("browser")``), so
one Chromium serves the whole run. Playwright downloads no browser here: it
is given the Debian one (``executable_path``).
"""

from __future__ import annotations

import os
import shutil
from typing import Any

# the command that installs it here: `make chromium` runs the same
INSTALL = (
    "apt-get update && apt-get install -y chromium"
    if os.geteuid() == 0
    else "sudo apt-get update && sudo apt-get install -y chromium"
)
CHROMIUM_MISSING = (
    "headless Chromium is needed for the browser tests and was not found on PATH; "
    f"install it with: {INSTALL}   (or run `make test`, which installs it when run as root)"
)


def find_chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def evaluate(page: Any, expression: str) -> Any:
    """The value of ``expression`` in the page's current document; None while it is replaced."""
    try:
        return page.evaluate(expression)
    except Exception:  # no execution context: a reload is under way
        return None
