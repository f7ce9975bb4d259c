-- value_corrections_split --
-- Each item line of the given cost corrections split by quantity as SAP's material ledger splits it: received R (the receipt's quantity of the item), still on hand H = least(R, greatest(0, the pair's opening quantity of the period it posts in, the closing of the last closed period carried forward)) at the receipt's store; on hand = round(amount x H / R, 2) (numerator at scale 20, half away from zero), COGS the rest: the two add up to the amount to the cent.
SELECT l.document_id, l.line_no, d.number, d.corrects_id AS receipt_id, r.number AS receipt,
       %(period)s AS period, r.store_id, st.code AS store, l.item_id, i.sku,
       rq.qty AS received_qty, h.qty AS on_hand_qty, l.debit - l.credit AS amount,
       round(((l.debit - l.credit) * h.qty)::numeric(38,20) / rq.qty, 2) AS on_hand_value
FROM erp_document_lines AS l
JOIN erp_documents AS d ON d.id = l.document_id
JOIN erp_documents AS r ON r.id = d.corrects_id
JOIN erp_stores AS st ON st.id = r.store_id
JOIN erp_items AS i ON i.id = l.item_id
CROSS JOIN LATERAL (SELECT sum(x.qty) AS qty FROM erp_document_lines AS x
                    WHERE x.document_id = r.id AND x.item_id = l.item_id) AS rq
LEFT JOIN erp_opening_balances AS o
       ON o.period = %(period)s AND o.store_id = r.store_id AND o.item_id = l.item_id
CROSS JOIN LATERAL (SELECT least(rq.qty, greatest(0, coalesce(o.qty, 0))) AS qty) AS h
WHERE l.document_id = ANY(%(documents)s::bigint[]) AND l.item_id IS NOT NULL
ORDER BY l.document_id, l.line_no;

-- value_corrections_record_and_move --
-- The split of each item line of the cost corrections posted here, kept once per line (primary key), and its on-hand share as a value-only stock move (qty 0) of the receipt's store and item in the period it posts in, once per (document, line, kind): costing adds it to the receipts' value, so it enters the period's average; a share of 0.00 moves nothing.
WITH kept AS (
    INSERT INTO erp_value_corrections (document_id, line_no, receipt_id, period, store_id,
                                       item_id, received_qty, on_hand_qty, amount,
                                       on_hand_value, cogs_value)
    SELECT s.document_id, s.line_no, s.receipt_id, s.period, s.store_id, s.item_id,
           s.received_qty, s.on_hand_qty, s.amount, s.on_hand_value, s.amount - s.on_hand_value
    FROM unnest(%(documents)s::bigint[], %(lines)s::int[], %(receipts)s::bigint[],
                %(periods)s::text[], %(stores)s::int[], %(items)s::int[],
                %(received)s::numeric[], %(on_hand)s::numeric[], %(amounts)s::numeric[],
                %(on_hand_values)s::numeric[])
         AS s (document_id, line_no, receipt_id, period, store_id, item_id, received_qty,
               on_hand_qty, amount, on_hand_value)
    ON CONFLICT (document_id, line_no) DO NOTHING
    RETURNING *
),
moved AS (
    INSERT INTO erp_stock_moves (period, store_id, item_id, moved_on, kind, qty, value,
                                 document_id, line_no)
    SELECT k.period, k.store_id, k.item_id, d.issued_on, 'revaluation', 0, k.on_hand_value,
           k.document_id, k.line_no
    FROM kept AS k JOIN erp_documents AS d ON d.id = k.document_id
    WHERE k.on_hand_value <> 0
    ON CONFLICT (document_id, line_no, kind) DO NOTHING
    RETURNING 1
)
SELECT (SELECT count(*) FROM kept)::int AS kept, (SELECT count(*) FROM moved)::int AS moved;

-- value_corrections_select_period --
-- The value corrections posted in the period, each item line with its receipt and its split, in document and line order (the first %(limit)s), and how many there are.
SELECT v.document_id, v.line_no, d.number, v.receipt_id, r.number AS receipt, v.period,
       v.store_id, st.code AS store, v.item_id, i.sku, v.received_qty, v.on_hand_qty, v.amount,
       v.on_hand_value, count(*) OVER ()::int AS total
FROM erp_value_corrections AS v
JOIN erp_documents AS d ON d.id = v.document_id
JOIN erp_documents AS r ON r.id = v.receipt_id
JOIN erp_stores AS st ON st.id = v.store_id
JOIN erp_items AS i ON i.id = v.item_id
WHERE v.period = %(period)s
ORDER BY v.document_id, v.line_no
LIMIT %(limit)s;
