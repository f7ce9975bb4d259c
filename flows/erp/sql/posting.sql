-- document_select_unposted_chunks --
-- Chunks are disjoint, ordered id ranges over the unposted documents posting in the period (posting_period: dated in it, or redated into it; partial index erp_documents_unposted_by_posting), so every document falls in exactly one chunk; one dated in another month waits for that month's posting.
SELECT min(id) AS first_id, max(id) AS last_id, count(*) AS count
FROM (
    SELECT id, (row_number() OVER (ORDER BY id) - 1) / %(chunk_size)s AS chunk
    FROM erp_documents
    WHERE posting_period = %(period)s AND status = 'unposted'
) AS numbered
GROUP BY chunk
ORDER BY chunk;

-- documents_lock_and_judge --
-- Every unposted document of the range posting in the period (dated in it, or redated into it), locked in id order (two postings of the same range serialise), with every problem found in a fixed order (NULL when valid) and, for a valid one, its journal: the net amount per account, on the document's store. Amounts to Inventory (1300) come only from stock received on a purchase invoice, or from a cost correction of such a receipt of a closed period (an amount per item of the receipt, no quantity: posting splits it, flows/erp/value_corrections.py); everything else in 1300 is costing's.
WITH docs AS (
    SELECT id, number, kind, period, store_id, counterpart_store_id, memo, corrects_id
    FROM erp_documents
    WHERE posting_period = %(period)s AND id BETWEEN %(first_id)s AND %(last_id)s
      AND status = 'unposted'
    ORDER BY id
    FOR UPDATE
),
per_doc AS (
    SELECT d.id,
           count(l.line_no) AS lines,
           coalesce(sum(l.debit), 0) AS debit,
           coalesce(sum(l.credit), 0) AS credit,
           string_agg(format('unknown account %%s on line %%s', l.account_code, l.line_no), '; '
                      ORDER BY l.line_no)
               FILTER (WHERE l.line_no IS NOT NULL AND a.code IS NULL) AS unknown_accounts,
           string_agg(format('line %%s has both debit %%s and credit %%s',
                             l.line_no, l.debit, l.credit), '; ' ORDER BY l.line_no)
               FILTER (WHERE l.debit > 0 AND l.credit > 0) AS two_sided,
           string_agg(format('line %%s: %%s', l.line_no, p.problem), '; ' ORDER BY l.line_no)
               FILTER (WHERE p.problem IS NOT NULL) AS line_problems
    FROM docs AS d
    LEFT JOIN erp_document_lines AS l ON l.document_id = d.id
    LEFT JOIN erp_accounts AS a ON a.code = l.account_code
    LEFT JOIN LATERAL (SELECT CASE
        WHEN l.line_no IS NULL THEN NULL
        -- stock documents: items and quantities, no amounts (costing values them)
        WHEN d.kind IN ('stock_transfer', 'stock_count') AND l.item_id IS NULL
            THEN 'a stock line names no item'
        WHEN d.kind IN ('stock_transfer', 'stock_count') AND (l.debit <> 0 OR l.credit <> 0)
            THEN format('a %%s carries no amount (costing values it), got debit %%s credit %%s',
                        replace(d.kind, '_', ' '), l.debit, l.credit)
        WHEN d.kind = 'stock_transfer' AND NOT coalesce(l.qty > 0, false)
            THEN format('quantity transferred must be > 0, got %%s', coalesce(l.qty::text, 'none'))
        WHEN d.kind = 'stock_count' AND coalesce(l.qty, 0) = 0
            THEN 'a count difference must not be 0 or missing'
        WHEN d.kind IN ('stock_transfer', 'stock_count') THEN NULL
        -- a cost correction: per item of its receipt an amount on 1300, no quantity
        WHEN d.kind = 'cost_correction' AND l.item_id IS NOT NULL AND l.account_code <> '1300'
            THEN format('a value correction of an item goes to 1300 (Inventory), not %%s',
                        l.account_code)
        WHEN d.kind = 'cost_correction' AND l.item_id IS NOT NULL AND coalesce(l.qty, 0) <> 0
            THEN format('a cost correction carries no quantity, got %%s', l.qty)
        WHEN d.kind = 'cost_correction' AND l.item_id IS NOT NULL AND l.debit = l.credit
            THEN 'zero amount: a value correction of an item must not be 0'
        WHEN d.kind = 'cost_correction' AND l.item_id IS NOT NULL AND d.corrects_id IS NOT NULL
             AND NOT EXISTS (SELECT 1 FROM erp_document_lines AS r
                             WHERE r.document_id = d.corrects_id AND r.item_id = l.item_id)
            THEN format('item %%s is not on receipt %%s',
                        (SELECT sku FROM erp_items WHERE id = l.item_id),
                        (SELECT number FROM erp_documents WHERE id = d.corrects_id))
        WHEN d.kind = 'cost_correction' AND l.item_id IS NOT NULL THEN NULL
        -- invoices and credit notes
        WHEN l.item_id IS NOT NULL AND NOT coalesce(l.qty > 0, false)
            THEN format('item quantity must be > 0, got %%s', coalesce(l.qty::text, 'none'))
        WHEN l.item_id IS NOT NULL AND d.kind = 'purchase_invoice' AND l.account_code <> '1300'
            THEN format('stock received goes to 1300 (Inventory), not %%s', l.account_code)
        WHEN l.item_id IS NOT NULL AND d.kind = 'purchase_invoice'
             AND NOT coalesce(l.unit_cost >= 0, false)
            THEN 'a purchase line needs a unit cost >= 0'
        WHEN l.item_id IS NOT NULL AND d.kind = 'purchase_invoice'
             AND l.debit <> round(l.qty * l.unit_cost, 2)
            THEN format('debit %%s != quantity %%s x unit cost %%s = %%s',
                        l.debit, l.qty, l.unit_cost, round(l.qty * l.unit_cost, 2))
        WHEN l.account_code IN ('1300', '1350')
             AND NOT (d.kind = 'purchase_invoice' AND l.item_id IS NOT NULL)
            THEN format('%%s is kept by stock moves and costing: a %%s cannot post to it',
                        l.account_code, replace(d.kind, '_', ' '))
        END AS problem) AS p ON true
    GROUP BY d.id
),
verdict AS (
    SELECT d.id, d.number, d.kind, d.store_id, d.memo,
           nullif(array_to_string(ARRAY[
               CASE
                   WHEN t.lines = 0 THEN 'no lines'
                   WHEN d.kind IN ('stock_transfer', 'stock_count') THEN NULL
                   WHEN t.debit <> t.credit
                       THEN format('unbalanced: debit %%s != credit %%s', t.debit, t.credit)
                   WHEN t.debit = 0 THEN 'zero amount: debit and credit are both 0.00'
               END,
               CASE
                   WHEN d.kind <> 'stock_transfer' THEN NULL
                   WHEN d.counterpart_store_id IS NULL THEN 'a stock transfer names no receiving store'
                   WHEN d.counterpart_store_id = d.store_id THEN 'a stock transfer to its own store'
               END,
               -- a cost correction corrects a posted purchase invoice of a closed period
               CASE
                   WHEN d.kind <> 'cost_correction' THEN NULL
                   WHEN d.corrects_id IS NULL THEN 'a cost correction names no receipt'
                   WHEN r.kind <> 'purchase_invoice'
                       THEN format('%%s is not a posted purchase invoice (a %%s, %%s)', r.number,
                                   replace(r.kind, '_', ' '), r.status)
                   WHEN rp.status IS DISTINCT FROM 'closed'
                       THEN format('receipt %%s posts in %%s, an open period: correct the receipt '
                                   'itself (requeue it if it was rejected) instead', r.number,
                                   r.posting_period)
                   WHEN r.status <> 'posted'
                       THEN format('%%s is not a posted purchase invoice (a %%s, %%s)', r.number,
                                   replace(r.kind, '_', ' '), r.status)
                   WHEN r.store_id <> d.store_id
                       THEN format('receipt %%s is store %%s''s stock, this correction store %%s''s',
                                   r.number, (SELECT code FROM erp_stores WHERE id = r.store_id),
                                   (SELECT code FROM erp_stores WHERE id = d.store_id))
               END,
               t.unknown_accounts,
               t.two_sided,
               t.line_problems
           ], '; '), '') AS reason
    FROM docs AS d
    JOIN per_doc AS t ON t.id = d.id
    LEFT JOIN erp_documents AS r ON r.id = d.corrects_id
    LEFT JOIN erp_periods AS rp ON rp.period = r.posting_period
)
SELECT v.id, v.number, v.kind, v.store_id, v.memo, v.reason,
       CASE WHEN v.reason IS NULL THEN coalesce((
           SELECT jsonb_agg(jsonb_build_object('account', n.account_code, 'amount', n.amount::text)
                            ORDER BY n.account_code)
           FROM (SELECT l.account_code, sum(l.debit) - sum(l.credit) AS amount
                 FROM erp_document_lines AS l
                 WHERE l.document_id = v.id
                 GROUP BY l.account_code
                 HAVING sum(l.debit) - sum(l.credit) <> 0) AS n), '[]') END AS amounts
FROM verdict AS v
ORDER BY v.id;

-- documents_mark_and_move_if_unposted --
-- The documents whose journal this transaction posted become posted and write their stock moves in the month they post in (posting_period: the month they are dated in, or the one a late document was redated into; one per item line; a transfer's two sides, out at the sender and in at the receiver, from the same line); the rejected ones keep their reasons. Every UPDATE restates status = 'unposted' and a move is unique per (document, line, kind), so nothing happens twice; the numbers of the documents marked here (posted or rejected) are returned for the job's tags.
WITH posted AS (
    UPDATE erp_documents AS d
    SET status = 'posted'
    WHERE d.id = ANY(%(posted)s::bigint[]) AND d.status = 'unposted'
    RETURNING d.id, d.number, d.kind, d.posting_period AS period, d.store_id, d.counterpart_store_id,
              d.issued_on
),
lines AS (
    SELECT p.*, l.line_no, l.item_id, l.qty, l.unit_cost
    FROM posted AS p
    JOIN erp_document_lines AS l ON l.document_id = p.id AND l.item_id IS NOT NULL
),
moves AS (
    INSERT INTO erp_stock_moves (period, store_id, item_id, moved_on, kind, qty, unit_cost,
                                 counterpart_store_id, document_id, line_no)
    SELECT lines.period, m.at_store, lines.item_id, lines.issued_on, m.kind, m.qty, m.unit_cost,
           m.counterpart, lines.id, lines.line_no
    FROM lines
    CROSS JOIN LATERAL (VALUES
        ('sale', -qty, NULL::numeric, NULL::integer, kind = 'sales_invoice', store_id),
        ('return', qty, NULL, NULL, kind = 'credit_note', store_id),
        ('receipt', qty, unit_cost, NULL, kind = 'purchase_invoice', store_id),
        ('adjustment', qty, NULL, NULL, kind = 'stock_count', store_id),
        ('transfer_out', -qty, NULL, counterpart_store_id, kind = 'stock_transfer', store_id),
        ('transfer_in', qty, NULL, store_id, kind = 'stock_transfer', counterpart_store_id)
    ) AS m (kind, qty, unit_cost, counterpart, applies, at_store)
    WHERE m.applies
    ON CONFLICT (document_id, line_no, kind) DO NOTHING
    RETURNING 1
),
-- what was posted, kept for the checks (flows/erp/ties.py): the fingerprint of each document
-- posted here, its journal and that journal's period
kept AS (
    INSERT INTO erp_document_postings (document_id, journal_id, period, fingerprint)
    SELECT f.document_id, j.id, j.period, f.fingerprint
    FROM erp_document_fingerprints(ARRAY(SELECT id FROM posted)) AS f
    JOIN erp_journals AS j ON j.source_key = 'document:' || f.document_id
    ON CONFLICT (document_id) DO NOTHING
    RETURNING 1
),
rejected AS (
    UPDATE erp_documents AS d
    SET status = 'rejected', reject_reason = r.reason
    FROM unnest(%(rejected)s::bigint[], %(reasons)s::text[]) AS r (id, reason)
    WHERE d.id = r.id AND d.status = 'unposted'
    RETURNING d.id, d.number
)
SELECT (SELECT count(*) FROM posted)::int AS posted,
       (SELECT count(*) FROM moves)::int AS moves,
       (SELECT count(*) FROM rejected)::int AS rejected,
       ARRAY(SELECT number FROM posted UNION ALL SELECT number FROM rejected) AS numbers;

-- journal_select_document_totals --
-- Double entry: every document journal of the period balances and all of them together do; this query counts the ones that do not.
SELECT count(*) AS journals,
       count(*) FILTER (WHERE debit <> credit) AS unbalanced,
       coalesce(sum(debit), 0) AS debit,
       coalesce(sum(credit), 0) AS credit
FROM (
    SELECT j.id, coalesce(sum(l.debit), 0) AS debit, coalesce(sum(l.credit), 0) AS credit
    FROM erp_journals AS j
    LEFT JOIN erp_journal_lines AS l ON l.journal_id = j.id
    WHERE j.period = %(period)s AND j.source = 'document'
    GROUP BY j.id
) AS per_journal;
