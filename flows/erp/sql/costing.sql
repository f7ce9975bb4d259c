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

-- average_transfer_items --
-- The items of the period that move between stores, with their standard cost: the only ones whose averages depend on other stores' (solved in Python, exactly).
SELECT i.id, i.sku, i.standard_cost
FROM erp_items AS i
WHERE i.id IN (SELECT item_id FROM erp_stock_moves
               WHERE period = %(period)s AND kind = 'transfer_in')
ORDER BY i.id;

-- average_figures_of_transfer_items --
-- The own figures of each store of each moving item's transfer graph: opening quantity and value, receipts quantity and value (each receipt valued to the cent, as costing values it; a value-only move, a cost correction's on-hand share, adds its value). The (item, store) pairs come as arrays and meet the moves on their index's columns (period, store, item): right after posting the planner's estimates of the new moves are stale, and a join planned on them must not become a scan of the period per item.
WITH nodes AS (
    SELECT * FROM unnest(%(items)s::int[], %(stores)s::int[]) AS n (item_id, store_id)
),
figures AS (
    SELECT o.item_id, o.store_id, o.qty AS oq, o.value AS ov, 0 AS rq, 0 AS rv
    FROM nodes AS n
    JOIN erp_opening_balances AS o
      ON o.period = %(period)s AND o.store_id = n.store_id AND o.item_id = n.item_id
    UNION ALL
    SELECT m.item_id, m.store_id, 0, 0, m.qty, coalesce(m.value, round(m.qty * m.unit_cost, 2))
    FROM nodes AS n
    JOIN erp_stock_moves AS m
      ON m.period = %(period)s AND m.store_id = n.store_id AND m.item_id = n.item_id
    WHERE m.kind IN ('receipt', 'revaluation')
)
SELECT item_id, store_id, sum(oq) AS opening_qty, sum(ov) AS opening_value,
       sum(rq) AS receipt_qty, sum(rv) AS receipt_value
FROM figures
GROUP BY item_id, store_id
ORDER BY item_id, store_id;

-- average_transfer_edges --
-- The transfer graph of each item of a batch: quantity sent from one store to another in the period (read from the receiving side; posting writes both), through the partial index of transfers by (period, item).
SELECT item_id, counterpart_store_id AS sender, store_id AS receiver, sum(qty) AS qty
FROM erp_stock_moves
WHERE period = %(period)s AND kind = 'transfer_in'
  AND item_id = ANY(%(items)s::int[])
GROUP BY item_id, counterpart_store_id, store_id
ORDER BY item_id, sender, receiver;

-- average_solve_claim --
-- The averages of a period are solved once (its primary key), claimed before they are written: a rerun, or a second job of the period, finds them (or waits for the transaction that writes them) and writes nothing.
INSERT INTO erp_average_solves (period, items, loops)
VALUES (%(period)s, 0, 0)
ON CONFLICT (period) DO NOTHING
RETURNING period;

-- average_solve_record --
-- What the solve found, for the costing report, in the transaction that claimed and wrote it.
UPDATE erp_average_solves
SET items = %(items)s, loops = %(loops)s, fallback_groups = %(fallback_groups)s
WHERE period = %(period)s;

-- average_solve_select --
-- What the period's solve found, for the costing report.
SELECT period, solved_at, items, loops, fallback_groups
FROM erp_average_solves WHERE period = %(period)s;

-- average_copy --
-- Every store's average of every moving item, solved once per period.
COPY erp_item_averages (period, item_id, store_id, average_cost, average_from, loop_group) FROM STDIN;

-- item_costs_insert_for_store --
-- One set-based statement per store: periodic weighted average (receipts' value includes the value-only moves of cost corrections); an item that moves between stores takes its average as solved for the period (erp_item_averages), and a transfer is valued at the sender's average, the same value on both sides; closing value is the remainder, so value is conserved to the cent (CHECK on erp_item_costs).
WITH moves AS (
    SELECT m.item_id,
           sum(m.qty) FILTER (WHERE m.kind = 'receipt') AS receipt_qty,
           -- a value-only move (a cost correction's on-hand share): its value, no quantity
           sum(coalesce(m.value, round(m.qty * m.unit_cost, 2)))
               FILTER (WHERE m.kind IN ('receipt', 'revaluation')) AS receipt_value,
           sum(m.qty) FILTER (WHERE m.kind = 'transfer_in') AS transfer_in_qty,
           sum(round(m.qty * sa.average_cost, 2)) FILTER (WHERE m.kind = 'transfer_in')
               AS transfer_in_value,
           -sum(m.qty) FILTER (WHERE m.kind IN ('sale', 'return', 'adjustment')) AS issue_qty,
           -sum(m.qty) FILTER (WHERE m.kind = 'transfer_out') AS transfer_out_qty,
           sum(round(-m.qty * sa.average_cost, 2)) FILTER (WHERE m.kind = 'transfer_out')
               AS transfer_out_value
    FROM erp_stock_moves AS m
    -- the sender's solved average: the counterpart for a transfer in, this store for one out
    -- (primary-key lookups, transfers only)
    LEFT JOIN erp_item_averages AS sa
           ON m.kind IN ('transfer_in', 'transfer_out')
          AND sa.period = m.period
          AND sa.item_id = m.item_id
          AND sa.store_id = CASE WHEN m.kind = 'transfer_in' THEN m.counterpart_store_id
                                 ELSE m.store_id END
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
           coalesce(mv.transfer_out_qty, 0) AS xq, coalesce(mv.transfer_out_value, 0) AS xv,
           s.average_cost AS solved_cost, s.average_from AS solved_from, s.loop_group
    FROM (SELECT item_id FROM opening UNION SELECT item_id FROM moves) AS k
    JOIN erp_items AS i ON i.id = k.item_id
    LEFT JOIN opening AS o ON o.item_id = k.item_id
    LEFT JOIN moves AS mv ON mv.item_id = k.item_id
    LEFT JOIN erp_item_averages AS s
           ON s.period = %(period)s AND s.item_id = k.item_id AND s.store_id = %(store_id)s
),
costed AS (
    -- an item that does not move between stores: its own figures; the numerator at
    -- scale 20 so that rounding to 4 decimals is exact (half away from zero)
    SELECT c.*,
           coalesce(c.solved_cost,
               CASE WHEN c.oq + c.rq + c.tq > 0
                        THEN round((c.ov + c.rv)::numeric(38,20) / (c.oq + c.rq + c.tq), 4)
                    WHEN c.oq > 0 THEN round(c.ov::numeric(38,20) / c.oq, 4)
                    ELSE c.standard_cost END) AS avg_cost,
           coalesce(c.solved_from,
               CASE WHEN c.oq + c.rq + c.tq > 0 THEN 'solved'
                    WHEN c.oq > 0 THEN 'fallback_opening'
                    ELSE 'fallback_standard' END) AS avg_from
    FROM combined AS c
)
INSERT INTO erp_item_costs (
    period, store_id, item_id, opening_qty, opening_value, receipt_qty, receipt_value,
    transfer_in_qty, transfer_in_value, average_cost, average_from, loop_group, issue_qty,
    cogs_value, transfer_out_qty, transfer_out_value, closing_qty, closing_value, standard_cost)
SELECT %(period)s, %(store_id)s, item_id, oq, ov, rq, rv, tq, tv, avg_cost, avg_from, loop_group,
       iq, round(iq * avg_cost, 2), xq, xv,
       oq + rq + tq - iq - xq,
       ov + rv + tv - round(iq * avg_cost, 2) - xv,
       -- kept with the costs: a closed period's exports never read erp_items again
       standard_cost
FROM costed;

-- store_costs_totals --
-- What each given store's costing journal and the summary are built from (a row per store with item costs); the adjustments' share of COGS (stock counts) goes to 5100, valued like every issue at the item's average. Summed store by store (one index range of its item costs each): no grouping or sorting of every store's item costs by store, whose plan came from estimates a costing's churn leaves stale ('221 rows' for 100,000: a sort spilled to disk, 1.7 s of a recost job's 4 s through a worker at ~1M moves). The stock counts are summed apart, once per store, each count's item valued on its key (a LATERAL with LIMIT): joined to the item costs of a period costed after the statistics were taken ('1 row'), they were aggregated again for every item cost (11.9 s of a recost job at ~1M moves).
SELECT s.id AS store_id, t.*, j.adjustment_value
FROM unnest(%(stores)s::int[]) AS s (id)
CROSS JOIN LATERAL (
    SELECT count(*)::int AS items,
           coalesce(sum(c.opening_value), 0) AS opening_value,
           coalesce(sum(c.receipt_value), 0) AS receipt_value,
           coalesce(sum(c.transfer_in_value), 0) AS transfer_in_value,
           coalesce(sum(c.cogs_value), 0) AS cogs_value,
           coalesce(sum(c.transfer_out_value), 0) AS transfer_out_value,
           coalesce(sum(c.closing_value), 0) AS closing_value,
           count(*) FILTER (WHERE c.closing_qty < 0)::int AS negative_items,
           count(*) FILTER (WHERE c.loop_group IS NOT NULL)::int AS loop_items,
           count(*) FILTER (WHERE c.average_from <> 'solved')::int AS fallback_items
    FROM erp_item_costs AS c
    WHERE c.period = %(period)s AND c.store_id = s.id
) AS t
CROSS JOIN LATERAL (
    SELECT coalesce(sum(round(a.qty * k.average_cost, 2)), 0) AS adjustment_value
    FROM (
        SELECT m.item_id, -sum(m.qty) AS qty
        FROM erp_stock_moves AS m
        WHERE m.period = %(period)s AND m.store_id = s.id AND m.kind = 'adjustment'
        GROUP BY m.item_id
    ) AS a
    CROSS JOIN LATERAL (
        SELECT c.average_cost
        FROM erp_item_costs AS c
        WHERE c.period = %(period)s AND c.store_id = s.id AND c.item_id = a.item_id
        LIMIT 1  -- the key: one row at most
    ) AS k
) AS j
WHERE t.items > 0;

-- store_opening_loaded --
-- A store whose books start in this period (opening 'loaded') has its opening stock put in the ledger by its costing (the opening value of its item costs).
SELECT sp.opening = 'loaded' AS loaded
FROM erp_store_periods AS sp
WHERE sp.period = %(period)s AND sp.store_id = %(store_id)s;

-- store_top_movers --
-- The items with the largest cost of goods sold in each given store, `limit` per store, ties by SKU: the `limit`-th largest COGS of the store first, then its items at or above it (no sort of every store's item costs at once; an index on COGS would make it a few entries per store, but cost a recost of every pair a sixth more in index upkeep).
SELECT s.id AS store_id, t.sku, t.cogs_value
FROM unnest(%(stores)s::int[]) WITH ORDINALITY AS s (id, n)
LEFT JOIN LATERAL (
    SELECT c.cogs_value AS floor
    FROM erp_item_costs AS c
    WHERE c.period = %(period)s AND c.store_id = s.id
    ORDER BY c.cogs_value DESC
    OFFSET %(limit)s - 1 LIMIT 1
) AS f ON true
CROSS JOIN LATERAL (
    SELECT i.sku, c.cogs_value
    FROM erp_item_costs AS c JOIN erp_items AS i ON i.id = c.item_id
    WHERE c.period = %(period)s AND c.store_id = s.id
      AND c.cogs_value >= coalesce(f.floor, '-Infinity')
    ORDER BY c.cogs_value DESC, i.sku
    LIMIT %(limit)s
) AS t
ORDER BY s.n, t.cogs_value DESC, t.sku;

-- opening_carry_forward_for_store --
-- A store's closing balances become its next period's opening balances, once, in the store's own costing transaction.
INSERT INTO erp_opening_balances (store_id, item_id, period, qty, value)
SELECT store_id, item_id, %(next)s, closing_qty, closing_value
FROM erp_item_costs
WHERE period = %(period)s AND store_id = %(store_id)s
  AND (closing_qty <> 0 OR closing_value <> 0)
ON CONFLICT (store_id, item_id, period) DO NOTHING;

-- period_negative_stock --
-- How many (store, item) pairs of the period closed below zero (sold beyond what was there), out of how many costed.
SELECT count(*) FILTER (WHERE closing_qty < 0)::int AS negative, count(*)::int AS costed
FROM erp_item_costs WHERE period = %(period)s;
