-- item_select_by_sku --
-- One row or none: sku is unique in erp_items.
SELECT id, sku FROM erp_items WHERE sku = %(sku)s;

-- store_period_select_uncosted --
-- The stores whose books reach the period and that are not costed for it: their moves carry no value yet.
SELECT s.code
FROM erp_store_periods AS sp JOIN erp_stores AS s ON s.id = sp.store_id
WHERE sp.period = %(period)s AND sp.costed_at IS NULL
  AND (%(store_id)s::integer IS NULL OR sp.store_id = %(store_id)s)
ORDER BY s.code;

-- stock_move_select_valued --
-- Every stock move of the period once, in id order, valued as costing valued its store: receipts at round(qty x unit cost, 2), a cost correction's value-only move at its value, transfers at +-round(|qty| x the sender's solved average, 2), issues by cumulative rounding so a store/item's issues sum exactly to -cogs_value; no value where the store has no item costs for the period.
WITH moves AS (
    SELECT m.id, m.moved_on, m.store_id, m.item_id, m.kind, m.qty, m.unit_cost, m.value,
           m.counterpart_store_id, m.document_id, m.line_no,
           -- the store/item's net issue quantity through this move, in id order
           sum(CASE WHEN m.kind IN ('sale', 'return', 'adjustment') THEN -m.qty ELSE 0 END)
               OVER (PARTITION BY m.store_id, m.item_id ORDER BY m.id) AS issued_through
    FROM erp_stock_moves AS m
    WHERE m.period = %(period)s
      AND (%(store_id)s::integer IS NULL OR m.store_id = %(store_id)s)
      AND (%(item_id)s::integer IS NULL OR m.item_id = %(item_id)s)
)
SELECT mv.id AS move_id,
       mv.moved_on AS date,
       s.code AS store,
       i.sku,
       mv.kind,
       mv.qty AS quantity,
       mv.unit_cost,
       CASE WHEN c.item_id IS NULL THEN NULL
            WHEN mv.kind = 'receipt' THEN round(mv.qty * mv.unit_cost, 2)
            WHEN mv.kind = 'revaluation' THEN mv.value
            WHEN mv.kind = 'transfer_in' THEN round(mv.qty * sa.average_cost, 2)
            WHEN mv.kind = 'transfer_out' THEN -round(-mv.qty * sa.average_cost, 2)
            -- issued before this move = issued_through - (-qty)
            ELSE round((mv.issued_through + mv.qty) * c.average_cost, 2)
                 - round(mv.issued_through * c.average_cost, 2)
       END AS value,
       cs.code AS counterpart_store,
       CASE WHEN mv.kind IN ('transfer_in', 'transfer_out') AND d.number IS NOT NULL
            THEN d.number || '/' || mv.line_no END AS transfer_id,
       d.number AS document
FROM moves AS mv
JOIN erp_stores AS s ON s.id = mv.store_id
JOIN erp_items AS i ON i.id = mv.item_id
LEFT JOIN erp_stores AS cs ON cs.id = mv.counterpart_store_id
LEFT JOIN erp_documents AS d ON d.id = mv.document_id
LEFT JOIN erp_item_costs AS c
       ON c.period = %(period)s AND c.store_id = mv.store_id AND c.item_id = mv.item_id
-- the sender's solved average: the counterpart for a transfer in, this store for one out
LEFT JOIN erp_item_averages AS sa
       ON mv.kind IN ('transfer_in', 'transfer_out')
      AND sa.period = %(period)s
      AND sa.item_id = mv.item_id
      AND sa.store_id = CASE WHEN mv.kind = 'transfer_in' THEN mv.counterpart_store_id
                             ELSE mv.store_id END
ORDER BY mv.id;

-- item_cost_select --
-- The item costs of the period's costed stores, one row per store and item (the primary key), by store code and sku; the standard cost is the one costing used, kept with them (never today's erp_items).
SELECT s.code AS store, i.sku, c.standard_cost,
       c.opening_qty, c.opening_value, c.receipt_qty, c.receipt_value,
       c.transfer_in_qty, c.transfer_in_value, c.average_cost, c.average_from,
       c.loop_group AS "group", c.issue_qty, c.cogs_value,
       c.transfer_out_qty, c.transfer_out_value, c.closing_qty, c.closing_value
FROM erp_item_costs AS c
JOIN erp_stores AS s ON s.id = c.store_id
JOIN erp_items AS i ON i.id = c.item_id
WHERE c.period = %(period)s
  AND (%(store_id)s::integer IS NULL OR c.store_id = %(store_id)s)
  AND (%(item_id)s::integer IS NULL OR c.item_id = %(item_id)s)
ORDER BY s.code, i.sku;
