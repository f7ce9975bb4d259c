-- jit_off_for_transaction --
-- As the store's costing (costing.sql): the recost's statements are planned with inflated row estimates after a costing's churn and cross jit_optimize_above_cost, and LLVM then spent 3-5 s of a 0.4 s recost through a worker at ~1M moves. Off for the recost's transaction only.
SET LOCAL jit = off;

-- custom_plans_for_transaction --
-- The recost's statements take arrays of pairs, a few for one receipt, every pair of the month for a correction reaching them all, and are planned for the arrays they get: a worker's connection prepares a statement run five times (psycopg) and PostgreSQL may then keep one generic plan for any array, costed as 100 pairs. Custom plans for the recost's transaction only.
SET LOCAL plan_cache_mode = force_custom_plan;

-- hash_joins_only --
-- For a carry of many pairs: hash joins over the next period's openings, never a loop over them per pair. That period was just carried by a costing and its statistics may say '1 row': a nested loop over it for each of 100,000 pairs ran past the statement timeout. Undone by hash_joins_done.
SET LOCAL enable_nestloop = off;

-- hash_joins_done --
-- The planner's own choice again after hash_joins_only.
RESET enable_nestloop;

-- stale_costed_periods_of_documents --
-- The costed periods the stock moves of these (just posted) documents fall in: only those need stale marks; a posting into an open period marks nothing.
SELECT DISTINCT m.period
FROM erp_stock_moves AS m
JOIN erp_periods AS p ON p.period = m.period AND p.status = 'costed'
WHERE m.document_id = ANY(%(documents)s::bigint[])
ORDER BY m.period;

-- stale_periods_lock_for_marking --
-- Posting marks stale pairs in a period and every later one under a share lock of their rows, taken in period order like every writer of a period's facts: a recost in flight (stale_periods_lock_for_recost) is waited for, and one that comes after sees the marks.
SELECT period FROM erp_periods WHERE period >= %(period)s ORDER BY period FOR SHARE;

-- stale_mark_reach --
-- Marks stale what the seeds reach: each seed (the moves of the documents, or the given pairs) in a costed period, the pairs its transfers out of the same item reach in that period, transitively, and the same pairs in the next period while it is costed (its opening is their closing), and so on. A pair marked already keeps its first mark (one recompute however many corrections). How many pairs were reached, and how many were new.
WITH RECURSIVE seeds AS (
    SELECT m.period, m.store_id, m.item_id
    FROM erp_stock_moves AS m
    WHERE m.document_id = ANY(%(documents)s::bigint[])
    UNION
    SELECT s.period, s.store_id, s.item_id
    FROM unnest(%(periods)s::text[], %(stores)s::int[], %(items)s::int[])
        AS s (period, store_id, item_id)
),
reach (period, store_id, item_id) AS (
    SELECT s.period, s.store_id, s.item_id
    FROM seeds AS s JOIN erp_periods AS p ON p.period = s.period AND p.status = 'costed'
    UNION
    SELECT n.period, n.store_id, n.item_id
    FROM reach AS r
    CROSS JOIN LATERAL (
        SELECT m.period, m.counterpart_store_id AS store_id, m.item_id
        FROM erp_stock_moves AS m
        WHERE m.period = r.period AND m.store_id = r.store_id AND m.item_id = r.item_id
          AND m.kind = 'transfer_out'
        UNION ALL
        SELECT p.period, r.store_id, r.item_id
        FROM erp_periods AS p
        WHERE p.period = to_char(to_date(r.period, 'YYYY-MM') + interval '1 month', 'YYYY-MM')
          AND p.status = 'costed'
    ) AS n
),
marked AS (
    INSERT INTO erp_stale_pairs (period, store_id, item_id)
    SELECT period, store_id, item_id FROM reach
    ON CONFLICT (period, store_id, item_id) DO NOTHING
    RETURNING 1
)
SELECT (SELECT count(*) FROM reach)::int AS reached, (SELECT count(*) FROM marked)::int AS marked;

-- stale_periods_lock_for_recost --
-- A recost takes the rows of its period and every later one, in period order, against every writer of their facts (they share-lock them, posting's marks included): postings in flight are waited for and included, one that comes after waits and then marks what it changes for the next costing. Never for longer than the recost step.
SELECT period, status FROM erp_periods WHERE period >= %(period)s ORDER BY period FOR NO KEY UPDATE;

-- stale_next_period --
-- The first period at or after the given one with stale pairs; none when nothing is stale.
SELECT min(period) AS period FROM erp_stale_pairs WHERE period >= %(period)s;

-- stale_pairs_of_period --
-- The stale pairs of a period, in store and item order: what its recost recomputes.
SELECT store_id, item_id, since FROM erp_stale_pairs
WHERE period = %(period)s ORDER BY store_id, item_id;

-- stale_summary --
-- How many pairs of a period are stale, since when; zero and none when it is up to date.
SELECT count(*)::int AS pairs, min(since) AS since
FROM erp_stale_pairs WHERE period = %(period)s;

-- stale_earliest_before --
-- The earliest period before the given one with stale pairs (a later period is costed from its closings only once it is recosted); none when there is none.
SELECT period, count(*)::int AS pairs, min(since) AS since
FROM erp_stale_pairs WHERE period < %(period)s
GROUP BY period ORDER BY period LIMIT 1;

-- stale_clear_pairs --
-- The recost clears the marks of the pairs it recosted, in its transaction: a mark is cleared once, with the figures it asked for.
DELETE FROM erp_stale_pairs AS s
USING unnest(%(stores)s::int[], %(items)s::int[]) AS p (store_id, item_id)
WHERE s.period = %(period)s AND s.store_id = p.store_id AND s.item_id = p.item_id;

-- stale_moving_items --
-- Of the stale pairs' items, those that move between stores in the period: their averages are solved again, for every store of their transfer graph.
SELECT i.id, i.sku, i.standard_cost
FROM erp_items AS i
WHERE i.id = ANY(%(items)s::int[])
  AND EXISTS (SELECT 1 FROM erp_stock_moves AS m
              WHERE m.period = %(period)s AND m.item_id = i.id AND m.kind = 'transfer_in')
ORDER BY i.id;

-- averages_upsert --
-- A re-solved item's average per store replaces the one solved before (an upstream store's comes out the same); a store new to the item's graph gets its row.
INSERT INTO erp_item_averages (period, item_id, store_id, average_cost, average_from, loop_group)
SELECT %(period)s, a.item_id, a.store_id, a.average_cost, a.average_from, a.loop_group
FROM unnest(%(items)s::int[], %(stores)s::int[], %(costs)s::numeric[], %(froms)s::text[],
            %(groups)s::text[]) AS a (item_id, store_id, average_cost, average_from, loop_group)
ON CONFLICT (period, item_id, store_id) DO UPDATE
SET average_cost = EXCLUDED.average_cost, average_from = EXCLUDED.average_from,
    loop_group = EXCLUDED.loop_group;

-- item_costs_select_pairs --
-- The item costs of the given pairs as they stand (before their recost, or after it), with the stock counts' share of COGS (to 5100) valued like costing values it. Each pair is read on its key (a LATERAL with LIMIT, which the planner cannot flatten into a join): a period costed after the statistics were taken is '1 row' to it, and a join scanned all its item costs once per pair.
SELECT c.store_id, c.item_id, st.code AS store, i.sku, c.average_cost, c.cogs_value,
       c.closing_qty, c.closing_value
FROM unnest(%(stores)s::int[], %(items)s::int[]) AS p (store_id, item_id)
CROSS JOIN LATERAL (
    SELECT k.store_id, k.item_id, k.average_cost, k.cogs_value, k.closing_qty, k.closing_value
    FROM erp_item_costs AS k
    WHERE k.period = %(period)s AND k.store_id = p.store_id AND k.item_id = p.item_id
    LIMIT 1  -- the key: one row at most
) AS c
JOIN erp_stores AS st ON st.id = c.store_id
JOIN erp_items AS i ON i.id = c.item_id
ORDER BY c.store_id, c.item_id;

-- item_costs_recost_pairs --
-- The recost of the given pairs: the very method of item_costs_insert_for_store (costing.sql), restricted to the pairs, from the openings and moves as they are now and the period's solved averages; a pair costed before has its figures replaced (its key never changes), a new one is inserted. Value is conserved to the cent (the CHECK on erp_item_costs). The figures are one union summed per pair (no join between row sets whose estimates go stale as a recost rewrites them).
WITH pairs AS (
    SELECT * FROM unnest(%(stores)s::int[], %(items)s::int[]) AS p (store_id, item_id)
),
figures AS (
    SELECT o.store_id, o.item_id, o.qty AS oq, o.value AS ov, 0 AS rq, 0 AS rv, 0 AS tq,
           0 AS tv, 0 AS iq, 0 AS xq, 0 AS xv
    FROM pairs AS p
    JOIN erp_opening_balances AS o
      ON o.period = %(period)s AND o.store_id = p.store_id AND o.item_id = p.item_id
    UNION ALL
    SELECT m.store_id, m.item_id, 0, 0,
           CASE WHEN m.kind = 'receipt' THEN m.qty ELSE 0 END,
           CASE WHEN m.kind = 'receipt' THEN round(m.qty * m.unit_cost, 2)
                WHEN m.kind = 'revaluation' THEN m.value ELSE 0 END,
           CASE WHEN m.kind = 'transfer_in' THEN m.qty ELSE 0 END,
           -- the sender's solved average: the counterpart for a transfer in, this store for one out
           CASE WHEN m.kind = 'transfer_in' THEN round(m.qty * sa.average_cost, 2) ELSE 0 END,
           CASE WHEN m.kind IN ('sale', 'return', 'adjustment') THEN -m.qty ELSE 0 END,
           CASE WHEN m.kind = 'transfer_out' THEN -m.qty ELSE 0 END,
           CASE WHEN m.kind = 'transfer_out' THEN round(-m.qty * sa.average_cost, 2) ELSE 0 END
    FROM pairs AS p
    JOIN erp_stock_moves AS m
      ON m.period = %(period)s AND m.store_id = p.store_id AND m.item_id = p.item_id
    LEFT JOIN erp_item_averages AS sa
           ON m.kind IN ('transfer_in', 'transfer_out')
          AND sa.period = m.period
          AND sa.item_id = m.item_id
          AND sa.store_id = CASE WHEN m.kind = 'transfer_in' THEN m.counterpart_store_id
                                 ELSE m.store_id END
),
summed AS (
    SELECT store_id, item_id, sum(oq) AS oq, sum(ov) AS ov, sum(rq) AS rq, sum(rv) AS rv,
           sum(tq) AS tq, sum(tv) AS tv, sum(iq) AS iq, sum(xq) AS xq, sum(xv) AS xv
    FROM figures
    GROUP BY store_id, item_id
),
combined AS (
    SELECT k.*, i.standard_cost,
           s.average_cost AS solved_cost, s.average_from AS solved_from, s.loop_group
    FROM summed AS k
    JOIN erp_items AS i ON i.id = k.item_id
    LEFT JOIN erp_item_averages AS s
           ON s.period = %(period)s AND s.item_id = k.item_id AND s.store_id = k.store_id
),
costed AS (
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
),
written AS (
    INSERT INTO erp_item_costs (
        period, store_id, item_id, opening_qty, opening_value, receipt_qty, receipt_value,
        transfer_in_qty, transfer_in_value, average_cost, average_from, loop_group, issue_qty,
        cogs_value, transfer_out_qty, transfer_out_value, closing_qty, closing_value,
        standard_cost)
    SELECT %(period)s, store_id, item_id, oq, ov, rq, rv, tq, tv, avg_cost, avg_from, loop_group,
           iq, round(iq * avg_cost, 2), xq, xv,
           oq + rq + tq - iq - xq,
           ov + rv + tv - round(iq * avg_cost, 2) - xv,
           standard_cost
    FROM costed
    ON CONFLICT (period, store_id, item_id) DO UPDATE
    SET opening_qty = EXCLUDED.opening_qty, opening_value = EXCLUDED.opening_value,
        receipt_qty = EXCLUDED.receipt_qty, receipt_value = EXCLUDED.receipt_value,
        transfer_in_qty = EXCLUDED.transfer_in_qty,
        transfer_in_value = EXCLUDED.transfer_in_value,
        average_cost = EXCLUDED.average_cost, average_from = EXCLUDED.average_from,
        loop_group = EXCLUDED.loop_group, issue_qty = EXCLUDED.issue_qty,
        cogs_value = EXCLUDED.cogs_value, transfer_out_qty = EXCLUDED.transfer_out_qty,
        transfer_out_value = EXCLUDED.transfer_out_value, closing_qty = EXCLUDED.closing_qty,
        closing_value = EXCLUDED.closing_value, standard_cost = EXCLUDED.standard_cost
    RETURNING 1
)
SELECT count(*)::int AS written FROM written;

-- opening_carry_pairs --
-- The recosted pairs' closings become the next period's openings: a carried row takes the new closing (a zero one stays, as zero), a pair with no row gets one when its closing is not zero (as costing carries). The pairs whose opening changed, for the next period's marks.
WITH pairs AS (
    SELECT * FROM unnest(%(stores)s::int[], %(items)s::int[]) AS p (store_id, item_id)
),
closing AS (
    SELECT c.store_id, c.item_id, c.closing_qty, c.closing_value
    FROM pairs AS p
    JOIN erp_item_costs AS c
      ON c.period = %(period)s AND c.store_id = p.store_id AND c.item_id = p.item_id
),
updated AS (
    UPDATE erp_opening_balances AS o
    SET qty = c.closing_qty, value = c.closing_value
    FROM closing AS c
    WHERE o.period = %(next)s AND o.store_id = c.store_id AND o.item_id = c.item_id
      AND (o.qty, o.value) IS DISTINCT FROM (c.closing_qty, c.closing_value)
    RETURNING o.store_id, o.item_id
),
inserted AS (
    INSERT INTO erp_opening_balances (store_id, item_id, period, qty, value)
    SELECT c.store_id, c.item_id, %(next)s, c.closing_qty, c.closing_value
    FROM closing AS c
    WHERE c.closing_qty <> 0 OR c.closing_value <> 0
    -- a pair with a row already is the update's: the key skips it (one probe of it per pair;
    -- an anti-join planned from a just-carried period's stale statistics, '1 row', looped
    -- over all of its openings for every pair)
    ON CONFLICT (store_id, item_id, period) DO NOTHING
    RETURNING store_id, item_id
)
SELECT store_id, item_id FROM updated
UNION
SELECT store_id, item_id FROM inserted
ORDER BY store_id, item_id;

-- costing_booked_by_store --
-- What the costing journals of the period (the first costing's and every recost's delta) have booked per store on COGS (5000), stock counts (5100) and inter-store (1350), net debit: a recost posts the difference between this and what the item costs now say, so the ledger ends where a full costing would put it, account by account.
SELECT l.store_id,
       coalesce(sum(l.debit - l.credit) FILTER (WHERE l.account_code = '5000'), 0) AS cogs,
       coalesce(sum(l.debit - l.credit) FILTER (WHERE l.account_code = '5100'), 0) AS adjustments,
       coalesce(sum(l.debit - l.credit) FILTER (WHERE l.account_code = '1350'), 0) AS inter_store
FROM erp_journals AS j
JOIN erp_journal_lines AS l ON l.journal_id = j.id
WHERE j.period = %(period)s AND j.source = 'costing' AND j.store_id = ANY(%(stores)s::int[])
GROUP BY l.store_id;
