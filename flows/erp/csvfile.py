"""A CSV export read record by record, each flaw kept with the record it is in.

``csv.reader`` raises on the first flaw and then reads on from a place that
is no longer a record's start, reads a quote inside an unquoted value as
part of it (``ba"d``), and gives up on a value longer than its field limit
as if the file were broken. A migration needs each flaw judged where it is:
so this reader (RFC 4180: comma-separated, ``"`` quotes a value, a quote
inside a quoted value is written twice, a quoted value may hold line breaks)
reads every record to its end and says what is wrong with it, and only a
quote never closed, which makes the rest of the file one value, is a flaw of
the file (:attr:`Record.unclosed`).

Memory is bounded whatever the file holds: the file is read in pieces of at
most :data:`PIECE` characters, a value longer than :data:`FIELD_LIMIT` is
kept as its size only, a record keeps at most ``max_cells`` values and the
first :data:`RAW_LIMIT` characters of its text.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NamedTuple

FIELD_LIMIT = 131_072  # characters in one value: far over any column's own limit
RAW_LIMIT = 1 << 20  # characters of a record's original text kept for its reject
PIECE = 1 << 16  # characters read at a time: a line longer than this is read in pieces

_UNQUOTED = re.compile(r'[^,"]*')
# a line of well-formed values, each quoted or not, and the values in it
_WELL_FORMED = re.compile(r'(?:"(?:[^"]|"")*"|[^,"]*)(?:,(?:"(?:[^"]|"")*"|[^,"]*))*')
_VALUE = re.compile(r'(?:^|,)(?:(")((?:[^"]|"")*)"|([^,"]*))')


@dataclass(frozen=True)
class Flaw:
    """A value that is not well-formed CSV: the first one of its record."""

    column: int  # 0-based
    line: int  # the file's line where the value ends
    kind: Literal["stray-quote", "after-close"]
    text: str  # the value as written (its start and end when long)
    length: int  # the length of the value as written


class Record(NamedTuple):
    """One CSV record of the file (the header, or a row) as read."""

    number: int  # the data row's number, 1-based (the header is 0); blank lines are no row
    line: int  # the file's line where it starts, 1-based
    last_line: int  # the file's line where it ends (a quoted value may hold line breaks)
    raw: str  # its text as in the file, without its line break; at most RAW_LIMIT characters
    length: int  # the length of its whole text (more than len(raw) when cut)
    cells: list[str]  # its values (at most max_cells); "" for a value over FIELD_LIMIT
    quoted: list[bool]  # whether each value was written in quotes
    columns: int  # how many values the record has
    oversized: tuple[tuple[int, int], ...] = ()  # (column, characters) of values over the limit
    flaw: Flaw | None = None
    unclosed: tuple[int, int] | None = None  # (line, column) of a quote never closed


def _unquoted_end(body: str, at: int) -> int:
    match = _UNQUOTED.match(body, at)
    return at if match is None else match.end()


def _values(found: list[tuple[str, str, str]]) -> tuple[list[str], list[bool]]:
    """The values of a well-formed line, from _VALUE's matches, and whether each was quoted."""
    cells = [inside.replace('""', '"') if quote else bare for quote, inside, bare in found]
    return cells, [bool(quote) for quote, _, _ in found]


def _shown(text: str) -> str:
    return text if len(text) <= 80 else f"{text[:50]}...{text[-20:]}"


class _Reader:
    """The state of one pass over the file: a record in progress and its value."""

    def __init__(self, max_cells: int) -> None:
        self.max_cells = max_cells
        self.line = 1
        self.number = 0
        self.pending_cr = False  # the last piece ended in "\r": a "\n" next is its line break
        self._new_record()

    def _new_record(self) -> None:
        self.active = False
        self.start = self.line
        self.raw: list[str] = []
        self.kept = 0
        self.length = 0
        self.cells: list[str] = []
        self.quoted: list[bool] = []
        self.count = 0
        self.oversized: list[tuple[int, int]] = []
        self.flaw: Flaw | None = None
        self._new_value(0)

    def _new_value(self, at: int) -> None:
        self.state: Literal["start", "unquoted", "quoted", "quote"] = "start"
        self.parts: list[str] = []
        self.size = 0
        self.value_quoted = False
        self.value_start = at  # offset in the record's text
        self.value_line = self.line
        self.value_flaw: Literal["stray-quote", "after-close"] | None = None

    def _text(self, text: str) -> None:
        """Add text of the file to the record."""
        self.length += len(text)
        if self.kept < RAW_LIMIT:
            text = text[: RAW_LIMIT - self.kept]
            self.raw.append(text)
            self.kept += len(text)

    def _add(self, text: str) -> None:
        """Add text to the value being read."""
        if self.size + len(text) <= FIELD_LIMIT:
            self.parts.append(text)
        else:
            self.parts.clear()
        self.size += len(text)

    def _end_value(self, at: int) -> None:
        index = self.count
        self.count += 1
        if self.value_flaw is not None and self.flaw is None:
            written = "".join(self.raw)[self.value_start : at]
            self.flaw = Flaw(
                index, self.line, self.value_flaw, _shown(written), at - self.value_start
            )
        if index < self.max_cells:
            over = self.size > FIELD_LIMIT
            self.cells.append("" if over else "".join(self.parts))
            self.quoted.append(self.value_quoted)
            if over:
                self.oversized.append((index, self.size))
        self._new_value(at + 1)

    def _end_record(self) -> Record:
        self._end_value(self.length)
        record = Record(
            number=self.number,
            line=self.start,
            last_line=self.line,
            raw="".join(self.raw),
            length=self.length,
            cells=self.cells,
            quoted=self.quoted,
            columns=self.count,
            oversized=tuple(self.oversized),
            flaw=self.flaw,
        )
        self.number += 1
        return record

    def feed(self, piece: str) -> Record | None:
        """Read one piece (a line, or part of a long one); the record it ends, if any."""
        if self.pending_cr and piece.startswith("\n"):
            # the rest of a "\r\n" read in two pieces: no new line
            self.pending_cr = False
            if self.active:  # in a quoted value, whose text it is
                self._text("\n")
                self._add("\n")
            piece = piece[1:]
            if not piece:
                return None
        self.pending_cr = piece.endswith("\r")
        body = piece.rstrip("\r\n")  # one line break at most: readline ends a piece at one
        brk = piece[len(body) :]
        if not self.active:
            if not body:
                if brk:
                    self.line += 1  # a blank line is no record
                return None
            if brk and len(body) <= FIELD_LIMIT:
                if '"' not in body:
                    return self._plain(body, body.split(","), None)
                if _WELL_FORMED.fullmatch(body):
                    return self._plain(body, *_values(_VALUE.findall(body)))
            self.active = True
            self.start = self.line
        offset = self.length
        self._text(body)
        self._scan(body, offset)
        if not brk:
            return None  # a long line, read on
        if self.state == "quoted":  # a line break inside a quoted value is its text
            self._text(brk)
            self._add(brk)
            self.line += 1
            return None
        record = self._end_record()
        self.line += 1
        self._new_record()
        return record

    def _plain(self, body: str, cells: list[str], quoted: list[bool] | None) -> Record:
        """A whole line of well-formed values, none over the limit."""
        count = len(cells)
        record = Record(
            number=self.number,
            line=self.line,
            last_line=self.line,
            raw=body[:RAW_LIMIT],
            length=len(body),
            cells=cells[: self.max_cells],
            quoted=[False] * min(count, self.max_cells)
            if quoted is None
            else quoted[: self.max_cells],
            columns=count,
        )
        self.number += 1
        self.line += 1
        self.start = self.line
        return record

    def _scan(self, body: str, offset: int) -> None:
        i, n = 0, len(body)
        while i < n:
            state = self.state
            if state == "start":
                if body[i] == '"':
                    self.value_quoted = True
                    self.value_line = self.line
                    self.state = "quoted"
                    i += 1
                    continue
                self.state = state = "unquoted"
            if state == "unquoted":
                end = _unquoted_end(body, i)
                if end > i:
                    self._add(body[i:end])
                i = end
                if i < n:
                    if body[i] == ",":
                        self._end_value(offset + i)
                    else:  # a quote inside an unquoted value
                        self.value_flaw = self.value_flaw or "stray-quote"
                        self._add('"')
                    i += 1
            elif state == "quoted":
                end = body.find('"', i)
                if end < 0:
                    self._add(body[i:])
                    return
                self._add(body[i:end])
                self.state = "quote"
                i = end + 1
            else:  # a quote in a quoted value: written twice, or its end
                c = body[i]
                if c == '"':
                    self._add('"')
                    self.state = "quoted"
                    i += 1
                elif c == ",":
                    self._end_value(offset + i)
                    i += 1
                else:  # text after the closing quote: read on as unquoted text
                    self.value_flaw = self.value_flaw or "after-close"
                    self.state = "unquoted"

    def finish(self) -> Record | None:
        """The last record, if the file ends without a line break after it."""
        if not self.active:
            return None
        if self.state == "quoted":
            unclosed = (self.value_line, self.count)
            return self._end_record()._replace(unclosed=unclosed)
        return self._end_record()


def records(path: Path, codec: str, max_cells: int) -> Iterator[Record]:
    """The file's records, the header first, each with its original text and its flaws.

    ``max_cells``: values kept of each record (the rest are counted only).
    """
    reader = _Reader(max_cells)
    with path.open(encoding=codec, newline="") as f:
        while piece := f.readline(PIECE):
            record = reader.feed(piece)
            if record is not None:
                yield record
    last = reader.finish()
    if last is not None:
        yield last
