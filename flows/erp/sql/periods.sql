-- period_lock_shared --
-- Every step that writes a period's books takes this in its fenced transaction: a close (period_lock_exclusive) waits for it, and a writer that comes after a close sees 'closed' and writes nothing.
SELECT period, status FROM erp_periods WHERE period = %(period)s FOR SHARE;

-- period_lock_exclusive --
-- Close and reopen take the period's row exclusively: no writer holds it while the status changes.
SELECT period, status, costed_at, closed_at, closed_by
FROM erp_periods WHERE period = %(period)s FOR UPDATE;

-- period_select --
-- One row or none; period is the primary key.
SELECT period, status, costed_at, closed_at, closed_by FROM erp_periods WHERE period = %(period)s;

-- period_insert_next --
-- The next period exists (open) to receive carried-forward balances.
INSERT INTO erp_periods (period) VALUES (%(period)s) ON CONFLICT (period) DO NOTHING;

-- store_period_starting_points --
-- For every store in scope: whether it has its starting point for the period, is costed there, and the period it still needs (the first uncosted one in its chain, NULL when it has no books at all).
SELECT s.id, s.code,
       sp.store_id IS NOT NULL AS has_start,
       sp.costed_at IS NOT NULL AS costed,
       (SELECT min(o.period) FROM erp_store_periods AS o
        WHERE o.store_id = s.id AND o.costed_at IS NULL AND o.period < %(period)s) AS needs,
       (SELECT min(o.period) FROM erp_store_periods AS o WHERE o.store_id = s.id) AS first_period
FROM erp_stores AS s
LEFT JOIN erp_store_periods AS sp ON sp.store_id = s.id AND sp.period = %(period)s
WHERE %(store)s::text IS NULL OR s.code = %(store)s
ORDER BY s.id;

-- store_period_mark_costed --
-- A store is costed once per period; the row lock serialises two costings of it and a migration of its openings. Zero rows: costed already (a rerun) or no starting point.
UPDATE erp_store_periods SET costed_at = clock_timestamp()
WHERE store_id = %(store_id)s AND period = %(period)s AND costed_at IS NULL
RETURNING store_id;

-- store_period_select_for_update --
-- The store's row for the period, locked: the costing that found it costed already reads what is there.
SELECT store_id, period, opening, costed_at FROM erp_store_periods
WHERE store_id = %(store_id)s AND period = %(period)s FOR UPDATE;

-- store_period_insert_carried --
-- Costing a store for P gives it its starting point for P+1, in the same transaction as the carried balances.
INSERT INTO erp_store_periods (store_id, period, opening)
VALUES (%(store_id)s, %(period)s, 'carried')
ON CONFLICT (store_id, period) DO NOTHING;

-- stores_not_costed --
-- Close needs every store costed for the period, but a store whose books start later (its first period after this one).
SELECT s.code FROM erp_stores AS s
LEFT JOIN erp_store_periods AS sp ON sp.store_id = s.id AND sp.period = %(period)s
WHERE sp.costed_at IS NULL
  AND NOT coalesce((SELECT min(f.period) FROM erp_store_periods AS f
                    WHERE f.store_id = s.id) > %(period)s, false)
ORDER BY s.id;

-- period_mark_costed_if_all_stores --
-- A period is costed once every store is (whichever jobs costed them; a store whose books start later does not count); the caller holds the period row exclusively, so the last costing to finish sees every other one committed.
UPDATE erp_periods SET status = 'costed', costed_at = clock_timestamp()
WHERE period = %(period)s AND status = 'open'
  AND EXISTS (SELECT 1 FROM erp_stores)
  AND NOT EXISTS (
      SELECT 1 FROM erp_stores AS s
      LEFT JOIN erp_store_periods AS sp ON sp.store_id = s.id AND sp.period = %(period)s
      WHERE sp.costed_at IS NULL
        AND NOT coalesce((SELECT min(f.period) FROM erp_store_periods AS f
                          WHERE f.store_id = s.id) > %(period)s, false))
RETURNING period;

-- period_close --
-- Only a costed period closes; the caller holds its row exclusively and has checked the rest.
UPDATE erp_periods SET status = 'closed', closed_at = clock_timestamp(), closed_by = %(actor)s
WHERE period = %(period)s AND status = 'costed'
RETURNING period, closed_at, closed_by;

-- period_reopen --
-- A reopened period is costed again (its costs stay: they are append-only), so documents can be posted into it and it can be closed again.
UPDATE erp_periods SET status = 'costed', closed_at = NULL, closed_by = NULL
WHERE period = %(period)s AND status = 'closed'
RETURNING period;

-- period_event_insert --
-- The period's history: every status change, by whom and why.
INSERT INTO erp_period_events (period, action, actor, reason)
VALUES (%(period)s, %(action)s, %(actor)s, %(reason)s)
RETURNING id, period, action, actor, reason, at;

-- period_events_select --
-- A period's history, oldest first.
SELECT id, period, action, actor, reason, at FROM erp_period_events
WHERE period = %(period)s ORDER BY id;

-- period_balances_delete --
-- A period has one snapshot of its closing balances at most, taken by its last close: the close replaces it, a reopen removes it (the balances are no longer final).
DELETE FROM erp_period_balances WHERE period = %(period)s;

-- period_balances_insert --
-- The closing balances of the period as it closes, one row per account and store (unique, NULL store included), in the close's transaction: the next period's opening is checked against them.
INSERT INTO erp_period_balances (period, account_code, store_id, balance)
SELECT %(period)s, b.account_code, b.store_id, b.balance
FROM unnest(%(accounts)s::text[], %(stores)s::int[], %(balances)s::numeric[])
    AS b (account_code, store_id, balance);

-- period_stock_state --
-- A period's stock is valued once (its averages solved once, each store costed once) from its posted moves: costing waits until no document that moves stock is unposted; such a document is not posted into a period being costed (solved, not every store costed), and into a costed one only while no later period is being costed (it is then recosted: flows/erp/recost.py).
SELECT (SELECT count(*) FROM erp_store_periods
        WHERE period = %(period)s AND costed_at IS NOT NULL)::int AS costed_stores,
       EXISTS (SELECT 1 FROM erp_average_solves WHERE period = %(period)s) AS solved,
       (SELECT count(*) FROM erp_documents AS d
        WHERE d.posting_period = %(period)s AND d.status = 'unposted'
          AND EXISTS (SELECT 1 FROM erp_document_lines AS l
                      WHERE l.document_id = d.id AND l.item_id IS NOT NULL))::int AS unposted,
       (SELECT status FROM erp_periods WHERE period = %(period)s) = 'costed' AS costed,
       -- later periods being costed (solved, not every store costed): their openings are
       -- frozen, and a backdated document here would change them (flows/erp/recost.py)
       ARRAY(SELECT p.period FROM erp_periods AS p
             JOIN erp_average_solves AS a ON a.period = p.period
             WHERE p.period > %(period)s AND p.status = 'open'
             ORDER BY p.period) AS later_being_costed;

-- periods_select_recent --
-- Read-only: the newest periods with their status, for the console's list.
SELECT p.period, p.status, p.costed_at,
       (SELECT max(e.at) FROM erp_period_events AS e
        WHERE e.period = p.period AND e.action = 'closed') AS closed_at
FROM erp_periods AS p
ORDER BY p.period DESC
LIMIT %(limit)s;
