"""One PgBouncer and one Chromium per run: the tests that use a session's shared server
run on one xdist worker (``--dist loadgroup``), grouped by the fixture they use."""

from __future__ import annotations

import pytest

# session fixtures that start a server: their tests share one xdist worker
SHARED = ("pgbouncer", "browser")


def group_by_shared_server(items: list[pytest.Item]) -> None:
    for item in items:
        for shared in SHARED:
            if shared in getattr(item, "fixturenames", ()):
                item.add_marker(pytest.mark.xdist_group(shared))
