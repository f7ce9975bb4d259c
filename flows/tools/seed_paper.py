"""The seeded month written as documents: header rows, and their lines as COPY text.

Each store's day becomes the documents a store produces (a sales invoice of
the day's takings, a credit note of its returns, a purchase invoice of its
deliveries, one transfer per receiving store) and its month a stock count;
a few are bad on purpose (unbalanced, an unknown account, dated in the
closed period before) and a few carry :data:`HOSTILE_MEMOS`. Posting turns
them into journals and stock moves (:mod:`flows.posting`).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator, Sequence
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from flows.tools.seed_world import CENT, Activity, Item, Month, Store, World

__all__ = ["HOSTILE_MEMOS", "Paper"]

HOSTILE_MEMOS = (
    "'; DROP TABLE erp_documents; --",
    "<script>alert(1)</script>",
    "{{ 7*7 }}",
    "%s",
    "=cmd|' /C calc'!A0",
)
"""Memos that every layer (SQL, HTML reports, CSV exports) must carry byte-exact."""
_VAT = Decimal("0.20")
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


class Paper:
    """The documents of the month, written as the walk goes: rows, and line COPY text.

    A store's day gives at most one sales invoice (the till's takings, paid
    in cash), one credit note (the day's returns, refunded), one purchase
    invoice (the day's deliveries, on account), one stock transfer per
    receiving store; its month ends with one stock count. About 1% of the
    sales invoices are bad on purpose (unbalanced, or an unknown account):
    posting rejects them, and their stock never moves.
    A few documents are dated in the closed period before.
    """

    def __init__(self, rng: random.Random, month: Month, world: World) -> None:
        self.rng, self.month, self.world = rng, month, world
        self.docs: list[tuple[Any, ...]] = []
        self.lines = 0
        self.kinds: Counter[str] = Counter()
        self.moves: Counter[str] = Counter()
        self.faults: Counter[str] = Counter()
        self.numbers: Counter[tuple[str, int]] = Counter()
        self.eligible = 0  # sales invoices so far: where faults go
        self.hostile = list(HOSTILE_MEMOS)

    def store_documents(self, shop: Store, act: Activity) -> str:
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
        self, shop: Store, day: int | None, kind: str, to: int | None, memo: str | None = None
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
        shop: Store,
        day: int | None,
        kind: str,
        picked: Sequence[tuple[Item, int, Decimal | None]],
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
                CENT, ROUND_HALF_UP
            )
            net += amount
            body.append((goods, item.id, qty, *_side(amount, goods_debit), item.sku, unit))
        tax = (net * _VAT).quantize(CENT, ROUND_HALF_UP)
        body.append(("2100", None, None, *_side(tax, goods_debit), "VAT 20%", None))
        total = (other, None, None, *_side(net + tax, not goods_debit), text, None)
        body = [*body, total] if goods_debit else [total, *body]  # a debit line first, always
        if fault == "unbalanced":
            account, item_id, first_qty, debit, credit, what, unit = body[0]
            body[0] = (
                account,
                item_id,
                first_qty,
                debit + rng.randint(1, 500) * CENT,
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
        shop: Store,
        day: int,
        kind: str,
        moved: Sequence[tuple[Item, int]],
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
