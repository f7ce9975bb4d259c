-- stores_select --
-- Stores to cost, in id order (the fan-out order), optionally one by code.
SELECT s.id, s.code, s.brand_id, b.code AS brand
FROM erp_stores AS s JOIN erp_brands AS b ON b.id = s.brand_id
WHERE %(store)s::text IS NULL OR s.code = %(store)s
ORDER BY s.id;

-- item_costs_exist_for_store --
-- A store is costed once per period (primary key); a rerun reads what is there.
SELECT EXISTS (
    SELECT 1 FROM erp_item_costs WHERE period = %(period)s AND store_id = %(store_id)s
) AS costed;

-- jit_off_for_transaction --
-- The costing statement is planned with inflated row estimates (the union of opening and moved items joined twice), which crosses jit_optimize_above_cost: LLVM inlining and optimisation then cost about 1 s per store for a query that runs in 0.3 s. Off for the store's costing transaction only.
SET LOCAL jit = off;

-- item_costs_insert_for_store --
-- One set-based statement per store: periodic weighted average; closing value is the remainder, so value is conserved to the cent (CHECK on erp_item_costs).
WITH moves AS (
    -- transfers are valued at the sender's opening average: a primary-key lookup
    -- of that one balance (sender, item, period) per transfer move
    SELECT m.item_id,
           sum(m.qty) FILTER (WHERE m.kind = 'receipt') AS receipt_qty,
           sum(round(m.qty * m.unit_cost, 2)) FILTER (WHERE m.kind = 'receipt') AS receipt_value,
           sum(m.qty) FILTER (WHERE m.kind = 'transfer_in') AS transfer_in_qty,
           sum(round(m.qty * coalesce(round(sb.value / sb.qty, 4), i.standard_cost), 2))
               FILTER (WHERE m.kind = 'transfer_in') AS transfer_in_value,
           -sum(m.qty) FILTER (WHERE m.kind IN ('sale', 'return', 'adjustment')) AS issue_qty,
           -sum(m.qty) FILTER (WHERE m.kind = 'transfer_out') AS transfer_out_qty,
           sum(round(-m.qty * coalesce(round(sb.value / sb.qty, 4), i.standard_cost), 2))
               FILTER (WHERE m.kind = 'transfer_out') AS transfer_out_value
    FROM erp_stock_moves AS m
    JOIN erp_items AS i ON i.id = m.item_id
    LEFT JOIN erp_opening_balances AS sb
           ON m.kind IN ('transfer_in', 'transfer_out')
          AND sb.store_id = CASE WHEN m.kind = 'transfer_in' THEN m.counterpart_store_id
                                 ELSE m.store_id END
          AND sb.item_id = m.item_id AND sb.period = m.period AND sb.qty > 0
    WHERE m.period = %(period)s AND m.store_id = %(store_id)s
    GROUP BY m.item_id
),
opening AS (
    SELECT item_id, qty, value FROM erp_opening_balances
    WHERE period = %(period)s AND store_id = %(store_id)s
),
combined AS (
    SELECT i.id AS item_id, i.standard_cost,
           coalesce(o.qty, 0) AS oq, coalesce(o.value, 0) AS ov,
           coalesce(mv.receipt_qty, 0) AS rq, coalesce(mv.receipt_value, 0) AS rv,
           coalesce(mv.transfer_in_qty, 0) AS tq, coalesce(mv.transfer_in_value, 0) AS tv,
           coalesce(mv.issue_qty, 0) AS iq,
           coalesce(mv.transfer_out_qty, 0) AS xq, coalesce(mv.transfer_out_value, 0) AS xv
    FROM (SELECT item_id FROM opening UNION SELECT item_id FROM moves) AS k
    JOIN erp_items AS i ON i.id = k.item_id
    LEFT JOIN opening AS o ON o.item_id = k.item_id
    LEFT JOIN moves AS mv ON mv.item_id = k.item_id
),
costed AS (
    SELECT c.*,
           CASE WHEN c.oq + c.rq + c.tq > 0 THEN round((c.ov + c.rv + c.tv) / (c.oq + c.rq + c.tq), 4)
                WHEN c.oq > 0 THEN round(c.ov / c.oq, 4)
                ELSE c.standard_cost END AS avg_cost
    FROM combined AS c
)
INSERT INTO erp_item_costs (
    period, store_id, item_id, opening_qty, opening_value, receipt_qty, receipt_value,
    transfer_in_qty, transfer_in_value, average_cost, issue_qty, cogs_value,
    transfer_out_qty, transfer_out_value, closing_qty, closing_value)
SELECT %(period)s, %(store_id)s, item_id, oq, ov, rq, rv, tq, tv, avg_cost, iq,
       round(iq * avg_cost, 2), xq, xv,
       oq + rq + tq - iq - xq,
       ov + rv + tv - round(iq * avg_cost, 2) - xv
FROM costed;

-- store_costs_totals --
-- What the store's COGS journal and the summary are built from.
SELECT count(*)::int AS items,
       coalesce(sum(receipt_value), 0) AS receipt_value,
       coalesce(sum(transfer_in_value), 0) AS transfer_in_value,
       coalesce(sum(cogs_value), 0) AS cogs_value,
       coalesce(sum(transfer_out_value), 0) AS transfer_out_value,
       coalesce(sum(closing_value), 0) AS closing_value,
       count(*) FILTER (WHERE closing_qty < 0)::int AS negative_items
FROM erp_item_costs WHERE period = %(period)s AND store_id = %(store_id)s;

-- store_top_movers --
-- The items with the largest cost of goods sold in the store.
SELECT i.sku, c.cogs_value
FROM erp_item_costs AS c JOIN erp_items AS i ON i.id = c.item_id
WHERE c.period = %(period)s AND c.store_id = %(store_id)s
ORDER BY c.cogs_value DESC, i.sku
LIMIT %(limit)s;

-- journal_insert_if_absent --
-- The source key is unique: the COGS journal of one costing step is posted once, whatever retries happen.
INSERT INTO erp_journals (period, store_id, source, source_key, memo)
VALUES (%(period)s, %(store_id)s, 'costing', %(source_key)s, %(memo)s)
ON CONFLICT (source_key) DO NOTHING
RETURNING id;

-- journal_select_by_key --
-- A rerun finds the journal its first run posted.
SELECT id FROM erp_journals WHERE source_key = %(source_key)s;

-- journal_lines_insert_cogs --
-- Dr cost of goods sold, Cr inventory (reversed when returns exceed sales); one balanced pair.
INSERT INTO erp_journal_lines (journal_id, line_no, account_code, store_id, debit, credit)
VALUES (%(journal_id)s, 1, '5000', %(store_id)s, greatest(%(amount)s, 0), greatest(-%(amount)s, 0)),
       (%(journal_id)s, 2, '1300', %(store_id)s, greatest(-%(amount)s, 0), greatest(%(amount)s, 0));

-- opening_carry_forward_for_store --
-- A store's closing balances become its next period's opening balances, once, in the store's own costing transaction.
INSERT INTO erp_opening_balances (store_id, item_id, period, qty, value)
SELECT store_id, item_id, %(next)s, closing_qty, closing_value
FROM erp_item_costs
WHERE period = %(period)s AND store_id = %(store_id)s
  AND (closing_qty <> 0 OR closing_value <> 0)
ON CONFLICT (store_id, item_id, period) DO NOTHING;
