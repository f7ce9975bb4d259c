-- facts_lock_for_solve --
-- The solve reads the period's facts under this lock: every writer of a period's facts (posting, a migration of openings) share-locks the period's row, so the solve waits for those in flight, and one that comes after waits for the solve to commit and then sees it (and is refused).
SELECT period, status FROM erp_periods WHERE period = %(period)s FOR NO KEY UPDATE;

-- facts_fingerprint --
-- What a period's solve reads, as a fingerprint: per store, the opening balances, receipts and transfers in of the items that move between stores (`moving`: those items, hashed); and the standard cost (the fallback of solve and costing) of every item the period costs, those with an opening or a stock move in it (an item loaded mid-costing that never moved is not a fact of it). Equal fingerprints, same facts. With `stores` (ids), only those stores' hashes (`asked`: their codes, hashed or not) and the moving items, no standard costs: a recost refreshes the stores it changed.
WITH moving AS (
    SELECT DISTINCT item_id FROM erp_stock_moves
    WHERE period = %(period)s AND kind = 'transfer_in'
),
facts AS (
    SELECT o.store_id, format('opening %%s %%s %%s', o.item_id, o.qty, o.value) AS fact
    FROM erp_opening_balances AS o JOIN moving AS m ON m.item_id = o.item_id
    WHERE o.period = %(period)s
      AND (%(stores)s::int[] IS NULL OR o.store_id = ANY (%(stores)s::int[]))
    UNION ALL
    -- a value-only move (a cost correction's on-hand share) its value where a receipt's unit cost is
    SELECT s.store_id, format('%%s %%s %%s %%s %%s %%s %%s', s.kind, s.item_id, s.qty,
                              coalesce(s.unit_cost, s.value), s.counterpart_store_id,
                              s.document_id, s.line_no)
    FROM erp_stock_moves AS s JOIN moving AS m ON m.item_id = s.item_id
    WHERE s.period = %(period)s AND s.kind IN ('receipt', 'transfer_in', 'revaluation')
      AND (%(stores)s::int[] IS NULL OR s.store_id = ANY (%(stores)s::int[]))
),
per_store AS (
    SELECT store_id, md5(string_agg(fact, ';' ORDER BY fact)) AS hash
    FROM facts GROUP BY store_id
)
SELECT jsonb_strip_nulls(jsonb_build_object(
    'stores', coalesce((SELECT jsonb_object_agg(st.code, p.hash)
                        FROM per_store AS p JOIN erp_stores AS st ON st.id = p.store_id), '{}'),
    'moving', (SELECT md5(coalesce(string_agg(item_id::text, ' ' ORDER BY item_id), ''))
               FROM moving),
    'asked', CASE WHEN %(stores)s::int[] IS NOT NULL THEN
             (SELECT coalesce(jsonb_agg(code ORDER BY code), '[]') FROM erp_stores
              WHERE id = ANY (%(stores)s::int[])) END,
    'standard_costs', CASE WHEN %(stores)s::int[] IS NULL THEN
                      (SELECT md5(coalesce(string_agg(i.id || ' ' || i.standard_cost, ';'
                                                      ORDER BY i.id), ''))
                       FROM erp_items AS i
                       WHERE EXISTS (SELECT 1 FROM erp_opening_balances AS o
                                     WHERE o.period = %(period)s AND o.item_id = i.id)
                          OR EXISTS (SELECT 1 FROM erp_stock_moves AS s
                                     WHERE s.period = %(period)s AND s.item_id = i.id)) END
)) AS facts;

-- facts_record --
-- The fingerprint of the facts the period's averages were solved from, in the solve's transaction.
UPDATE erp_average_solves SET facts = %(facts)s WHERE period = %(period)s;

-- facts_solved --
-- The period's solve: when, the fingerprint of its facts (NULL for a solve older than fingerprints) and the period's status; none when not solved.
SELECT a.solved_at, a.facts, p.status
FROM erp_average_solves AS a JOIN erp_periods AS p ON p.period = a.period
WHERE a.period = %(period)s;

-- periods_open_lock --
-- Every open period's row, share-locked in period order like every writer of a period's facts does: a solve in flight (facts_lock_for_solve) is waited for, and the next statement (a new snapshot) sees it.
SELECT period FROM erp_periods WHERE status = 'open' ORDER BY period FOR SHARE;

-- periods_being_costed --
-- Open periods whose costing has started (averages solved): a standard cost change now would cost some stores with the old cost and others with the new.
SELECT p.period, s.solved_at,
       (SELECT count(*) FROM erp_store_periods AS sp
        WHERE sp.period = p.period AND sp.costed_at IS NOT NULL)::int AS costed
FROM erp_periods AS p
JOIN erp_average_solves AS s ON s.period = p.period
WHERE p.status = 'open'
ORDER BY p.period;

-- staged_items_cost_changes_refused --
-- A migration's item rows that change a standard cost while a period is being costed: taken out of the chunk (the caller rejects them with the reason), so the cost the period's costing uses does not change half-way.
DELETE FROM staged_items AS s
USING erp_items AS i
WHERE i.sku = s.sku AND i.standard_cost <> s.standard_cost
RETURNING s.row_number, s.sku, i.standard_cost AS old, s.standard_cost AS new;

-- facts_is_solved --
-- Whether the period's averages are solved (a recost keeps their new fingerprint then).
SELECT EXISTS (SELECT 1 FROM erp_average_solves WHERE period = %(period)s) AS solved;

-- facts_stale_marks --
-- Whether the period has stale pairs waiting for their recost (flows/erp/recost.py): its facts changed by design, and the books check names them instead.
SELECT EXISTS (SELECT 1 FROM erp_stale_pairs WHERE period = %(period)s) AS stale;
