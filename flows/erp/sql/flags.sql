-- inventory_by_store --
-- Inventory (1300) at the end of the period, per store (a line without a store as NULL), from every journal up to it: a credit is stock worth less than nothing.
SELECT l.store_id, s.code, sum(l.debit - l.credit) AS balance
FROM erp_journals AS j
JOIN erp_journal_lines AS l ON l.journal_id = j.id
LEFT JOIN erp_stores AS s ON s.id = l.store_id
WHERE j.period <= %(period)s AND l.account_code = '1300'
GROUP BY l.store_id, s.code
ORDER BY l.store_id NULLS FIRST;

-- item_costs_select_negative_stock --
-- The costed store items of the period that closed below zero (sold beyond what was there), and how costing valued them; the first %(shown)s, and how many there are.
SELECT s.code AS store, i.sku, c.closing_qty, c.closing_value, c.average_cost, c.average_from,
       count(*) OVER ()::int AS found
FROM erp_item_costs AS c
JOIN erp_stores AS s ON s.id = c.store_id
JOIN erp_items AS i ON i.id = c.item_id
WHERE c.period = %(period)s AND c.closing_qty < 0
ORDER BY c.closing_value, s.id, i.id
LIMIT %(shown)s;

-- averages_select_negative --
-- The averages of the period below zero (a sale then costs a negative COGS): from the item costs of a costed store, else from the period's solve; how each was found and what it valued; the first %(shown)s, and how many there are.
WITH negative AS (
    SELECT c.store_id, c.item_id, c.average_cost, c.average_from, c.issue_qty, c.cogs_value,
           c.closing_qty, c.closing_value
    FROM erp_item_costs AS c
    WHERE c.period = %(period)s AND c.average_cost < 0
    UNION ALL
    SELECT a.store_id, a.item_id, a.average_cost, a.average_from, NULL, NULL, NULL, NULL
    FROM erp_item_averages AS a
    WHERE a.period = %(period)s AND a.average_cost < 0
      AND NOT EXISTS (SELECT 1 FROM erp_item_costs AS c
                      WHERE c.period = a.period AND c.store_id = a.store_id
                        AND c.item_id = a.item_id)
)
SELECT s.code AS store, i.sku, n.average_cost, n.average_from, n.issue_qty, n.cogs_value,
       n.closing_qty, n.closing_value, count(*) OVER ()::int AS found
FROM negative AS n
JOIN erp_stores AS s ON s.id = n.store_id
JOIN erp_items AS i ON i.id = n.item_id
ORDER BY n.average_cost, s.id, i.id
LIMIT %(shown)s;

-- cogs_gl_vs_item_costs --
-- Cost of goods sold in two records: the ledger's 5000 + 5100 of the period (every source) and the COGS of the period's item costs; they differ by whatever was posted there other than by costing.
SELECT (SELECT coalesce(sum(l.debit - l.credit), 0)
        FROM erp_journals AS j JOIN erp_journal_lines AS l ON l.journal_id = j.id
        WHERE j.period = %(period)s AND l.account_code IN ('5000', '5100')) AS gl,
       (SELECT coalesce(sum(cogs_value), 0) FROM erp_item_costs
        WHERE period = %(period)s) AS costs;

-- cogs_direct_postings --
-- The period's lines on 5000 (COGS) or 5100 (adjustments) not posted by costing: a document's (its number), or an opening's; net per journal and account, the largest first %(shown)s, and how many there are.
SELECT coalesce(d.number, j.source_key) AS source, s.code AS store, l.account_code,
       sum(l.debit - l.credit) AS amount, count(*) OVER ()::int AS found
FROM erp_journals AS j
JOIN erp_journal_lines AS l ON l.journal_id = j.id
LEFT JOIN erp_stores AS s ON s.id = coalesce(l.store_id, j.store_id)
LEFT JOIN erp_documents AS d
       ON j.source = 'document' AND j.source_key ~ '^document:[0-9]+$'
      AND d.id = CASE WHEN j.source_key ~ '^document:[0-9]+$'
                      THEN split_part(j.source_key, ':', 2)::bigint END
WHERE j.period = %(period)s AND j.source <> 'costing' AND l.account_code IN ('5000', '5100')
GROUP BY j.id, d.number, j.source_key, s.code, l.account_code
ORDER BY abs(sum(l.debit - l.credit)) DESC, j.id
LIMIT %(shown)s;

-- period_activity --
-- Whether anything happened in the period: a document dated in it or entered under it, a journal posted from a document, a stock move.
SELECT EXISTS (SELECT 1 FROM erp_documents WHERE posting_period = %(period)s) AS dated,
       EXISTS (SELECT 1 FROM erp_documents WHERE period = %(period)s) AS entered,
       EXISTS (SELECT 1 FROM erp_journals
               WHERE period = %(period)s AND source = 'document') AS posted,
       EXISTS (SELECT 1 FROM erp_stock_moves WHERE period = %(period)s) AS moved;
