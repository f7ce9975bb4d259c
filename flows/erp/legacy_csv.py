"""A legacy CSV export to migrate, checked as a whole and row by row.

:class:`Source` opens a file of one :data:`Kind` (items, opening balances)
and refuses it (:class:`engine.Refused`, naming what is wrong and what
would do) when it cannot be loaded at all: missing, not text in its stated
encoding, a header without the kind's columns, no data rows, a quote never
closed. Each data row is then checked on its own (:meth:`Source.check`):
its CSV, its cells against :class:`ItemRow` or :class:`OpeningRow`, whose
field descriptions say what is valid, and the numbers an opening states.
What a migration does with the rows is :mod:`flows.migration`'s.
"""

from __future__ import annotations

import codecs
import hashlib
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from engine import Refused
from flows.erp import csvfile
from flows.erp.csvfile import Flaw, Record, records
from flows.erp.types import Period

__all__ = ["KEYS", "MODELS", "ItemRow", "Kind", "OpeningRow", "Row", "Source"]

Kind = Literal["items", "opening-balances"]


class ItemRow(BaseModel):
    """A row of an items file; each field's description says what is valid."""

    sku: str = Field(
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="the item's code: 1-64 letters, digits, '_', '.' or '-'",
    )
    brand_code: str = Field(
        min_length=1, max_length=32, description="the code of an existing brand"
    )
    name: str = Field(min_length=1, max_length=200, description="the item's name, 1-200 characters")
    standard_cost: Decimal = Field(
        ge=0, max_digits=14, decimal_places=4, description="a cost of 0 or more, 4 decimals at most"
    )
    price: Decimal = Field(
        ge=0,
        max_digits=14,
        decimal_places=2,
        description="a price of 0 or more, 2 decimals at most",
    )

    def problem(self, values: dict[str, str]) -> str | None:
        """Why the row, valid field by field, is no item (never: its fields say it all)."""
        return None


class OpeningRow(BaseModel):
    """A row of an opening-balances file: the stock a store counts at its books' start."""

    store_code: str = Field(
        min_length=1, max_length=32, description="the code of an existing store"
    )
    sku: str = Field(min_length=1, max_length=64, description="the sku of an existing item")
    period: Period
    qty: Decimal = Field(
        max_digits=14,
        decimal_places=3,
        description="the units on hand, 0 or more (3 decimals at most)",
    )
    value: Decimal = Field(
        max_digits=16,
        decimal_places=2,
        description="what those units are worth, 0 or more (2 decimals at most); 0 for 0 units",
    )

    def problem(self, values: dict[str, str]) -> str | None:
        """Why the row, valid field by field, states no stock: the numbers must agree."""
        qty, value = values["qty"], values["value"]
        if self.qty < 0:
            return (
                f"qty: {qty} units on hand; an opening balance is stock counted on hand, "
                "0 or more units (a shortage is a movement of the period, not an opening)"
            )
        if self.value < 0:
            return f"value: {value} for qty {qty}; stock is worth 0 or more"
        if self.qty == 0 and self.value != 0:
            return (
                f"qty 0 with value {value}: a value without a quantity; no units are worth "
                "0, so give the units that value is for, or value 0"
            )
        return None


MODELS: dict[str, type[ItemRow] | type[OpeningRow]] = {
    "items": ItemRow,
    "opening-balances": OpeningRow,
}
# the natural key of a row: a file states each item, or each opening balance, once
KEYS: dict[str, tuple[str, ...]] = {
    "items": ("sku",),
    "opening-balances": ("store_code", "sku", "period"),
}


MAX_COLUMNS = 1024  # columns of a header: more is no export of ours


def _codec(encoding: str) -> str:
    # a spreadsheet's UTF-8 export may start with a byte order mark
    return "utf-8-sig" if encoding == "utf-8" else encoding


def _decoded_sha256(path: Path, source: str, encoding: str) -> str:
    """The file's sha256, once every byte of it decodes; else refused, naming the first bad one."""
    decoder = codecs.getincrementaldecoder(_codec(encoding))()
    digest = hashlib.sha256()
    offset = newlines = 0
    with path.open("rb") as f:
        while True:
            block = f.read(1 << 20)
            state = decoder.getstate()
            try:
                newlines += decoder.decode(block, final=not block).count("\n")
            except UnicodeDecodeError as exc:
                # the bytes in error may begin in bytes the decoder held from the last block
                bad = offset + len(block) - len(exc.object) + exc.start
                decoder.setstate(state)
                line = newlines + decoder.decode(block[: max(0, bad - offset)]).count("\n") + 1
                raise Refused(
                    f"{source} is not {encoding} text: byte offset {bad} (line {line}) holds "
                    f"0x{exc.object[exc.start]:02x}, which {encoding} cannot decode "
                    f"({exc.reason}); save the file as {encoding}, or give its encoding "
                    "with --encoding (e.g. cp1252 for a Windows export)"
                ) from None
            if not block:
                return digest.hexdigest()
            digest.update(block)
            offset += len(block)


def _quote_advice(flaw: Flaw, lines: tuple[int, int] | None = None) -> str:
    """What is wrong with a value's quotes and how it is written right.

    ``lines``: the lines a record spans when a quoted value took in its line breaks.
    """
    what = {
        "stray-quote": "a quote inside an unquoted value",
        "after-close": "text after the closing quote",
    }[flaw.kind]
    shown = flaw.text.replace("\r", "\\r").replace("\n", "\\n")
    if lines is not None:
        first, last = lines
        return (
            f"{what} ({shown}); lines {first}-{last} were read as one record, a quoted value "
            f"holding their line breaks: is a quote never closed on line {first}? Close it, "
            'and write a quote inside a quoted value as ""'
        )
    rule = f"{what} ({shown}); write a value holding a quote in quotes, each quote in it doubled"
    if flaw.length > len(flaw.text):
        return rule  # shown cut: no whole value to write right
    return rule + ": " + '"' + shown.replace('"', '""') + '"'


Row = ItemRow | OpeningRow


class Source:
    """A CSV export checked as a whole: its checksum, its header and its rows.

    Raises :class:`engine.Refused`, naming what is wrong and what would do,
    when the file cannot be loaded at all.
    """

    def __init__(self, source: str, kind: Kind, encoding: str) -> None:
        self.source, self.kind, self.encoding = source, kind, encoding
        self.path = Path(source)
        self.model = MODELS[kind]
        expected = ",".join(self.model.model_fields)
        if not self.path.is_file():
            raise Refused(
                f"source file {source!r} does not exist (or is not a file); it must be on "
                "storage the workers share"
            )
        try:
            self.sha256 = _decoded_sha256(self.path, source, encoding)
            header = next(records(self.path, _codec(encoding), MAX_COLUMNS), None)
        except OSError as exc:
            raise Refused(f"source file {source!r} cannot be read: {exc.strerror}") from exc
        if header is None:
            raise Refused(f"{source} is empty: no header line; expected header: {expected}")
        problem = self._header_problem(header)
        if problem:
            line = header.line  # or where its flaw is
            if header.unclosed is not None:
                line = header.unclosed[0]
            elif header.flaw is not None:
                line = header.flaw.line
            raise Refused(f"{source}: line {line}: {problem}; expected header: {expected}")
        # a byte order mark that the encoding keeps (utf-16-le, ...) is no part of a name
        names = [c.strip() for c in header.cells]
        names[0] = names[0].lstrip("\ufeff").strip()
        for name in names:
            if name and names.count(name) > 1:
                raise Refused(
                    f"{source}: column {name} is named twice in the header; "
                    f"expected header: {expected}"
                )
        missing = [c for c in self.model.model_fields if c not in names]
        if missing:
            hint = ""
            if names[0].startswith("\u00ef\u00bb\u00bf"):  # a UTF-8 byte order mark, misread
                hint = (
                    f" (the file starts with a UTF-8 byte order mark: is it utf-8, not {encoding}?)"
                )
            raise Refused(
                f"{source}: missing column(s) {', '.join(missing)} for kind {kind!r}; "
                f"expected header: {expected}{hint}"
            )
        self.width = len(names)
        self.names = [name or f"column {i + 1}" for i, name in enumerate(names)]
        self.columns = {c: names.index(c) for c in self.model.model_fields}

    def _header_problem(self, header: Record) -> str:
        if header.unclosed is not None:
            return self._unclosed(header, f"column {header.unclosed[1] + 1}")
        if header.columns > MAX_COLUMNS:
            most = MAX_COLUMNS
            return f"the header has {header.columns} columns; a file to migrate has at most {most}"
        if header.flaw is not None:
            return f"the header is not well-formed CSV: {_quote_advice(header.flaw)}"
        for column, size in header.oversized:
            return f"header column {column + 1} is {size} characters long, not a column name"
        for column, name in enumerate(header.cells):
            if "\x00" in name:
                return f"header column {column + 1} contains a NUL character (0x00)"
        return ""

    def _unclosed(self, record: Record, column: str) -> str:
        return (
            f"a quoted field starts here and is never closed: its quote opens {column} and "
            f"runs to the end of the file (line {record.last_line}), which would make the "
            'rest of the file one value; close it, and write a quote inside a quoted value as ""'
        )

    def rows(self) -> Iterator[Record]:
        """The data rows, in order; refused on a flaw that breaks the rest of the file."""
        rows = records(self.path, _codec(self.encoding), self.width)
        next(rows)  # the header
        empty = True
        for record in rows:
            if record.unclosed is not None:
                line, column = record.unclosed
                raise Refused(
                    f"{self.source}: line {line}: {self._unclosed(record, self._name(column))}"
                )
            empty = False
            yield record
        if empty:
            raise Refused(f"{self.source} has a header and no data rows: nothing to load")

    def _name(self, column: int) -> str:
        return f"column {column + 1} ({self.names[column]})"

    def values(self, record: Record) -> dict[str, str] | str:
        """The row's values by column, or why the row is rejected.

        A value written without quotes is read without the spaces and tabs around it
        (padding); a quoted value is read exactly as written.
        """
        if record.flaw is not None:
            flaw = record.flaw
            lines = (record.line, record.last_line) if record.last_line > record.line else None
            return (
                f"malformed CSV at line {flaw.line}, {self._name(flaw.column)}: "
                f"{_quote_advice(flaw, lines)}"
            )
        if record.columns != self.width:
            count = record.columns
            return f"row has {count} column{'' if count == 1 else 's'}, the header has {self.width}"
        for column, size in record.oversized:
            return (
                f"{self._name(column)}: a value of {size} characters; one value may hold at "
                f"most {csvfile.FIELD_LIMIT}"
            )
        for column, cell in enumerate(record.cells):
            if "\x00" in cell:
                name = self.names[column]
                return f"{name}: contains a NUL character (0x00), which text cannot hold"
        return {
            c: record.cells[i] if record.quoted[i] else record.cells[i].strip(" \t")
            for c, i in self.columns.items()
        }

    def check(self, record: Record) -> Row | str:
        """The row, valid, or why it is rejected (naming the value and what would be valid)."""
        values = self.values(record)
        if isinstance(values, str):
            return values
        missing = [c for c, v in values.items() if not v]
        if missing:
            fields = self.model.model_fields
            return "; ".join(f"{c}: no value; give {fields[c].description}" for c in missing)
        try:
            row = self.model.model_validate(values)
        except ValidationError as exc:
            return _problems(exc)
        return row.problem(values) or row

    def key(self, row: Row) -> list[str]:
        """The row's natural key."""
        return [str(getattr(row, c)) for c in KEYS[self.kind]]


def _quoted(value: object) -> str:
    if isinstance(value, str) and len(value) > 60:
        return f"{value[:60]!r}... ({len(value)} characters)"
    return repr(value)


def _problems(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']} (got {_quoted(e.get('input'))})"
        for e in exc.errors()
    )
