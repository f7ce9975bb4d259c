"""Deterministic demo data for the ERP: ``engine seed`` and :func:`seed`.

One ``random.Random`` per section (catalog, opening stock, moves, documents),
each seeded from ``--seed``, so the same options give the same rows and more
documents do not change the moves. Rows are built in Python and loaded with
COPY in one transaction; stock moves (about a million at the real size) go
out as COPY text, one store at a time, without an intermediate row object.

Layout: the seeded period P is open and has opening balances (every
store's first period, ``erp_store_periods``: loaded); the period
before it is closed and holds only the deliberately bad documents whose fault
is "dated in a closed period". A transfer is two adjacent moves on one day:
``transfer_out`` at the sender, then ``transfer_in`` at another store of the
same brand, each naming the other as counterpart.
"""

from __future__ import annotations

import calendar
import datetime as dt
import json
import random
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, NamedTuple, TypeVar

import click
import psycopg
from psycopg import sql
from pydantic import BaseModel

from engine import BadInput, EngineError, Settings, StoreError, connect
from flows.erp.queries import NamedQueries
from flows.erp.types import parse_period, previous_period, year_month

__all__ = ["DEFAULT_MOVES_PER_ITEM", "HOSTILE_MEMOS", "SeedReport", "command", "seed"]

DEFAULT_MOVES_PER_ITEM = 11.0
"""Average stock moves per (store, item) and month: 50 stores x 2000 items ~ 1M moves."""

HOSTILE_MEMOS = (
    "'; DROP TABLE erp_documents; --",
    "<script>alert(1)</script>",
    "{{ 7*7 }}",
    "%s",
    "=cmd|' /C calc'!A0",
)
"""Memos that every layer (SQL, HTML reports, CSV exports) must carry byte-exact."""

_Q = NamedQueries("seed")
_CENT = Decimal("0.01")
_VAT = Decimal("0.20")
_SIZES = ("small", "medium", "large", "flagship")
_SIZE_WEIGHTS = (40, 35, 18, 7)
_VOLUME = {"small": 0.6, "medium": 0.9, "large": 1.3, "flagship": 2.2}
# divided out so that moves_per_item is the average over the size mix
_MEAN_VOLUME = sum(_VOLUME[s] * w for s, w in zip(_SIZES, _SIZE_WEIGHTS, strict=True)) / 100
_STAFF_WEIGHT = {"small": 2, "medium": 3, "large": 5, "flagship": 8}
_BRANDS = ("Northwind", "Aster & Co", "Lumen", "Kestrel", "Maison Ode", "Tidewater")
_CITIES = ("Lyon", "Porto", "Leeds", "Ghent", "Turin", "Graz", "Malmo", "Cork", "Bilbao", "Brno")
_FIRST = ("Ana", "Ben", "Chloe", "Dario", "Eva", "Farid", "Greta", "Hugo", "Ines", "Jonas")
_LAST = ("Moreau", "Silva", "Novak", "Rossi", "Berg", "Kaya", "Walsh", "Dubois", "Meyer", "Costa")
_ROLES = ("sales associate", "cashier", "stock clerk", "assistant manager", "visual merchandiser")
_ADJECTIVES = ("Classic", "Linen", "Slim", "Organic", "Waxed", "Merino", "Canvas", "Quilted")
_NOUNS = ("Shirt", "Jacket", "Scarf", "Tote", "Sneaker", "Cardigan", "Trousers", "Beanie")
# kind: (number prefix, weight, memo templates)
_DOC_KINDS: dict[str, tuple[str, int, tuple[str, ...]]] = {
    "sales_invoice": ("SI", 55, ("Counter sales, till {n}", "Online order pick-up {n}")),
    "purchase_invoice": ("PI", 20, ("Supplier delivery {n}", "Replenishment order {n}")),
    "credit_note": ("CN", 10, ("Customer return, wrong size ({n})", "Damaged goods ({n})")),
    "stock_transfer": ("TR", 15, ("Rebalancing stock, run {n}", "Store event stock, run {n}")),
}
# kind: (goods account, goods on the debit side, counterpart account, its description)
_INVOICE_ACCOUNTS = {
    "sales_invoice": ("4000", False, "1100", "receivable"),
    "purchase_invoice": ("1300", True, "2000", "payable"),
    "credit_note": ("4100", True, "1100", "refund due"),
}
_BAD_FAULTS = ("unbalanced", "unknown_account", "closed_period")
_F = TypeVar("_F", bound=Callable[..., Any])


class SeedReport(BaseModel):
    """What :func:`seed` wrote: rows per table, the faults planted, the time it took."""

    period: str
    closed_period: str
    seed: int
    brands: int
    stores: int
    employees: int
    items: int
    periods: int
    opening_balances: int
    stock_moves: int
    documents: int
    document_lines: int
    stock_moves_by_kind: dict[str, int]
    bad_documents: dict[str, int]
    negative_stock_items: int
    elapsed_s: float

    def table_counts(self) -> dict[str, int]:
        """Rows written per ERP table."""
        names = "brands stores employees items periods opening_balances stock_moves documents"
        return {f"erp_{n}": getattr(self, n) for n in [*names.split(), "document_lines"]}


class _Store(NamedTuple):
    id: int
    code: str
    brand_id: int
    name: str
    size: str


class _Item(NamedTuple):
    id: int
    brand_id: int
    sku: str
    name: str
    cost: Decimal
    price: Decimal


class _Month:
    """The days of one period and the weekend-heavy weights of its sales."""

    def __init__(self, period: str) -> None:
        self.period = period
        year, month = year_month(period)
        if year < 2:
            raise BadInput(f"period {period!r} is too early: the period before it must exist")
        last = calendar.monthrange(year, month)[1]
        self.days = [dt.date(year, month, d) for d in range(1, last + 1)]
        self.text = [d.isoformat() for d in self.days]
        self.weekdays = [i for i, d in enumerate(self.days) if d.weekday() < 5]
        weights = [1.8 if d.weekday() >= 5 else 1.0 for d in self.days]
        self.sale_cw = [sum(weights[: i + 1]) for i in range(last)]
        self.previous = previous_period(period)
        prev = dt.date(year, month, 1) - dt.timedelta(days=1)
        self.previous_days = [prev.replace(day=d) for d in range(1, prev.day + 1)]


class _World:
    """Brands, stores, staff and catalog: what the moves and documents are about."""

    def __init__(self, seed: int, stores: int, brands: int, employees: int, items: int) -> None:
        rng = random.Random(f"{seed}:catalog")
        self.brands = [
            (b, f"BR{b}", _BRANDS[(b - 1) % 6] + (f" {b}" if b > 6 else ""))
            for b in range(1, brands + 1)
        ]
        self.stores: list[_Store] = []
        self.by_brand: dict[int, list[int]] = {b: [] for b in range(1, brands + 1)}
        for s in range(1, stores + 1):
            brand = (s - 1) % brands + 1
            name = f"{self.brands[brand - 1][2]} {_CITIES[s % 10]} {s}"
            size = rng.choices(_SIZES, _SIZE_WEIGHTS)[0]
            self.stores.append(_Store(s, f"ST{s:03d}", brand, name, size))
            self.by_brand[brand].append(s)
        homes = [s.id for s in self.stores]  # one manager each, the rest by store size
        weights = [_STAFF_WEIGHT[s.size] for s in self.stores]
        homes += rng.choices(homes, weights, k=employees - stores)
        self.staff = [
            (
                n,
                home,
                f"{rng.choice(_FIRST)} {rng.choice(_LAST)}",
                "store manager" if n <= stores else rng.choice(_ROLES),
            )
            for n, home in enumerate(homes, 1)
        ]
        self.staff_of: dict[int, list[int]] = {}
        for n, home in enumerate(homes, 1):
            self.staff_of.setdefault(home, []).append(n)
        self.catalog: dict[int, list[_Item]] = {b: [] for b in range(1, brands + 1)}
        for b, n in ((b, n) for b in range(1, brands + 1) for n in range(1, items + 1)):
            cost = Decimal(str(round(rng.uniform(1, 200), rng.choice((2, 3, 4)))))
            price = (cost * Decimal(str(round(rng.uniform(1.3, 2.5), 4)))).quantize(_CENT)
            name = f"{rng.choice(_ADJECTIVES)} {rng.choice(_NOUNS)} {n}"
            item = _Item((b - 1) * items + n, b, f"BR{b}-{n:06d}", name, cost, price)
            self.catalog[b].append(item)

    def others(self, store: _Store) -> list[int]:
        """The other stores of ``store``'s brand: where its transfers may go."""
        return [s for s in self.by_brand[store.brand_id] if s != store.id]

    def opening(self, seed: int, period: str) -> tuple[dict[tuple[int, int], int], list[str]]:
        """Opening qty per (store, item) for ~60% of each store's brand items, and COPY text."""
        rng = random.Random(f"{seed}:opening")
        qty: dict[tuple[int, int], int] = {}
        chunks = []
        for store in self.stores:
            rows = []
            for item in self.catalog[store.brand_id]:
                if rng.random() < 0.6:
                    q = qty[store.id, item.id] = rng.randint(0, 200)
                    factor = Decimal(f"{rng.uniform(0.9, 1.1):.4f}")
                    value = (q * item.cost * factor).quantize(_CENT, ROUND_HALF_UP)
                    rows.append(f"{store.id}\t{item.id}\t{period}\t{q}\t{value}\n")
            chunks.append("".join(rows))
        return qty, chunks


class _Moves:
    """Counts kept while the stock moves stream out."""

    def __init__(self) -> None:
        self.kinds: Counter[str] = Counter()
        self.negative = 0


def has_erp_data(conn: psycopg.Connection[Any]) -> bool:
    """Whether the ERP tables hold data already (brands exist), as :func:`seed` decides it."""
    return bool(_Q.one(conn, "brand_exists")["exists"])


def seed(
    conn: psycopg.Connection[Any],
    *,
    stores: int,
    brands: int,
    employees: int,
    items: int,
    period: str,
    documents: int,
    seed: int,
    replace: bool = False,
    moves_per_item: float = DEFAULT_MOVES_PER_ITEM,
) -> SeedReport:
    """Write a month of ERP data for ``period`` in one transaction; report what it wrote.

    ``items`` is per brand. Raises :class:`~engine.BadInput` for an argument
    out of range, or when ERP data exists and ``replace`` is false; with
    ``replace`` every ERP data table is emptied first (the accounts stay).
    Joins the caller's transaction if one is open.
    """
    started = time.perf_counter()
    period = parse_period(period)
    if min(stores, brands, items) < 1 or employees < stores or documents < 0:
        raise BadInput(
            f"stores ({stores}), brands ({brands}), items ({items}) must be >= 1, documents "
            f"({documents}) >= 0 and employees ({employees}) >= stores (one manager each)"
        )
    if not 0 <= moves_per_item <= 1000:
        raise BadInput(f"moves per item must be within 0..1000, not {moves_per_item}")
    month = _Month(period)
    world = _World(seed, stores, brands, employees, items)
    opening, opening_text = world.opening(seed, period)
    docs, lines, faults = _documents(random.Random(f"{seed}:documents"), month, world, documents)
    moves = _Moves()
    with conn.transaction():
        _Q.execute(conn, "erp_seed_lock")
        if has_erp_data(conn):
            if not replace:
                raise BadInput(
                    "the database already holds ERP data (brands exist); "
                    "use --replace (replace=True) to delete it and seed again"
                )
            _Q.execute(conn, "erp_data_truncate")
        _copy_rows(conn, "brand_copy", world.brands)
        _copy_rows(conn, "store_copy", world.stores)  # fields in column order
        _copy_rows(conn, "employee_copy", world.staff)
        _copy_rows(conn, "item_copy", [i for its in world.catalog.values() for i in its])
        # a fixed closing time, not now(): a reseed must be row-identical
        at = f"{period}-01 00:00:00+00"
        closed = (month.previous, "closed", at, at, "seed")
        _copy_rows(conn, "period_copy", [closed, (period, "open", None, None, None)])
        _copy_bulk(conn, "erp_opening_balances", "opening_balance_copy", opening_text)
        # every store starts its books in the seeded period, from the openings loaded above
        _copy_rows(conn, "store_period_copy", [(s.id, period, "loaded") for s in world.stores])
        move_rng = random.Random(f"{seed}:moves")
        chunks = _moves(move_rng, month, world, opening, moves_per_item, moves)
        _copy_bulk(conn, "erp_stock_moves", "stock_move_copy", chunks)
        _copy_rows(conn, "document_copy", docs)
        _copy_rows(conn, "document_line_copy", lines)
        _Q.execute(conn, "erp_seed_analyze")
    return SeedReport(
        period=period,
        closed_period=month.previous,
        seed=seed,
        brands=brands,
        stores=stores,
        employees=employees,
        items=brands * items,
        periods=2,
        opening_balances=len(opening),
        stock_moves=sum(moves.kinds.values()),
        documents=len(docs),
        document_lines=len(lines),
        stock_moves_by_kind=dict(sorted(moves.kinds.items())),
        bad_documents=dict(sorted(Counter(faults).items())),
        negative_stock_items=moves.negative,
        elapsed_s=round(time.perf_counter() - started, 3),
    )


def _copy_rows(conn: psycopg.Connection[Any], query: str, rows: Iterable[Sequence[Any]]) -> None:
    with _Q.copy(conn, query) as copy:
        for row in rows:
            copy.write_row(row)


def _copy_bulk(
    conn: psycopg.Connection[Any], table: str, query: str, chunks: Iterable[str]
) -> None:
    """COPY into ``table`` without its foreign keys and plain indexes, then restore them.

    At a million rows the per-row foreign key triggers cost several times the
    load itself; dropping them for the load and re-adding them (one set-based
    check each) is PostgreSQL's own advice, and the transaction makes it atomic.
    """
    keys = [
        (r["conname"], r["pg_get_constraintdef"])
        for r in _Q.rows(conn, "constraint_select_foreign_keys", {"table": table})
    ]
    indexes = [
        (r["indexrelid"], r["pg_get_indexdef"])
        for r in _Q.rows(conn, "index_select_secondary", {"table": table})
    ]
    ident = sql.Identifier(table)
    for name, _ in keys:
        conn.execute(sql.SQL(_Q["constraint_drop"]).format(table=ident, name=sql.Identifier(name)))
    for name, _ in indexes:
        conn.execute(sql.SQL(_Q["index_drop"]).format(name=sql.SQL(name)))
    _copy_text(conn, query, chunks)
    for _, definition in indexes:
        conn.execute(definition)
    for name, definition in keys:
        add = sql.SQL(_Q["constraint_add"])
        conn.execute(
            add.format(table=ident, name=sql.Identifier(name), definition=sql.SQL(definition))
        )


def _copy_text(conn: psycopg.Connection[Any], query: str, chunks: Iterable[str]) -> None:
    """COPY pre-formatted text: for the big tables, whose values never need escaping."""
    with _Q.copy(conn, query) as copy:
        for chunk in chunks:
            copy.write(chunk)


def _moves(
    rng: random.Random,
    month: _Month,
    world: _World,
    opening: dict[tuple[int, int], int],
    per_item: float,
    stats: _Moves,
) -> Iterator[str]:
    """COPY text of the month's stock moves, one chunk per store.

    Each (store, item) gets its events (receipts, transfers, sales, adjustments)
    and walks them by day, so sales and outgoing moves never exceed the stock
    the walk knows of; returns and incoming transfers only add to it. A rare
    sample of pairs ends with a sale beyond the stock, on purpose.
    """
    catalog = world.catalog
    pairs = [(s.id, i.id) for s in world.stores for i in catalog[s.brand_id]]
    oversold = set(rng.sample(pairs, max(1, len(pairs) // 1000)))
    period, dates, last = month.period, month.text, len(month.text)
    index, sale_cw, weekdays, early = range(last), month.sale_cw, month.weekdays, month.weekdays[:3]
    rand, randrange, choice, choices = rng.random, rng.randrange, rng.choice, rng.choices
    for shop in world.stores:
        others = world.others(shop)
        volume = per_item * _VOLUME[shop.size] / _MEAN_VOLUME
        out: list[str] = []
        counts = dict.fromkeys(("sale", "receipt", "return", "transfer", "adjustment"), 0)
        for item in catalog[shop.brand_id]:
            key = (shop.id, item.id)
            stock = opening.get(key, 0)
            expected = volume * (0.6 + 0.8 * rand())
            sales = int(expected * 0.74 + rand())
            # events sort by (day, rank): receipts 0, transfers 1, sales 2, adjustments 3
            events = [
                (d, 2, 1 + int(4 * rand() ** 2))
                for d in choices(index, cum_weights=sale_cw, k=sales)
            ]
            receipts = max(int(expected * 0.1 + rand()), 1 if sales and stock < 5 else 0)
            if receipts:
                each = max(1.0, (sales * 2 * (0.7 + 0.6 * rand()) - stock / 2) / receipts)
                first = choice(early) if stock < 5 else choice(weekdays)
                for r in range(receipts):
                    day = first if r == 0 else choice(weekdays)
                    events.append((day, 0, max(1, int(each * (0.8 + 0.4 * rand())))))
            if others:
                for _ in range(int(expected * 0.04 + rand())):
                    events.append((randrange(last), 1, 1 + randrange(6)))
            for _ in range(int(expected * 0.02 + rand())):
                events.append((randrange(last), 3, choice((-3, -2, -1, 1, 2))))
            events.sort()
            head = f"{period}\t{shop.id}\t{item.id}\t"
            cost = float(item.cost)
            keeps_returns = key not in oversold
            for day, rank, qty in events:
                if rank == 2:
                    if qty > stock:
                        if stock <= 0:
                            continue  # a lost sale: nothing on the shelf
                        qty = stock
                    stock -= qty
                    out.append(f"{head}{dates[day]}\tsale\t-{qty}\t\\N\t\\N\n")
                    counts["sale"] += 1
                    if keeps_returns and rand() < 0.03 and (back := day + 1 + randrange(5)) < last:
                        out.append(f"{head}{dates[back]}\treturn\t1\t\\N\t\\N\n")
                        counts["return"] += 1
                elif rank == 0:
                    stock += qty
                    unit = cost * (0.95 + 0.1 * rand())
                    out.append(f"{head}{dates[day]}\treceipt\t{qty}\t{unit:.4f}\t\\N\n")
                    counts["receipt"] += 1
                elif rank == 1:
                    to = choice(others)
                    qty = min(qty, stock)
                    if qty <= 0 or (to, item.id) in oversold:
                        continue  # an oversold pair must not be refilled behind the walk's back
                    stock -= qty
                    out.append(f"{head}{dates[day]}\ttransfer_out\t-{qty}\t\\N\t{to}\n")
                    out.append(
                        f"{period}\t{to}\t{item.id}\t{dates[day]}\ttransfer_in\t{qty}\t\\N\t{shop.id}\n"
                    )
                    counts["transfer"] += 1
                else:
                    qty = max(qty, -stock)
                    if qty:
                        stock += qty
                        out.append(f"{head}{dates[day]}\tadjustment\t{qty}\t\\N\t\\N\n")
                        counts["adjustment"] += 1
            if not keeps_returns:
                out.append(f"{head}{dates[-1]}\tsale\t-{stock + 1 + randrange(5)}\t\\N\t\\N\n")
                counts["sale"] += 1
                stats.negative += 1
        transfers = counts.pop("transfer")
        stats.kinds.update(counts)
        stats.kinds.update({"transfer_out": transfers, "transfer_in": transfers})
        yield "".join(out)


def _documents(
    rng: random.Random,
    month: _Month,
    world: _World,
    count: int,
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], list[str]]:
    """Document rows, their line rows, and the fault of each bad document.

    About 1% are bad (at least one of each fault when there is room); five
    good ones carry the hostile memos.
    """
    where = rng.choices(world.stores, [_VOLUME[s.size] for s in world.stores], k=count)
    bad_ones = rng.sample(range(count), min(count, max(3, round(count / 100))))
    faults = {i: _BAD_FAULTS[n % len(_BAD_FAULTS)] for n, i in enumerate(bad_ones)}
    good = [i for i in range(count) if i not in faults]
    few = min(5, len(good))  # a tiny seed may have fewer good documents than hostile memos
    hostile = dict(zip(rng.sample(good, few), HOSTILE_MEMOS[:few], strict=True))
    numbers: Counter[tuple[str, int]] = Counter()
    docs: list[tuple[Any, ...]] = []
    lines: list[tuple[Any, ...]] = []
    for i, shop in enumerate(where):
        others = world.others(shop)
        kinds = [k for k in _DOC_KINDS if others or k != "stock_transfer"]
        kind = rng.choices(kinds, [_DOC_KINDS[k][1] for k in kinds])[0]
        prefix, _, memos = _DOC_KINDS[kind]
        numbers[prefix, shop.id] += 1
        fault = faults.get(i)
        if fault == "closed_period":
            period, issued = month.previous, rng.choice(month.previous_days)
        else:
            period, issued = month.period, rng.choices(month.days, cum_weights=month.sale_cw)[0]
        memo = hostile.get(i) or rng.choice(memos).format(n=rng.randint(1, 999))
        body = _lines(rng, kind, shop, world.catalog[shop.brand_id], others)
        if fault == "unbalanced":
            account, item_id, qty, debit, credit, text = body[0]  # every kind opens on a debit
            body[0] = (account, item_id, qty, debit + rng.randint(1, 500) * _CENT, credit, text)
        elif fault == "unknown_account":
            n = rng.randrange(len(body))
            body[n] = ("9999", *body[n][1:])
        doc_id = i + 1
        number = f"{prefix}-{shop.code}-{numbers[prefix, shop.id]:06d}"
        employee = rng.choice(world.staff_of[shop.id])
        docs.append((doc_id, number, kind, period, shop.id, employee, issued, memo))
        lines.extend((doc_id, n, *line) for n, line in enumerate(body, 1))
    return docs, lines, [faults[i] for i in sorted(faults)]


def _lines(
    rng: random.Random, kind: str, shop: _Store, items: list[_Item], others: list[int]
) -> list[tuple[Any, ...]]:
    """Balanced lines (account, item, qty, debit, credit, description) of one document."""
    zero = Decimal(0)
    if kind == "stock_transfer":
        to = f"ST{rng.choice(others):03d}"
        body: list[tuple[Any, ...]] = []
        for item in (rng.choice(items) for _ in range(rng.randint(1, 3))):
            qty = rng.randint(1, 20)
            value = (qty * item.cost).quantize(_CENT, ROUND_HALF_UP)
            body.append(("1300", item.id, qty, value, zero, f"{item.sku} into {to}"))
            body.append(("1300", item.id, qty, zero, value, f"{item.sku} out of {shop.code}"))
        return body
    low, high = {"sales_invoice": (1, 5), "purchase_invoice": (5, 50)}.get(kind, (1, 2))
    picked = []
    for item in (rng.choice(items) for _ in range(rng.randint(1, 4))):
        qty = rng.randint(low, high)
        unit = item.cost if kind == "purchase_invoice" else item.price
        picked.append((item, qty, (qty * unit).quantize(_CENT, ROUND_HALF_UP)))
    net = sum((amount for _, _, amount in picked), zero)
    tax = (net * _VAT).quantize(_CENT, ROUND_HALF_UP)
    account, goods_debit, other, text = _INVOICE_ACCOUNTS[kind]

    def side(amount: Decimal, debit: bool) -> tuple[Decimal, Decimal]:
        return (amount, zero) if debit else (zero, amount)

    body = [(account, i.id, q, *side(a, goods_debit), i.sku) for i, q, a in picked]
    body.append(("2100", None, None, *side(tax, goods_debit), "VAT 20%"))
    total = (other, None, None, *side(net + tax, not goods_debit), text)
    return [*body, total] if goods_debit else [total, *body]  # a debit line first, always


def _period_option(ctx: click.Context, param: click.Parameter, value: str) -> str:
    try:
        return parse_period(value)
    except BadInput as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def _option(*names: str, **kwargs: Any) -> Callable[[_F], _F]:
    return click.option(*names, show_envvar=True, **kwargs)


@click.command("seed")
@_option("--stores", type=click.IntRange(1), default=50, help="given to brands round-robin")
@_option("--brands", type=click.IntRange(1), default=4)
@_option("--employees", type=click.IntRange(1), default=500, help="one manager per store, ...")
@_option("--items", type=click.IntRange(1, 999_999), default=2000, help="items per brand")
@_option("--period", required=True, callback=_period_option, help="open period, YYYY-MM")
@_option("--documents", type=click.IntRange(0), help="[default: 20 per store], ~1% bad")
@_option("--moves-per-item", type=click.FloatRange(0, 1000), default=DEFAULT_MOVES_PER_ITEM,
         help="average stock moves per store and item in the month")  # fmt: skip
@_option("--seed", "seed_value", type=int, default=1, envvar="ENGINE_SEED_SEED",
         help="same seed and options, same rows")  # fmt: skip
@click.option("--replace", is_flag=True, help="delete the existing ERP data first")
@click.option("--json", "as_json", is_flag=True, help="print the report as one JSON object")
def command(documents: int | None, seed_value: int, as_json: bool, **options: Any) -> None:
    """Fill the ERP tables with a deterministic month of demo data (COPY, one transaction)."""
    try:
        with connect(Settings(), autocommit=True) as conn:
            if documents is None:
                documents = 20 * options["stores"]
            report = seed(conn, documents=documents, seed=seed_value, **options)
    except BadInput:
        raise
    except (EngineError, psycopg.Error) as exc:
        raise StoreError(f"{exc} (is the database reachable and migrated?)") from exc
    if as_json:
        click.echo(json.dumps(report.model_dump(), sort_keys=True))
        return
    click.echo(
        f"seeded period {report.period} (seed {report.seed}) in {report.elapsed_s:.1f} s; "
        f"{report.closed_period} is closed and holds the closed-period documents"
    )
    for table, rows in report.table_counts().items():
        click.echo(f"  {table:<22}{rows:>12,}")
    kinds = ", ".join(f"{k} {v:,}" for k, v in report.stock_moves_by_kind.items())
    click.echo(f"  stock moves by kind: {kinds}")
    click.echo(f"  items oversold on purpose (negative stock): {report.negative_stock_items}")
    bad = ", ".join(f"{k} {v}" for k, v in report.bad_documents.items()) or "none"
    click.echo(f"  bad documents: {bad}")
