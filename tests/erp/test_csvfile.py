"""The migration's CSV reader: every record read to its end, each flaw kept with its record.

No database: the reader is plain Python. Well-formed files are read as
``csv.reader`` reads them, whatever piece size the file is read in (a line
may be read in pieces, a ``\\r\\n`` split between two); a flaw is the record's,
and the records after it are read as written.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from flows.erp import csvfile
from flows.erp.csvfile import Record, records

VALUES = [
    "plain",
    "",
    "with, comma",
    'say "hi"',
    '"',
    '""',
    "two\nlines",
    "crlf\r\ninside",
    "bare\rreturn",
    " padded ",
    "caf\u00e9 \u202e \U0001f600",
    "\x00nul",
]


def write(path: Path, text: str) -> Path:
    path.write_bytes(text.encode("utf-8"))
    return path


def lines_before(text: str) -> int:
    return len(text.replace("\r\n", "\n").replace("\r", "\n").split("\n")) - 1


@pytest.mark.parametrize("piece", [1, 2, 3, 7, 1 << 16])
@pytest.mark.parametrize("terminator", ["\n", "\r\n", "\r"])
@pytest.mark.parametrize("quoting", [csv.QUOTE_MINIMAL, csv.QUOTE_ALL])
def test_csvfile__well_formed_records_are_read_as_csv_reads_them_in_any_piece_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, piece: int, terminator: str, quoting: int
) -> None:
    monkeypatch.setattr(csvfile, "PIECE", piece)
    rows = [[a, b, "x"] for a in VALUES for b in VALUES[:4]] + [["last"]]
    text = io.StringIO(newline="")
    csv.writer(text, lineterminator=terminator, quoting=quoting).writerows(rows)
    written = terminator + text.getvalue() + terminator  # blank lines are no record
    source = write(tmp_path / "f.csv", written)
    got = list(records(source, "utf-8", 10))
    expected = [r for r in csv.reader(io.StringIO(written, newline=""), strict=True) if r]
    assert [r.cells for r in got] == expected
    assert [r.number for r in got] == list(range(len(expected)))
    position = 0
    for record in got:
        assert record.flaw is None and record.unclosed is None and record.oversized == ()
        at = written.index(record.raw, position)
        assert written[position:at].strip("\r\n") == "", "nothing between records but breaks"
        assert record.line == lines_before(written[:at]) + 1
        assert record.last_line == lines_before(written[: at + len(record.raw)]) + 1
        assert record.length == len(record.raw)
        position = at + len(record.raw)
        assert record.quoted == [c[:1] == '"' for c in _written_cells(record.raw)]


def _written_cells(raw: str) -> list[str]:
    """The values of a well-formed record as written (quoted or not)."""
    cells, value, quoted = [], "", False
    for c in raw:
        if c == '"':
            quoted = not quoted
        if c == "," and not quoted:
            cells.append(value)
            value = ""
        else:
            value += c
    return [*cells, value]


@pytest.mark.parametrize("piece", [1, 5, 1 << 16])
def test_csvfile__a_flaw_is_its_records_and_the_next_record_is_read_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, piece: int
) -> None:
    monkeypatch.setattr(csvfile, "PIECE", piece)
    source = write(
        tmp_path / "f.csv",
        "h1,h2,h3\n"
        'a,ba"d,c\n'  # 1: a quote inside an unquoted value
        'a,"Quote"d,c\n'  # 2: text after a closing quote
        'a, "x",c\n'  # 3: a quote after a space: unquoted
        'a,"two\nlines"x,c\n'  # 4: lines 5-6, the flaw on line 6
        '"ok ""quoted""",b,c\n'  # 5: fine
        'a,b,c"\n',  # 6: a quote at the end of an unquoted value
    )
    got = list(records(source, "utf-8", 10))[1:]
    flaws = [(r.number, r.line, r.last_line, r.flaw) for r in got]
    assert [
        (n, line, last, f and (f.kind, f.column, f.line, f.text)) for n, line, last, f in flaws
    ] == [
        (1, 2, 2, ("stray-quote", 1, 2, 'ba"d')),
        (2, 3, 3, ("after-close", 1, 3, '"Quote"d')),
        (3, 4, 4, ("stray-quote", 1, 4, ' "x"')),
        (4, 5, 6, ("after-close", 1, 6, '"two\nlines"x')),
        (5, 7, 7, None),
        (6, 8, 8, ("stray-quote", 2, 8, 'c"')),
    ]
    assert got[4].cells == ['ok "quoted"', "b", "c"]
    assert all(r.columns == 3 for r in got), "each flawed record still ends where it ends"


def test_csvfile__a_quote_never_closed_is_the_last_record_marked_where_it_opens(
    tmp_path: Path,
) -> None:
    source = write(tmp_path / "f.csv", 'h1,h2\na,b\nc,"open\nd,e\nf,g\n')
    got = list(records(source, "utf-8", 10))
    assert [r.unclosed for r in got] == [None, None, (3, 1)]
    assert (got[2].line, got[2].last_line) == (3, 6)
    # closed by a quote lines later: one record, over those lines, with its flaw
    source = write(tmp_path / "g.csv", 'h1,h2\nc,"open\nd,e\n"f",g\nh,i\n')
    got = list(records(source, "utf-8", 10))
    assert [(r.line, r.last_line, r.unclosed) for r in got] == [
        (1, 1, None),
        (2, 4, None),
        (5, 5, None),
    ]
    flaw = got[1].flaw
    assert flaw is not None and (flaw.kind, flaw.line) == ("after-close", 4)


@pytest.mark.parametrize("quoted", [False, True])
def test_csvfile__values_over_the_limit_are_kept_as_their_size_in_bounded_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, quoted: bool
) -> None:
    monkeypatch.setattr(csvfile, "FIELD_LIMIT", 1000)
    monkeypatch.setattr(csvfile, "RAW_LIMIT", 5000)
    monkeypatch.setattr(csvfile, "PIECE", 300)
    big = "x" * 20_000 + ("\r\n" + "y" * 99 if quoted else "")
    written = f'"{big}"' if quoted else big
    source = write(tmp_path / "f.csv", f"a,{written},c\nd,e,f\n" + ",".join("g" * 5) + "\n")
    first, second, third = records(source, "utf-8", 3)
    assert first.cells == ["a", "", "c"] and first.oversized == ((1, len(big)),)
    assert first.flaw is None and first.unclosed is None
    assert first.raw == f"a,{written},c"[:5000] and first.length == len(f"a,{written},c")
    assert (second.cells, second.line) == (["d", "e", "f"], 3 if quoted else 2)
    assert third.cells == ["g", "g", "g"] and third.columns == 5, "values past max_cells counted"


def test_csvfile__a_record_is_a_named_tuple_of_its_reading(tmp_path: Path) -> None:
    source = write(tmp_path / "f.csv", "a,b\n")
    (record,) = records(source, "utf-8", 10)
    assert record == Record(
        number=0,
        line=1,
        last_line=1,
        raw="a,b",
        length=3,
        cells=["a", "b"],
        quoted=[False, False],
        columns=2,
    )
