"""Fixtures of the report tests: headless Chromium, which they fail (never skip) without."""

from __future__ import annotations

import pytest
from browser import CHROMIUM_MISSING, find_chromium


@pytest.fixture
def chromium() -> str:
    found = find_chromium()
    if found is None:
        pytest.fail(CHROMIUM_MISSING)
    return found
