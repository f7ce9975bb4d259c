-- period_stores --
-- The period's status and how many stores are costed for it: some identities hold only once every store is.
SELECT p.status, p.closed_at,
       (SELECT count(*) FROM erp_stores AS s  -- but those whose books start later
        WHERE NOT coalesce((SELECT min(f.period) FROM erp_store_periods AS f
                            WHERE f.store_id = s.id) > p.period, false))::int AS stores,
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
    SELECT store_id, sum(coalesce(value, round(qty * unit_cost, 2))) AS value FROM erp_stock_moves
    WHERE period = %(period)s AND kind IN ('receipt', 'revaluation') GROUP BY store_id
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
-- Each costed store's costing journal agrees with its item costs: net debit to 5000 + 5100 (sales and stock counts) = their COGS, and to 1350 = transfers out - transfers in; a costing journal for a store not costed is a problem too.
WITH costs AS (
    SELECT store_id, sum(cogs_value) AS cogs,
           sum(transfer_out_value) - sum(transfer_in_value) AS transfers
    FROM erp_item_costs
    WHERE period = %(period)s GROUP BY store_id
),
journals AS (
    SELECT j.store_id,
           coalesce(sum(l.debit - l.credit) FILTER (WHERE l.account_code IN ('5000', '5100')), 0)
               AS cogs,
           coalesce(sum(l.debit - l.credit) FILTER (WHERE l.account_code = '1350'), 0)
               AS transfers
    FROM erp_journals AS j JOIN erp_journal_lines AS l ON l.journal_id = j.id
    WHERE j.period = %(period)s AND j.source = 'costing'
    GROUP BY j.store_id
),
stores AS (
    SELECT store_id FROM erp_store_periods WHERE period = %(period)s AND costed_at IS NOT NULL
    UNION SELECT store_id FROM journals
)
SELECT s.code,
       coalesce(c.cogs, 0) AS costs, coalesce(j.cogs, 0) AS journal,
       coalesce(c.transfers, 0) AS transfers, coalesce(j.transfers, 0) AS journal_transfers
FROM stores AS k
JOIN erp_stores AS s ON s.id = k.store_id
LEFT JOIN costs AS c ON c.store_id = k.store_id
LEFT JOIN journals AS j ON j.store_id = k.store_id
WHERE coalesce(c.cogs, 0) <> coalesce(j.cogs, 0)
   OR coalesce(c.transfers, 0) <> coalesce(j.transfers, 0)
ORDER BY s.id;

-- item_costs_vs_stock_moves --
-- Per costed store and item, the item costs' quantities and receipt value are the sums of the period's stock moves (a receipt valued to the cent, as costing values it): costing read every move, and none came after it. The first differences, and how many there are.
WITH costed AS (
    SELECT store_id FROM erp_store_periods WHERE period = %(period)s AND costed_at IS NOT NULL
),
moves AS (
    SELECT m.store_id, m.item_id,
           coalesce(sum(m.qty) FILTER (WHERE m.kind = 'receipt'), 0) AS receipt_qty,
           coalesce(sum(coalesce(m.value, round(m.qty * m.unit_cost, 2)))
                        FILTER (WHERE m.kind IN ('receipt', 'revaluation')), 0) AS receipt_value,
           coalesce(sum(m.qty) FILTER (WHERE m.kind = 'transfer_in'), 0) AS transfer_in_qty,
           coalesce(-sum(m.qty) FILTER (WHERE m.kind = 'transfer_out'), 0) AS transfer_out_qty,
           coalesce(-sum(m.qty) FILTER (WHERE m.kind IN ('sale', 'return', 'adjustment')), 0)
               AS issue_qty
    FROM erp_stock_moves AS m JOIN costed AS k ON k.store_id = m.store_id
    WHERE m.period = %(period)s
    GROUP BY m.store_id, m.item_id
),
costs AS (
    SELECT c.store_id, c.item_id, c.receipt_qty, c.receipt_value, c.transfer_in_qty,
           c.transfer_out_qty, c.issue_qty
    FROM erp_item_costs AS c JOIN costed AS k ON k.store_id = c.store_id
    WHERE c.period = %(period)s
),
compared AS (
    SELECT coalesce(c.store_id, m.store_id) AS store_id, coalesce(c.item_id, m.item_id) AS item_id,
           coalesce(c.receipt_qty, 0) AS costs_receipt_qty,
           coalesce(m.receipt_qty, 0) AS moves_receipt_qty,
           coalesce(c.receipt_value, 0) AS costs_receipt_value,
           coalesce(m.receipt_value, 0) AS moves_receipt_value,
           coalesce(c.transfer_in_qty, 0) AS costs_transfer_in_qty,
           coalesce(m.transfer_in_qty, 0) AS moves_transfer_in_qty,
           coalesce(c.transfer_out_qty, 0) AS costs_transfer_out_qty,
           coalesce(m.transfer_out_qty, 0) AS moves_transfer_out_qty,
           coalesce(c.issue_qty, 0) AS costs_issue_qty,
           coalesce(m.issue_qty, 0) AS moves_issue_qty
    FROM costs AS c
    FULL JOIN moves AS m ON m.store_id = c.store_id AND m.item_id = c.item_id
)
SELECT s.code AS store, i.sku, d.*, count(*) OVER ()::int AS differ
FROM compared AS d
JOIN erp_stores AS s ON s.id = d.store_id
JOIN erp_items AS i ON i.id = d.item_id
WHERE (costs_receipt_qty, costs_receipt_value, costs_transfer_in_qty, costs_transfer_out_qty,
       costs_issue_qty)
   <> (moves_receipt_qty, moves_receipt_value, moves_transfer_in_qty, moves_transfer_out_qty,
       moves_issue_qty)
ORDER BY d.store_id, d.item_id
LIMIT 5;

-- inventory_gl_vs_stock_ledger_by_store --
-- One fact, two records: each costed store's inventory in the ledger (1300, every line on the store up to the end of the period) equals its stock ledger's closing value (item costs of the period).
WITH costed AS (
    SELECT store_id FROM erp_store_periods WHERE period = %(period)s AND costed_at IS NOT NULL
),
gl AS (
    SELECT l.store_id, sum(l.debit - l.credit) AS value
    FROM erp_journals AS j JOIN erp_journal_lines AS l ON l.journal_id = j.id
    WHERE j.period <= %(period)s AND l.account_code = '1300'
      AND l.store_id IN (SELECT store_id FROM costed)
    GROUP BY l.store_id
),
stock AS (
    SELECT store_id, sum(closing_value) AS value FROM erp_item_costs
    WHERE period = %(period)s GROUP BY store_id
)
SELECT s.code, coalesce(g.value, 0) AS gl, coalesce(k.value, 0) AS stock
FROM costed AS c
JOIN erp_stores AS s ON s.id = c.store_id
LEFT JOIN gl AS g ON g.store_id = c.store_id
LEFT JOIN stock AS k ON k.store_id = c.store_id
ORDER BY s.id;

-- inventory_gl_vs_stock_ledger_company_wide --
-- Company-wide, every inventory line of the ledger up to the end of the period (a line without a store included) equals the stock ledger's closing value of every store.
SELECT (SELECT coalesce(sum(l.debit - l.credit), 0)
        FROM erp_journals AS j JOIN erp_journal_lines AS l ON l.journal_id = j.id
        WHERE j.period <= %(period)s AND l.account_code = '1300') AS gl,
       (SELECT coalesce(sum(closing_value), 0) FROM erp_item_costs
        WHERE period = %(period)s) AS stock;

-- inter_store_by_store --
-- The inter-store account (1350) of the period per store: a sender's net debit is what it sent (transfers out - in), and what one store sends another receives, so company-wide it nets to zero.
SELECT s.code, coalesce(sum(l.debit), 0) AS debit, coalesce(sum(l.credit), 0) AS credit
FROM erp_journals AS j
JOIN erp_journal_lines AS l ON l.journal_id = j.id
LEFT JOIN erp_stores AS s ON s.id = l.store_id
WHERE j.period = %(period)s AND l.account_code = '1350'
GROUP BY l.store_id, s.code
ORDER BY l.store_id NULLS FIRST;

-- period_standing --
-- A period's status (none: it does not exist), whether its close kept its balances, and whether any journal line is dated before it (its opening carries something).
SELECT (SELECT status FROM erp_periods WHERE period = %(of)s) AS status,
       EXISTS (SELECT 1 FROM erp_period_balances WHERE period = %(of)s) AS kept,
       EXISTS (SELECT 1 FROM erp_journals AS j
               JOIN erp_journal_lines AS l ON l.journal_id = j.id
               WHERE j.period < %(of)s) AS lines_before;

-- period_balances_select --
-- A closed period's closing balances as its close kept them, per account and store; rolled into a new fiscal year, its income and expense are retained earnings.
SELECT CASE WHEN %(roll)s AND a.kind IN ('income', 'expense') THEN %(retained)s
            ELSE b.account_code END AS code,
       b.store_id, s.code AS store, sum(b.balance) AS balance
FROM erp_period_balances AS b
JOIN erp_accounts AS a ON a.code = b.account_code
LEFT JOIN erp_stores AS s ON s.id = b.store_id
WHERE b.period = %(period)s
GROUP BY 1, b.store_id, s.code;

-- openings_vs_closings --
-- Next period's openings are this period's closings, item by item, for every costed store (zero balances are not carried, and a zero opening, which a recost leaves where it zeroed a closing, counts as none).
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
      AND (o.qty <> 0 OR o.value <> 0)  -- a recost leaves a carried row it zeroes at zero
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
