-- floor_old_item_costs_create --
-- The old method's result: erp_item_costs' columns without how the average was found (the old method had no solve), and without constraints, so the floor pays for no key or CHECK.
CREATE TABLE floor_old_item_costs (LIKE erp_item_costs);
ALTER TABLE floor_old_item_costs DROP COLUMN average_from, DROP COLUMN loop_group;

-- floor_old_item_costs_insert --
-- Costing as it was before the exact solve (item_costs_insert_for_store of c136abd), one set-based statement for every store: transfers valued at the sender's OPENING average (a primary-key lookup of that balance per transfer move), no dependency between stores; the fixed floor the exact method is measured against.
WITH moves AS (
    SELECT m.store_id, m.item_id,
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
    WHERE m.period = %(period)s
    GROUP BY m.store_id, m.item_id
),
opening AS (
    SELECT store_id, item_id, qty, value FROM erp_opening_balances
    WHERE period = %(period)s
),
combined AS (
    SELECT k.store_id, i.id AS item_id, i.standard_cost,
           coalesce(o.qty, 0) AS oq, coalesce(o.value, 0) AS ov,
           coalesce(mv.receipt_qty, 0) AS rq, coalesce(mv.receipt_value, 0) AS rv,
           coalesce(mv.transfer_in_qty, 0) AS tq, coalesce(mv.transfer_in_value, 0) AS tv,
           coalesce(mv.issue_qty, 0) AS iq,
           coalesce(mv.transfer_out_qty, 0) AS xq, coalesce(mv.transfer_out_value, 0) AS xv
    FROM (SELECT store_id, item_id FROM opening
          UNION SELECT store_id, item_id FROM moves) AS k
    JOIN erp_items AS i ON i.id = k.item_id
    LEFT JOIN opening AS o ON o.store_id = k.store_id AND o.item_id = k.item_id
    LEFT JOIN moves AS mv ON mv.store_id = k.store_id AND mv.item_id = k.item_id
),
costed AS (
    SELECT c.*,
           CASE WHEN c.oq + c.rq + c.tq > 0
                    THEN round((c.ov + c.rv + c.tv) / (c.oq + c.rq + c.tq), 4)
                WHEN c.oq > 0 THEN round(c.ov / c.oq, 4)
                ELSE c.standard_cost END AS avg_cost
    FROM combined AS c
)
INSERT INTO floor_old_item_costs (
    period, store_id, item_id, opening_qty, opening_value, receipt_qty, receipt_value,
    transfer_in_qty, transfer_in_value, average_cost, issue_qty, cogs_value,
    transfer_out_qty, transfer_out_value, closing_qty, closing_value)
SELECT %(period)s, store_id, item_id, oq, ov, rq, rv, tq, tv, avg_cost, iq,
       round(iq * avg_cost, 2), xq, xv,
       oq + rq + tq - iq - xq,
       ov + rv + tv - round(iq * avg_cost, 2) - xv
FROM costed;

-- floor_old_item_costs_compare --
-- The old method against the engine's costs of the period, row by (store, item): rows only on one side (none expected: both cost every item with an opening or a move), and rows whose average the exact solve changed.
SELECT count(*)::int AS rows,
       count(*) FILTER (WHERE f.item_id IS NULL OR c.item_id IS NULL)::int AS unmatched,
       count(*) FILTER (WHERE f.average_cost <> c.average_cost)::int AS average_differs,
       count(*) FILTER (WHERE f.closing_value <> c.closing_value)::int AS closing_value_differs
FROM floor_old_item_costs AS f
FULL JOIN (SELECT * FROM erp_item_costs WHERE period = %(period)s) AS c
       ON c.store_id = f.store_id AND c.item_id = f.item_id;
