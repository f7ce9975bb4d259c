"""Deterministic demo data for the ERP: ``engine seed`` and :func:`seed`.

One ``random.Random`` per section (catalog, loops, opening stock, the walk
of the month, documents), each seeded from ``--seed``, so the same options
give the same rows. Rows are built in Python and loaded with COPY in one
transaction; document lines (about a million at the real size) go out as
COPY text, one store at a time, without an intermediate row object.

The seed writes **documents, not stock moves**: the month of each store is
walked item by item (receipts, sales, returns, transfers, a month-end
count) and written as the documents a store produces (a sales invoice of
the day's takings, a credit note of its returns, a purchase invoice of its
deliveries, one transfer per receiving store, a stock count). Posting turns
each into its journal and its stock moves (:mod:`flows.posting`), so the
ledger and the stock ledger come from one source.

Layout: the seeded period P is open and has opening balances (every
store's first period, ``erp_store_periods``: loaded), except the stores
opened this period (the last ones), which start empty, are stocked by
transfers and forward part of it; about one item in eight goes round a
loop of stores in the month. The period before P is closed and holds only
the deliberately bad documents whose fault is "dated in a closed period".
"""

from __future__ import annotations

import calendar
import datetime as dt
import itertools
import json
import random
import time
from collections import Counter, defaultdict
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
# kind: (number prefix, memo templates)
_DOC_KINDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "sales_invoice": (
        "SI",
        ("Till takings, till {n}", "Counter and online pick-up sales, batch {n}"),
    ),
    "purchase_invoice": ("PI", ("Supplier delivery {n}", "Replenishment order {n}")),
    "credit_note": (
        "CN",
        ("Customer returns, wrong size (batch {n})", "Damaged goods refunds ({n})"),
    ),
    "stock_transfer": ("TR", ("Rebalancing stock, run {n}", "Store event stock, run {n}")),
    "stock_count": ("SC", ("Month-end stock count, count sheet {n}",)),
}
# kind: (goods account, goods on the debit side, counterpart account, its description)
_INVOICE_ACCOUNTS = {
    "sales_invoice": ("4000", False, "1000", "takings, cash and card"),
    "purchase_invoice": ("1300", True, "2000", "payable"),
    "credit_note": ("4100", True, "1000", "refunded"),
}
_MOVE_KIND = {"sales_invoice": "sale", "credit_note": "return", "purchase_invoice": "receipt"}
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
    documents: int
    document_lines: int
    documents_by_kind: dict[str, int]
    stock_moves: int
    stock_moves_by_kind: dict[str, int]
    bad_documents: dict[str, int]
    negative_stock_items: int
    new_stores: list[str]
    loop_items: int
    elapsed_s: float

    def table_counts(self) -> dict[str, int]:
        """Rows written per ERP table (stock moves are posting's, from the documents)."""
        names = "brands stores employees items periods opening_balances documents document_lines"
        return {f"erp_{n}": getattr(self, n) for n in names.split()}


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

    def __init__(
        self, seed: int, stores: int, brands: int, employees: int, items: int, new: int
    ) -> None:
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
            price = (cost * Decimal(str(round(rng.uniform(1.35, 2.1), 4)))).quantize(_CENT)
            name = f"{rng.choice(_ADJECTIVES)} {rng.choice(_NOUNS)} {n}"
            item = _Item((b - 1) * items + n, b, f"BR{b}-{n:06d}", name, cost, price)
            self.catalog[b].append(item)
        # the last stores of brands that have others open this period: no opening stock
        movable = [s.id for s in self.stores if len(self.by_brand[s.brand_id]) > 1]
        self.new = set(movable[len(movable) - new :]) if new else set()
        # a new store gets ~40% of its brand's items, each from one settled store
        stocking = random.Random(f"{seed}:stocking")
        self.stocked_by: dict[tuple[int, int], int] = {}
        for shop in sorted(self.new):
            brand = self.stores[shop - 1].brand_id
            senders = [s for s in self.by_brand[brand] if s not in self.new]
            for item in self.catalog[brand] if senders else []:
                if stocking.random() < 0.4:
                    self.stocked_by[shop, item.id] = stocking.choice(senders)
        # about one item in eight goes round a loop of two or three settled stores
        looping = random.Random(f"{seed}:loops")
        self.loops: dict[int, list[int]] = {}
        for b, shops in self.by_brand.items():
            settled = [s for s in shops if s not in self.new]
            if len(settled) < 2:
                continue
            for item in self.catalog[b]:
                if looping.random() < 0.125:
                    ring = 3 if len(settled) > 2 and looping.random() < 0.3 else 2
                    self.loops[item.id] = looping.sample(settled, ring)

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
                if rng.random() < 0.6 and store.id not in self.new:
                    q = qty[store.id, item.id] = rng.randint(0, 60)
                    factor = Decimal(f"{rng.uniform(0.9, 1.1):.4f}")
                    value = (q * item.cost * factor).quantize(_CENT, ROUND_HALF_UP)
                    rows.append(f"{store.id}\t{item.id}\t{period}\t{q}\t{value}\n")
            chunks.append("".join(rows))
        return qty, chunks


class _Activity:
    """One store's month, by the document each event belongs to (days are 0-based)."""

    def __init__(self) -> None:
        self.sales: dict[int, list[tuple[_Item, int]]] = defaultdict(list)
        self.returns: dict[int, list[tuple[_Item, int]]] = defaultdict(list)
        self.receipts: dict[int, list[tuple[_Item, int, Decimal]]] = defaultdict(list)
        self.transfers: dict[tuple[int, int], list[tuple[_Item, int]]] = defaultdict(list)
        self.counts: list[tuple[_Item, int]] = []


class _Walk:
    """Counts kept while the month is walked, store by store."""

    def __init__(self) -> None:
        self.kinds: Counter[str] = Counter()
        self.negative = 0
        self.incoming: Counter[tuple[int, int]] = Counter()  # (store, item) -> qty received
        self.loop_items: set[int] = set()


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
    seed: int,
    replace: bool = False,
    moves_per_item: float = DEFAULT_MOVES_PER_ITEM,
    new_stores: int | None = None,
) -> SeedReport:
    """Write a month of ERP documents for ``period`` in one transaction; report what it wrote.

    ``items`` is per brand; ``new_stores`` (default: one in 25) stores open
    this period, with no opening stock. Raises :class:`~engine.BadInput` for
    an argument out of range, or when ERP data exists and ``replace`` is
    false; with ``replace`` every ERP data table is emptied first (the
    accounts stay). Joins the caller's transaction if one is open.
    """
    started = time.perf_counter()
    period = parse_period(period)
    if min(stores, brands, items) < 1 or employees < stores:
        raise BadInput(
            f"stores ({stores}), brands ({brands}), items ({items}) must be >= 1 and "
            f"employees ({employees}) >= stores (one manager each)"
        )
    if not 0 <= moves_per_item <= 1000:
        raise BadInput(f"moves per item must be within 0..1000, not {moves_per_item}")
    new = stores // 25 if new_stores is None else new_stores
    if not 0 <= new < stores:
        raise BadInput(f"new stores must be within 0..{stores - 1}, not {new}")
    month = _Month(period)
    world = _World(seed, stores, brands, employees, items, new)
    opening, opening_text = world.opening(seed, period)
    walk = _Walk()
    paper = _Paper(random.Random(f"{seed}:documents"), month, world)
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
        # every store starts its books in the seeded period, from the openings loaded next
        _copy_rows(conn, "store_period_copy", [(s.id, period, "loaded") for s in world.stores])
        _copy_bulk(conn, "erp_opening_balances", "opening_balance_copy", opening_text)
        moves_rng = random.Random(f"{seed}:moves")
        activity = _walk(moves_rng, month, world, opening, moves_per_item, walk)
        lines = itertools.chain(
            (paper.store_documents(shop, act) for shop, act in activity),
            paper.closed_period_documents(),
        )
        _copy_bulk(
            conn,
            "erp_document_lines",
            "document_line_copy",
            lines,
            then=lambda: _copy_rows(conn, "document_copy", paper.docs),
        )
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
        documents=len(paper.docs),
        document_lines=paper.lines,
        documents_by_kind=dict(sorted(paper.kinds.items())),
        stock_moves=sum(paper.moves.values()),
        stock_moves_by_kind=dict(sorted(paper.moves.items())),
        bad_documents=dict(sorted(paper.faults.items())),
        negative_stock_items=walk.negative,
        new_stores=[s.code for s in world.stores if s.id in world.new],
        loop_items=len(walk.loop_items),
        elapsed_s=round(time.perf_counter() - started, 3),
    )


def _copy_rows(conn: psycopg.Connection[Any], query: str, rows: Iterable[Sequence[Any]]) -> None:
    with _Q.copy(conn, query) as copy:
        for row in rows:
            copy.write_row(row)


def _copy_bulk(
    conn: psycopg.Connection[Any],
    table: str,
    query: str,
    chunks: Iterable[str],
    then: Callable[[], None] | None = None,
) -> None:
    """COPY into ``table`` without its foreign keys and plain indexes, then restore them.

    At a million rows the per-row foreign key triggers cost several times the
    load itself; dropping them for the load and re-adding them (one set-based
    check each) is PostgreSQL's own advice, and the transaction makes it atomic.
    ``then`` runs after the load, before the keys are checked (it writes the
    rows they refer to).
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
    if then is not None:
        then()
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


def _walk(
    rng: random.Random,
    month: _Month,
    world: _World,
    opening: dict[tuple[int, int], int],
    per_item: float,
    stats: _Walk,
) -> Iterator[tuple[_Store, _Activity]]:
    """Each store's month of receipts, transfers, sales, returns and counts, store by store.

    Each (store, item) gets its events and walks them by day, so sales and
    outgoing moves never exceed the stock the walk knows of: the opening
    stock plus what earlier stores sent it. Stores opened this period (the
    last ids) start from what they were sent and forward part of it; some
    items go round a loop of stores (A to B to A, or A to B to C to A) in
    the month. A rare sample of pairs ends with a sale beyond the stock, on
    purpose.
    """
    catalog = world.catalog
    pairs = [(s.id, i.id) for s in world.stores for i in catalog[s.brand_id]]
    oversold = set(rng.sample(pairs, max(1, len(pairs) // 1000)))
    last = len(month.text)
    index, sale_cw, weekdays, early = range(last), month.sale_cw, month.weekdays, month.weekdays[:3]
    rand, randrange, choice, choices = rng.random, rng.randrange, rng.choice, rng.choices
    for shop in world.stores:
        others = world.others(shop)
        settled = [s for s in others if s not in world.new]
        fresh = [s for s in others if s in world.new]
        volume = per_item * _VOLUME[shop.size] / _MEAN_VOLUME
        act = _Activity()
        for item in catalog[shop.brand_id]:
            key = (shop.id, item.id)
            stock = opening.get(key, 0) + stats.incoming[key]
            received = stats.incoming[key]
            expected = volume * (0.6 + 0.8 * rand())
            sales = int(expected * 0.74 + rand())
            # events sort by (day, rank): receipts 0, transfers 1, sales 2, counts 3;
            # a transfer event carries its receiving store
            events: list[tuple[int, int, int, int]] = [
                (d, 2, 1 + int(4 * rand() ** 2), 0)
                for d in choices(index, cum_weights=sale_cw, k=sales)
            ]
            receipts = max(int(expected * 0.1 + rand()), 1 if sales and stock < 5 else 0)
            if receipts:
                each = max(1.0, (sales * 2 * (0.7 + 0.6 * rand()) - stock / 2) / receipts)
                first = choice(early) if stock < 5 else choice(weekdays)
                for r in range(receipts):
                    day = first if r == 0 else choice(weekdays)
                    events.append((day, 0, max(1, int(each * (0.8 + 0.4 * rand()))), 0))
            if settled and rand() < 0.02:  # rebalancing between settled stores
                events.append((randrange(last), 1, 1 + randrange(6), choice(settled)))
            for to in fresh:  # a new store is stocked by one settled store per item
                if world.stocked_by.get((to, item.id)) == shop.id:
                    events.append((choice(early), 1, 5 + randrange(16), to))
            if shop.id in world.new and received and settled and rand() < 0.3:
                events.append(
                    (early[-1] + randrange(last - early[-1]), 1, received // 2, choice(settled))
                )
            loop = world.loops.get(item.id)
            if loop is not None and shop.id in loop:  # the next store round the loop
                to = loop[(loop.index(shop.id) + 1) % len(loop)]
                events.append((randrange(last), 1, 1 + randrange(6), to))
            if rand() < expected * 0.02:
                events.append((last - 1, 3, choice((-3, -2, -1, -1, 1, 2)), 0))
            events.sort()
            keeps_returns = key not in oversold
            for day, rank, qty, to in events:
                if rank == 2:
                    if qty > stock:
                        if stock <= 0:
                            continue  # a lost sale: nothing on the shelf
                        qty = stock
                    stock -= qty
                    act.sales[day].append((item, qty))
                    if keeps_returns and rand() < 0.03 and (back := day + 1 + randrange(5)) < last:
                        act.returns[back].append((item, 1))
                        stock += 1
                elif rank == 0:
                    stock += qty
                    unit = Decimal(f"{float(item.cost) * (0.95 + 0.1 * rand()):.4f}")
                    act.receipts[day].append((item, qty, unit))
                elif rank == 1:
                    qty = min(qty, stock)
                    if qty <= 0 or (to, item.id) in oversold:
                        continue  # an oversold pair must not be refilled behind the walk's back
                    stock -= qty
                    act.transfers[day, to].append((item, qty))
                    stats.incoming[to, item.id] += qty
                    if loop is not None and to in loop:
                        stats.loop_items.add(item.id)
                else:
                    qty = max(qty, -stock)
                    if qty:
                        stock += qty
                        act.counts.append((item, qty))
            if not keeps_returns:
                act.sales[last - 1].append((item, stock + 1 + randrange(5)))
                stats.negative += 1
        yield shop, act


class _Paper:
    """The documents of the month, written as the walk goes: rows, and line COPY text.

    A store's day gives at most one sales invoice (the till's takings, paid
    in cash), one credit note (the day's returns, refunded), one purchase
    invoice (the day's deliveries, on account), one stock transfer per
    receiving store; its month ends with one stock count. About 1% of the
    sales invoices are bad on purpose (unbalanced, or an unknown account):
    posting rejects them, and their stock never moves.
    A few documents are dated in the closed period before.
    """

    def __init__(self, rng: random.Random, month: _Month, world: _World) -> None:
        self.rng, self.month, self.world = rng, month, world
        self.docs: list[tuple[Any, ...]] = []
        self.lines = 0
        self.kinds: Counter[str] = Counter()
        self.moves: Counter[str] = Counter()
        self.faults: Counter[str] = Counter()
        self.numbers: Counter[tuple[str, int]] = Counter()
        self.eligible = 0  # sales invoices so far: where faults go
        self.hostile = list(HOSTILE_MEMOS)

    def store_documents(self, shop: _Store, act: _Activity) -> str:
        """The store's documents in day order; their lines as COPY text."""
        out: list[str] = []
        for day in range(len(self.month.days)):
            if act.sales.get(day):
                self._invoice(
                    out, shop, day, "sales_invoice", [(i, q, None) for i, q in act.sales[day]]
                )
            if act.returns.get(day):
                self._invoice(
                    out, shop, day, "credit_note", [(i, q, None) for i, q in act.returns[day]]
                )
            if act.receipts.get(day):
                self._invoice(out, shop, day, "purchase_invoice", act.receipts[day])
            for (d, to), moved in sorted(act.transfers.items(), key=lambda kv: kv[0]):
                if d == day:
                    self._stock(out, shop, day, "stock_transfer", moved, to)
        if act.counts:
            self._stock(out, shop, len(self.month.days) - 1, "stock_count", act.counts, None)
        return "".join(out)

    def closed_period_documents(self) -> Iterator[str]:
        """Sales invoices dated in the closed period before: posting never reaches them."""
        rng, out = self.rng, list[str]()
        for _ in range(max(1, len(self.docs) // 300)):
            shop = rng.choice(self.world.stores)
            picked = [(rng.choice(self.world.catalog[shop.brand_id]), rng.randint(1, 3), None)]
            self._invoice(out, shop, None, "sales_invoice", picked, fault="closed_period")
        yield "".join(out)

    def _header(
        self, shop: _Store, day: int | None, kind: str, to: int | None, memo: str | None = None
    ) -> int:
        prefix, templates = _DOC_KINDS[kind]
        self.numbers[prefix, shop.id] += 1
        doc_id = len(self.docs) + 1
        number = f"{prefix}-{shop.code}-{self.numbers[prefix, shop.id]:06d}"
        if day is None:
            period, issued = self.month.previous, self.rng.choice(self.month.previous_days)
        else:
            period, issued = self.month.period, self.month.days[day]
        if memo is None:
            memo = self.rng.choice(templates).format(n=self.rng.randint(1, 999))
        employee = self.rng.choice(self.world.staff_of[shop.id])
        self.docs.append((doc_id, number, kind, period, shop.id, employee, issued, memo, to))
        self.kinds[kind] += 1
        return doc_id

    def _invoice(
        self,
        out: list[str],
        shop: _Store,
        day: int | None,
        kind: str,
        picked: Sequence[tuple[_Item, int, Decimal | None]],
        fault: str | None = None,
    ) -> None:
        rng = self.rng
        # faults go on sales invoices only: a rejected one leaves stock on the shelf, so
        # negative stock stays what the walk planted (a rejected delivery, or refund,
        # would take away stock that later sales counted on)
        if fault is None and kind == "sales_invoice":
            self.eligible += 1
            if self.eligible in (3, 8) or rng.random() < 0.01:
                planted = {3: "unbalanced", 8: "unknown_account"}
                fault = planted.get(self.eligible) or rng.choice(("unbalanced", "unknown_account"))
        memo = None
        if fault is None and self.hostile and rng.random() < 0.05:
            memo = self.hostile.pop(0)
        doc_id = self._header(shop, day, kind, None, memo)
        goods, goods_debit, other, text = _INVOICE_ACCOUNTS[kind]
        body: list[tuple[str, int | None, int | None, Decimal, Decimal, str, Decimal | None]] = []
        net = Decimal(0)
        for item, qty, unit in picked:
            amount = (qty * (unit if unit is not None else item.price)).quantize(
                _CENT, ROUND_HALF_UP
            )
            net += amount
            body.append((goods, item.id, qty, *_side(amount, goods_debit), item.sku, unit))
        tax = (net * _VAT).quantize(_CENT, ROUND_HALF_UP)
        body.append(("2100", None, None, *_side(tax, goods_debit), "VAT 20%", None))
        total = (other, None, None, *_side(net + tax, not goods_debit), text, None)
        body = [*body, total] if goods_debit else [total, *body]  # a debit line first, always
        if fault == "unbalanced":
            account, item_id, first_qty, debit, credit, what, unit = body[0]
            body[0] = (
                account,
                item_id,
                first_qty,
                debit + rng.randint(1, 500) * _CENT,
                credit,
                what,
                unit,
            )
        elif fault == "unknown_account":
            body[-1] = ("9999", *body[-1][1:])
        if fault is not None:
            self.faults[fault] += 1
        elif day is not None:
            self.moves[_MOVE_KIND[kind]] += len(picked)
        self._write(out, doc_id, body)

    def _stock(
        self,
        out: list[str],
        shop: _Store,
        day: int,
        kind: str,
        moved: Sequence[tuple[_Item, int]],
        to: int | None,
    ) -> None:
        doc_id = self._header(shop, day, kind, to)
        zero = Decimal(0)
        where = f" to ST{to:03d}" if to is not None else " counted"
        body = [("1300", i.id, q, zero, zero, f"{i.sku}{where}", None) for i, q in moved]
        if kind == "stock_transfer":
            self.moves.update({"transfer_out": len(moved), "transfer_in": len(moved)})
        else:
            self.moves["adjustment"] += len(moved)
        self._write(out, doc_id, body)

    def _write(self, out: list[str], doc_id: int, body: Sequence[tuple[Any, ...]]) -> None:
        for n, (account, item_id, qty, debit, credit, what, unit) in enumerate(body, 1):
            item = "\\N" if item_id is None else item_id
            amount = "\\N" if qty is None else qty
            cost = "\\N" if unit is None else unit
            out.append(
                f"{doc_id}\t{n}\t{account}\t{item}\t{amount}\t{debit}\t{credit}\t{what}\t{cost}\n"
            )
        self.lines += len(body)


def _side(amount: Decimal, debit: bool) -> tuple[Decimal, Decimal]:
    return (amount, Decimal(0)) if debit else (Decimal(0), amount)


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
@_option("--new-stores", type=click.IntRange(0), default=None,
         help="stores opened this period, no opening stock  [default: one in 25]")  # fmt: skip
@_option("--moves-per-item", type=click.FloatRange(0, 1000), default=DEFAULT_MOVES_PER_ITEM,
         help="average stock moves per store and item in the month")  # fmt: skip
@_option("--seed", "seed_value", type=int, default=1, envvar="ENGINE_SEED_SEED",
         help="same seed and options, same rows")  # fmt: skip
@click.option("--replace", is_flag=True, help="delete the existing ERP data first")
@click.option("--json", "as_json", is_flag=True, help="print the report as one JSON object")
def command(seed_value: int, as_json: bool, **options: Any) -> None:
    """Fill the ERP tables with a deterministic month of demo documents (COPY, one transaction)."""
    try:
        # a bulk load (COPY of a month of documents) may outlast any statement bound;
        # its lock waits stay bounded
        with connect(Settings(), autocommit=True, statement_timeout_s=0) as conn:
            report = seed(conn, seed=seed_value, **options)
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
    docs = ", ".join(f"{k} {v:,}" for k, v in report.documents_by_kind.items())
    click.echo(f"  documents by kind: {docs}")
    kinds = ", ".join(f"{k} {v:,}" for k, v in report.stock_moves_by_kind.items())
    click.echo(f"  stock moves the documents make when posted: {kinds}")
    click.echo(
        f"  stores opened this period: {', '.join(report.new_stores) or 'none'}; "
        f"items moving in loops between stores: {report.loop_items}"
    )
    click.echo(f"  items oversold on purpose (negative stock): {report.negative_stock_items}")
    bad = ", ".join(f"{k} {v}" for k, v in report.bad_documents.items()) or "none"
    click.echo(f"  bad documents: {bad}")
