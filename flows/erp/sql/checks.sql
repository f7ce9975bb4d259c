-- period_stores --
-- The period's status and how many stores are costed for it: some identities hold only once every store is.
SELECT p.status, p.closed_at,
       (SELECT count(*) FROM erp_stores)::int AS stores,
       (SELECT count(*) FROM erp_store_periods AS sp
        WHERE sp.period = p.period AND sp.costed_at IS NOT NULL)::int AS costed
FROM erp_periods AS p WHERE p.period = %(period)s;

-- journals_unbalanced --
-- Double entry: every journal of the period balances (and then so does the total); the ones that do not, and the totals.
WITH per_journal AS (
    SELECT j.id, j.source_key, coalesce(sum(l.debit), 0) AS debit, coalesce(sum(l.credit), 0) AS credit
    FROM erp_journals AS j LEFT JOIN erp_journal_lines AS l ON l.journal_id = j.id
    WHERE j.period = %(period)s
    GROUP BY j.id
)
SELECT (SELECT count(*) FROM per_journal)::int AS journals,
       (SELECT coalesce(sum(debit), 0) FROM per_journal) AS debit,
       (SELECT coalesce(sum(credit), 0) FROM per_journal) AS credit,
       (SELECT count(*) FROM per_journal WHERE debit <> credit)::int AS unbalanced,
       (SELECT coalesce(jsonb_agg(source_key ORDER BY id), '[]') FROM
            (SELECT id, source_key FROM per_journal WHERE debit <> credit ORDER BY id LIMIT 5) AS u)
           AS examples;

-- inventory_by_store --
-- Conservation per costed store, each term from its own source: openings as loaded or carried (erp_opening_balances), receipts from the stock moves, the rest from the item costs.
WITH costed AS (
    SELECT sp.store_id FROM erp_store_periods AS sp
    WHERE sp.period = %(period)s AND sp.costed_at IS NOT NULL
),
opening AS (
    SELECT store_id, sum(value) AS value FROM erp_opening_balances
    WHERE period = %(period)s GROUP BY store_id
),
receipts AS (
    SELECT store_id, sum(round(qty * unit_cost, 2)) AS value FROM erp_stock_moves
    WHERE period = %(period)s AND kind = 'receipt' GROUP BY store_id
),
costs AS (
    SELECT store_id, sum(transfer_in_value) AS transfer_in, sum(cogs_value) AS cogs,
           sum(transfer_out_value) AS transfer_out, sum(closing_value) AS closing
    FROM erp_item_costs WHERE period = %(period)s GROUP BY store_id
)
SELECT s.code,
       coalesce(o.value, 0) AS opening, coalesce(r.value, 0) AS receipts,
       coalesce(c.transfer_in, 0) AS transfer_in, coalesce(c.cogs, 0) AS cogs,
       coalesce(c.transfer_out, 0) AS transfer_out, coalesce(c.closing, 0) AS closing
FROM costed AS k
JOIN erp_stores AS s ON s.id = k.store_id
LEFT JOIN opening AS o ON o.store_id = k.store_id
LEFT JOIN receipts AS r ON r.store_id = k.store_id
LEFT JOIN costs AS c ON c.store_id = k.store_id
ORDER BY s.id;

-- transfers_company_wide --
-- A transfer moves value between stores, never in or out of the company: in total, transfers in = transfers out.
SELECT coalesce(sum(transfer_in_value), 0) AS transfer_in,
       coalesce(sum(transfer_out_value), 0) AS transfer_out
FROM erp_item_costs WHERE period = %(period)s;

-- cogs_journals_vs_costs --
-- Each costed store's COGS journal (Dr 5000, net) equals its item costs' COGS; a costing journal for a store not costed is a problem too.
WITH costs AS (
    SELECT store_id, sum(cogs_value) AS cogs FROM erp_item_costs
    WHERE period = %(period)s GROUP BY store_id
),
journals AS (
    SELECT j.store_id, sum(l.debit - l.credit) FILTER (WHERE l.account_code = '5000') AS cogs
    FROM erp_journals AS j JOIN erp_journal_lines AS l ON l.journal_id = j.id
    WHERE j.period = %(period)s AND j.source = 'costing'
    GROUP BY j.store_id
),
stores AS (
    SELECT store_id FROM erp_store_periods WHERE period = %(period)s AND costed_at IS NOT NULL
    UNION SELECT store_id FROM journals
)
SELECT s.code, coalesce(c.cogs, 0) AS costs, coalesce(j.cogs, 0) AS journal
FROM stores AS k
JOIN erp_stores AS s ON s.id = k.store_id
LEFT JOIN costs AS c ON c.store_id = k.store_id
LEFT JOIN journals AS j ON j.store_id = k.store_id
WHERE coalesce(c.cogs, 0) <> coalesce(j.cogs, 0)
ORDER BY s.id;

-- openings_vs_closings --
-- Next period's openings are this period's closings, item by item, for every costed store (zero balances are not carried).
WITH closing AS (
    SELECT c.store_id, c.item_id, c.closing_qty AS qty, c.closing_value AS value
    FROM erp_item_costs AS c
    JOIN erp_store_periods AS sp ON sp.store_id = c.store_id AND sp.period = c.period
    WHERE c.period = %(period)s AND sp.costed_at IS NOT NULL
      AND (c.closing_qty <> 0 OR c.closing_value <> 0)
),
opening AS (
    SELECT o.store_id, o.item_id, o.qty, o.value
    FROM erp_opening_balances AS o
    JOIN erp_store_periods AS sp ON sp.store_id = o.store_id AND sp.period = %(period)s
    WHERE o.period = %(next)s AND sp.costed_at IS NOT NULL
)
SELECT s.code, count(*)::int AS items
FROM closing AS c
FULL JOIN opening AS o ON o.store_id = c.store_id AND o.item_id = c.item_id
JOIN erp_stores AS s ON s.id = coalesce(c.store_id, o.store_id)
WHERE (c.qty, c.value) IS DISTINCT FROM (o.qty, o.value)
GROUP BY s.id, s.code
ORDER BY s.id;

-- journals_after_close --
-- A closed period receives nothing: no journal of it was posted after it closed.
SELECT count(*)::int AS late
FROM erp_journals AS j JOIN erp_periods AS p ON p.period = j.period
WHERE j.period = %(period)s AND p.status = 'closed' AND j.posted_at > p.closed_at;
