"""Ties of every figure to its source (flows/erp/ties.py), on books the flows built.

Each tamper is an edit in SQL, as an attacker or a bug would make it, that
every identity of the totals lets through (the journal still balances, the
item cost's row CHECK still holds); each must come back as a failing check
of ``engine books check`` that names the document, the store or the item.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import psycopg
import pytest
from erp_books import close, cost, post, seeded

from engine import Refused
from flows.erp import checks, exports, periods
from flows.tools.seed import seed

NOV = "2026-11"
D = Decimal

TIES = (
    "document journals = document lines",
    "posted documents unchanged",
    "document journals = posted documents",
    "stock moves = document lines",
    "item costs recomputed from the stock moves",
    "standard costs kept with the item costs",
)


def failed(conn: psycopg.Connection[Any], period: str = NOV) -> dict[str, str]:
    """The checks of ``period`` that fail, by name, with their detail."""
    return {c.name: c.detail for c in checks.check_period(conn, period).checks if not c.ok}


def document(conn: psycopg.Connection[Any], kind: str) -> dict[str, Any]:
    """A posted document of ``kind`` with an item line: id, number, store, journal id, a line."""
    row = conn.execute(
        "SELECT d.id, d.number, s.code AS store, j.id AS journal, l.line_no, l.item_id, i.sku "
        "FROM erp_documents AS d JOIN erp_stores AS s ON s.id = d.store_id "
        "JOIN erp_journals AS j ON j.source_key = 'document:' || d.id "
        "JOIN erp_document_lines AS l ON l.document_id = d.id AND l.item_id IS NOT NULL "
        "JOIN erp_items AS i ON i.id = l.item_id "
        "WHERE d.status = 'posted' AND d.kind = %s ORDER BY d.id, l.line_no LIMIT 1",
        (kind,),
    ).fetchone()
    assert row is not None, f"no posted {kind} with an item line"
    return row


def item_cost(conn: psycopg.Connection[Any], where: str) -> dict[str, Any]:
    """An item cost of November matching ``where`` (on c = erp_item_costs), with store and sku."""
    row = conn.execute(
        "SELECT c.store_id, c.item_id, s.code AS store, i.sku FROM erp_item_costs AS c "
        "JOIN erp_stores AS s ON s.id = c.store_id JOIN erp_items AS i ON i.id = c.item_id "
        f"WHERE c.period = %s AND {where} ORDER BY c.store_id, c.item_id LIMIT 1",
        (NOV,),
    ).fetchone()
    assert row is not None, f"no item cost where {where}"
    return row


@pytest.fixture
def books(conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    """November seeded, posted and costed (three stores, a transfer), every check holding."""
    seeded(conn)
    return conn


def test_ties__a_clean_month_ties_every_figure(books: psycopg.Connection[Any]) -> None:
    report = checks.check_period(books, NOV)

    assert report.ok, report.problems
    ties = {c.name: c for c in report.checks if c.name in TIES}
    assert set(ties) == set(TIES)
    assert not any(c.skipped for c in ties.values())
    kept = books.execute(
        "SELECT count(*) AS n FROM erp_document_postings AS p "
        "JOIN erp_journals AS j ON j.id = p.journal_id AND j.period = p.period"
    ).fetchone()
    posted = books.execute(
        "SELECT count(*) AS n FROM erp_documents WHERE status = 'posted'"
    ).fetchone()
    assert kept is not None and posted is not None and kept["n"] == posted["n"] > 0


def test_ties__a_journal_changed_by_a_balanced_pair_of_cents_names_the_document(
    books: psycopg.Connection[Any],
) -> None:
    doc = document(books, "sales_invoice")
    with books.transaction():
        books.execute(
            "UPDATE erp_journal_lines SET debit = debit + 0.01 "
            "WHERE journal_id = %s AND debit > 0 AND line_no = "
            "(SELECT min(line_no) FROM erp_journal_lines WHERE journal_id = %s AND debit > 0)",
            (doc["journal"], doc["journal"]),
        )
        books.execute(
            "UPDATE erp_journal_lines SET credit = credit + 0.01 "
            "WHERE journal_id = %s AND credit > 0 AND line_no = "
            "(SELECT min(line_no) FROM erp_journal_lines WHERE journal_id = %s AND credit > 0)",
            (doc["journal"], doc["journal"]),
        )

    found = failed(books)

    detail = found["document journals = document lines"]
    assert detail.startswith("1 differ: ") and f"{doc['number']} ({doc['store']})" in detail
    assert "journal debit" in detail


def test_ties__a_deleted_journal_names_its_document(books: psycopg.Connection[Any]) -> None:
    doc = document(books, "sales_invoice")
    with books.transaction():
        books.execute("DELETE FROM erp_journal_lines WHERE journal_id = %s", (doc["journal"],))
        books.execute("DELETE FROM erp_journals WHERE id = %s", (doc["journal"],))

    detail = failed(books)["document journals = posted documents"]

    assert f"{doc['number']} ({doc['store']}): its journal {doc['journal']}" in detail
    assert "is gone" in detail


def test_ties__a_journal_deleted_with_its_record_and_posted_again_is_named(
    books: psycopg.Connection[Any],
) -> None:
    doc = document(books, "sales_invoice")
    with books.transaction():
        books.execute("DELETE FROM erp_document_postings WHERE document_id = %s", (doc["id"],))
        books.execute("DELETE FROM erp_journal_lines WHERE journal_id = %s", (doc["journal"],))
        books.execute("DELETE FROM erp_journals WHERE id = %s", (doc["journal"],))

    detail = failed(books)["document journals = posted documents"]

    assert f"{doc['number']} ({doc['store']}): posted without a journal" in detail


def test_ties__a_journal_without_a_document_is_named(books: psycopg.Connection[Any]) -> None:
    with books.transaction():
        row = books.execute(
            "INSERT INTO erp_journals (period, store_id, source, source_key) "
            "VALUES (%s, 1, 'document', 'document:999999') RETURNING id",
            (NOV,),
        ).fetchone()
        assert row is not None
        books.execute(
            "INSERT INTO erp_journal_lines (journal_id, line_no, account_code, store_id, "
            "debit, credit) VALUES (%s, 1, '1000', 1, 5, 0), (%s, 2, '4000', 1, 0, 5)",
            (row["id"], row["id"]),
        )

    detail = failed(books)["document journals = posted documents"]

    store = books.execute("SELECT code FROM erp_stores WHERE id = 1").fetchone()
    assert store is not None
    assert f"document:999999 ({store['code']}): journal document:999999: no such document" in detail


def test_ties__a_posted_documents_edited_lines_are_named(books: psycopg.Connection[Any]) -> None:
    doc = document(books, "sales_invoice")
    with books.transaction():
        # amounts unchanged, so the journal still matches; the quantity sold is not what posted
        books.execute(
            "UPDATE erp_document_lines SET qty = qty + 1 WHERE document_id = %s AND line_no = %s",
            (doc["id"], doc["line_no"]),
        )

    found = failed(books)

    assert found["posted documents unchanged"] == (
        f"1 differ: {doc['number']} ({doc['store']}) changed since it was posted"
    )
    moves = found["stock moves = document lines"]
    assert f"{doc['number']} line {doc['line_no']} sale ({doc['store']} {doc['sku']})" in moves
    assert "qty" in moves


def test_ties__a_posted_documents_amounts_edited_are_named_twice(
    books: psycopg.Connection[Any],
) -> None:
    doc = document(books, "sales_invoice")
    with books.transaction():
        books.execute(
            "UPDATE erp_document_lines SET credit = credit + 1 "
            "WHERE document_id = %s AND line_no = "
            "(SELECT min(line_no) FROM erp_document_lines WHERE document_id = %s AND credit > 0)",
            (doc["id"], doc["id"]),
        )
        books.execute(
            "UPDATE erp_document_lines SET debit = debit + 1 "
            "WHERE document_id = %s AND line_no = "
            "(SELECT min(line_no) FROM erp_document_lines WHERE document_id = %s AND debit > 0)",
            (doc["id"], doc["id"]),
        )

    found = failed(books)

    assert doc["number"] in found["posted documents unchanged"]
    assert f"{doc['number']} ({doc['store']})" in found["document journals = document lines"]


def test_ties__an_average_changed_in_its_fourth_decimal_names_the_store_and_item(
    books: psycopg.Connection[Any],
) -> None:
    own = item_cost(books, "c.loop_group IS NULL AND c.average_from = 'solved' AND c.issue_qty = 0")
    with books.transaction():
        books.execute(
            "UPDATE erp_item_costs SET average_cost = average_cost + 0.0001 "
            "WHERE period = %s AND store_id = %s AND item_id = %s",
            (NOV, own["store_id"], own["item_id"]),
        )

    detail = failed(books)["item costs recomputed from the stock moves"]

    assert detail.startswith(f"store/items: 1 differ: {own['store']} {own['sku']}: average cost ")


def test_ties__a_moving_items_average_changed_is_named_against_the_solve(
    books: psycopg.Connection[Any],
) -> None:
    moving = item_cost(
        books,
        "EXISTS (SELECT 1 FROM erp_item_averages AS a WHERE a.period = c.period "
        "AND a.item_id = c.item_id AND a.store_id = c.store_id)",
    )
    with books.transaction():
        books.execute(
            "UPDATE erp_item_costs SET average_cost = average_cost - 0.0001 "
            "WHERE period = %s AND store_id = %s AND item_id = %s",
            (NOV, moving["store_id"], moving["item_id"]),
        )

    detail = failed(books)["item costs recomputed from the stock moves"]

    assert f"{moving['store']} {moving['sku']}: average cost " in detail


def test_ties__a_transfer_value_moved_into_closing_is_named(
    books: psycopg.Connection[Any],
) -> None:
    sent = item_cost(books, "c.transfer_out_qty > 0")
    with books.transaction():
        # value conservation still holds row by row: a cent from transfers out to closing
        books.execute(
            "UPDATE erp_item_costs SET transfer_out_value = transfer_out_value - 0.01, "
            "closing_value = closing_value + 0.01 "
            "WHERE period = %s AND store_id = %s AND item_id = %s",
            (NOV, sent["store_id"], sent["item_id"]),
        )

    detail = failed(books)["item costs recomputed from the stock moves"]

    assert f"{sent['store']} {sent['sku']}: transfer out value " in detail
    assert "closing value" in detail


def test_ties__a_sale_move_deleted_before_costing_is_named_and_the_close_refused(
    conn: psycopg.Connection[Any],
) -> None:
    seed(conn, stores=3, brands=1, employees=3, items=5, period=NOV, seed=9, new_stores=1)
    post(conn, NOV)
    doc = document(conn, "sales_invoice")
    with conn.transaction():
        conn.execute(
            "DELETE FROM erp_stock_moves WHERE document_id = %s AND line_no = %s",
            (doc["id"], doc["line_no"]),
        )
    cost(conn, NOV)

    detail = failed(conn)["stock moves = document lines"]

    assert detail.startswith(
        f"1 differ: {doc['number']} line {doc['line_no']} sale ({doc['store']} {doc['sku']}): "
        "no sale move of qty -"
    )
    with pytest.raises(Refused, match=f"stock moves = document lines.*{doc['number']}"):
        close(conn, NOV)


def test_ties__a_move_without_a_document_line_is_named(books: psycopg.Connection[Any]) -> None:
    doc = document(books, "sales_invoice")
    with books.transaction():
        # a move needs a document and a line number (a CHECK): one the document does not have
        books.execute(
            "INSERT INTO erp_stock_moves (period, store_id, item_id, moved_on, kind, qty, "
            "document_id, line_no) SELECT %s, store_id, item_id, moved_on, 'sale', -1, "
            "document_id, 999 FROM erp_stock_moves WHERE document_id = %s AND line_no = %s",
            (NOV, doc["id"], doc["line_no"]),
        )

    detail = failed(books)["stock moves = document lines"]

    assert f"{doc['number']} line 999 sale ({doc['store']} {doc['sku']}): move " in detail
    assert "has no line of a posted document posting in 2026-11" in detail


def test_ties__a_moves_quantity_changed_after_costing_is_named(
    books: psycopg.Connection[Any],
) -> None:
    doc = document(books, "purchase_invoice")
    with books.transaction():
        books.execute(
            "UPDATE erp_stock_moves SET qty = qty + 1 WHERE document_id = %s AND line_no = %s",
            (doc["id"], doc["line_no"]),
        )

    found = failed(books)

    moves = found["stock moves = document lines"]
    assert f"{doc['number']} line {doc['line_no']} receipt ({doc['store']} {doc['sku']})" in moves
    assert (
        f"{doc['store']} {doc['sku']}: receipt qty"
        in (found["item costs recomputed from the stock moves"])
    )


def test_ties__the_standard_cost_is_kept_and_a_closed_periods_export_never_changes(
    books: psycopg.Connection[Any],
) -> None:
    close(books, NOV)
    scope = exports.resolve_scope(books, NOV)
    before = list(exports.item_costs(books, scope))
    with books.transaction():
        # an items migration after the close
        books.execute("UPDATE erp_items SET standard_cost = standard_cost + 1")

    after = list(exports.item_costs(books, scope))

    assert after == before
    report = checks.check_period(books, NOV)
    assert report.ok, report.problems
    kept = next(c for c in report.checks if c.name == "standard costs kept with the item costs")
    assert f"{len(before)} differ from erp_items today" in kept.detail


def test_ties__a_kept_standard_cost_that_is_not_the_one_fallen_back_to_is_named(
    books: psycopg.Connection[Any],
) -> None:
    with books.transaction():
        books.execute(
            "UPDATE erp_item_costs SET average_from = 'fallback_standard' "
            "WHERE (period, store_id, item_id) = (SELECT period, store_id, item_id "
            "FROM erp_item_costs AS c WHERE period = %s AND NOT EXISTS (SELECT 1 "
            "FROM erp_item_averages AS a WHERE a.period = c.period AND a.item_id = c.item_id) "
            "ORDER BY store_id, item_id LIMIT 1)",
            (NOV,),
        )
    tampered = item_cost(books, "c.average_from = 'fallback_standard'")

    found = failed(books)

    assert (
        f"{tampered['store']} {tampered['sku']}: average "
        in (found["standard costs kept with the item costs"])
    )
    assert (
        f"{tampered['store']} {tampered['sku']}: average from"
        in (found["item costs recomputed from the stock moves"])
    )


def test_ties__a_kept_standard_cost_changed_in_one_store_is_named(
    books: psycopg.Connection[Any],
) -> None:
    """A period costs an item at one standard cost in every store: a kept one edited in one
    store's item cost (an average that did not fall back to it) is named."""
    with books.transaction():
        books.execute(
            "UPDATE erp_item_costs SET standard_cost = standard_cost + 1 "
            "WHERE (period, store_id, item_id) = (SELECT period, store_id, item_id "
            "FROM erp_item_costs AS c WHERE period = %s AND average_from <> 'fallback_standard' "
            "AND (SELECT count(*) FROM erp_item_costs AS o WHERE o.period = c.period "
            "AND o.item_id = c.item_id) > 1 ORDER BY store_id, item_id LIMIT 1)",
            (NOV,),
        )
    tampered = item_cost(
        books,
        "c.standard_cost <> (SELECT i.standard_cost FROM erp_items AS i WHERE i.id = c.item_id)",
    )

    found = failed(books)

    detail = found["standard costs kept with the item costs"]
    assert f"{tampered['store']} {tampered['sku']}: standard cost " in detail
    assert "one standard cost per item" in detail


def test_ties__refuse_the_close_of_a_tampered_month(books: psycopg.Connection[Any]) -> None:
    doc = document(books, "sales_invoice")
    with books.transaction():
        books.execute(
            "UPDATE erp_document_lines SET description = description || 'x', qty = qty + 1 "
            "WHERE document_id = %s AND line_no = %s",
            (doc["id"], doc["line_no"]),
        )

    with pytest.raises(Refused, match=f"posted documents unchanged.*{doc['number']}"):
        close(books, NOV)
    assert periods.status(books, NOV) == "costed"
