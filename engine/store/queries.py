"""Named SQL blocks loaded from ``.sql`` files.

A file holds blocks such as::

    -- job_insert_if_absent --
    -- At most one active job per fingerprint (partial unique index).
    INSERT INTO ...

The first comment line after the name states the invariant the query relies on
or keeps; it is required, so every query says why it is shaped the way it is.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

_HEADER = re.compile(r"^-- ([a-z][a-z0-9_]*) --\s*$", re.MULTILINE)
# every loaded block's text -> its name: a traced statement is named by it (engine.tracing)
_NAMES: dict[str, str] = {}


def name_of(text: str) -> str | None:
    """The name of the loaded block whose text is ``text``; ``None`` for SQL of no block."""
    return _NAMES.get(text)


class Queries:
    """The blocks of one ``.sql`` file, by name."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._blocks = parse(path.read_text(encoding="utf-8"), str(path))
        for name, text in self._blocks.items():
            _NAMES.setdefault(text, name)

    def __getitem__(self, name: str) -> str:
        try:
            return self._blocks[name]
        except KeyError:
            raise KeyError(f"no query {name!r} in {self.path.name}") from None

    def names(self) -> list[str]:
        return sorted(self._blocks)


def parse(text: str, source: str) -> dict[str, str]:
    """Split ``text`` into named blocks; a block without its invariant line is an error."""
    blocks: dict[str, str] = {}
    headers = list(_HEADER.finditer(text))
    for i, header in enumerate(headers):
        end = headers[i + 1].start() if i + 1 < len(headers) else len(text)
        body = text[header.end() : end].strip()
        name = header[1]
        if name in blocks:
            raise ValueError(f"{source}: query {name!r} is defined twice")
        if not body.startswith("-- "):
            raise ValueError(f"{source}: query {name!r} lacks its invariant comment line")
        blocks[name] = body
    return blocks


@cache
def load(name: str) -> Queries:
    """The queries of ``engine/store/sql/<name>.sql`` (or a path next to a module)."""
    path = Path(name) if name.endswith(".sql") else Path(__file__).parent / "sql" / f"{name}.sql"
    return Queries(path)
