"""The seeded world and its month: who sells what where, and what happens day by day.

:class:`World` draws brands, stores (by size), staff and each brand's
catalog from one seeded ``random.Random``; it also decides which stores open
this period (no opening stock, stocked by transfers) and which items go
round a loop of stores. :func:`walk` then walks each store's month item by
item (receipts, transfers, sales, returns, a month-end count) into an
:class:`Activity` per store, never selling more than the walk knows is on
the shelf, except a rare sample oversold on purpose. The documents these
events become are :mod:`flows.tools.seed_paper`'s.
"""

from __future__ import annotations

import calendar
import datetime as dt
import random
from collections import Counter, defaultdict
from collections.abc import Iterator
from decimal import ROUND_HALF_UP, Decimal
from typing import NamedTuple

from engine import BadInput
from flows.erp.types import previous_period, year_month

__all__ = ["CENT", "Activity", "Item", "Month", "Store", "WalkStats", "World", "walk"]

CENT = Decimal("0.01")

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


class Store(NamedTuple):
    id: int
    code: str
    brand_id: int
    name: str
    size: str


class Item(NamedTuple):
    id: int
    brand_id: int
    sku: str
    name: str
    cost: Decimal
    price: Decimal


class Month:
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


class World:
    """Brands, stores, staff and catalog: what the moves and documents are about."""

    def __init__(
        self, seed: int, stores: int, brands: int, employees: int, items: int, new: int
    ) -> None:
        rng = random.Random(f"{seed}:catalog")
        self.brands = [
            (b, f"BR{b}", _BRANDS[(b - 1) % 6] + (f" {b}" if b > 6 else ""))
            for b in range(1, brands + 1)
        ]
        self.stores: list[Store] = []
        self.by_brand: dict[int, list[int]] = {b: [] for b in range(1, brands + 1)}
        for s in range(1, stores + 1):
            brand = (s - 1) % brands + 1
            name = f"{self.brands[brand - 1][2]} {_CITIES[s % 10]} {s}"
            size = rng.choices(_SIZES, _SIZE_WEIGHTS)[0]
            self.stores.append(Store(s, f"ST{s:03d}", brand, name, size))
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
        self.catalog: dict[int, list[Item]] = {b: [] for b in range(1, brands + 1)}
        for b, n in ((b, n) for b in range(1, brands + 1) for n in range(1, items + 1)):
            cost = Decimal(str(round(rng.uniform(1, 200), rng.choice((2, 3, 4)))))
            price = (cost * Decimal(str(round(rng.uniform(1.35, 2.1), 4)))).quantize(CENT)
            name = f"{rng.choice(_ADJECTIVES)} {rng.choice(_NOUNS)} {n}"
            item = Item((b - 1) * items + n, b, f"BR{b}-{n:06d}", name, cost, price)
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

    def others(self, store: Store) -> list[int]:
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
                    value = (q * item.cost * factor).quantize(CENT, ROUND_HALF_UP)
                    rows.append(f"{store.id}\t{item.id}\t{period}\t{q}\t{value}\n")
            chunks.append("".join(rows))
        return qty, chunks


class Activity:
    """One store's month, by the document each event belongs to (days are 0-based)."""

    def __init__(self) -> None:
        self.sales: dict[int, list[tuple[Item, int]]] = defaultdict(list)
        self.returns: dict[int, list[tuple[Item, int]]] = defaultdict(list)
        self.receipts: dict[int, list[tuple[Item, int, Decimal]]] = defaultdict(list)
        self.transfers: dict[tuple[int, int], list[tuple[Item, int]]] = defaultdict(list)
        self.counts: list[tuple[Item, int]] = []


class WalkStats:
    """Counts kept while the month is walked, store by store."""

    def __init__(self) -> None:
        self.kinds: Counter[str] = Counter()
        self.negative = 0
        self.incoming: Counter[tuple[int, int]] = Counter()  # (store, item) -> qty received
        self.loop_items: set[int] = set()


def walk(
    rng: random.Random,
    month: Month,
    world: World,
    opening: dict[tuple[int, int], int],
    per_item: float,
    stats: WalkStats,
) -> Iterator[tuple[Store, Activity]]:
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
        act = Activity()
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
