-- document_journals_vs_lines --
-- Each posted document posting in the period (dated in it, or late: redated into it) has a journal that is its lines as posting writes them: per account, the lines' net amount on the document's store (a debit if positive, a credit if negative), in the month it posts in (posting_period) and on its store; a cost correction's item line as its kept split puts it: the on-hand share on 1300, the rest of the line's amount on 5000 (erp_value_corrections; a line without its split stays whole on 1300, and differs). The documents that differ, with what differs (first 5), and how many.
WITH docs AS (
    SELECT d.id, d.store_id, d.posting_period
    FROM erp_documents AS d
    WHERE d.posting_period = %(period)s AND d.status = 'posted'
),
expected AS (
    SELECT n.document_id, n.account_code, d.store_id,
           greatest(n.net, 0) AS debit, greatest(-n.net, 0) AS credit
    FROM (SELECT l.document_id, a.account_code, sum(a.net) AS net
          FROM erp_document_lines AS l
          LEFT JOIN erp_value_corrections AS v
                 ON v.document_id = l.document_id AND v.line_no = l.line_no
          CROSS JOIN LATERAL (VALUES
              (l.account_code, coalesce(v.on_hand_value, l.debit - l.credit)),
              ('5000', l.debit - l.credit - coalesce(v.on_hand_value, l.debit - l.credit))
          ) AS a (account_code, net)
          WHERE l.document_id IN (SELECT id FROM docs)
          GROUP BY l.document_id, a.account_code) AS n
    JOIN docs AS d ON d.id = n.document_id
    WHERE n.net <> 0
),
journals AS (
    SELECT d.id AS document_id, d.store_id AS document_store, d.posting_period, j.id, j.period,
           j.store_id
    FROM docs AS d JOIN erp_journals AS j ON j.source_key = 'document:' || d.id
),
actual AS (
    SELECT j.document_id, l.account_code, l.store_id, sum(l.debit) AS debit,
           sum(l.credit) AS credit
    FROM journals AS j JOIN erp_journal_lines AS l ON l.journal_id = j.id
    GROUP BY j.document_id, l.account_code, l.store_id
),
problems AS (
    SELECT coalesce(e.document_id, a.document_id) AS document_id,
           format('%%s on %%s: lines debit %%s credit %%s, journal debit %%s credit %%s',
                  coalesce(e.account_code, a.account_code),
                  coalesce((SELECT code FROM erp_stores WHERE id = coalesce(e.store_id, a.store_id)),
                           'no store'),
                  coalesce(e.debit, 0), coalesce(e.credit, 0),
                  coalesce(a.debit, 0), coalesce(a.credit, 0)) AS problem
    FROM expected AS e
    FULL JOIN actual AS a
      ON a.document_id = e.document_id AND a.account_code = e.account_code
     AND a.store_id IS NOT DISTINCT FROM e.store_id
    WHERE (coalesce(e.debit, 0), coalesce(e.credit, 0))
          <> (coalesce(a.debit, 0), coalesce(a.credit, 0))
    UNION ALL
    SELECT document_id, format('journal in %%s, document posts in %%s', period, posting_period)
    FROM journals WHERE period <> posting_period
    UNION ALL
    SELECT j.document_id, format('journal on store %%s, document on %%s',
                                 coalesce(s.code, 'none'), ds.code)
    FROM journals AS j
    LEFT JOIN erp_stores AS s ON s.id = j.store_id
    JOIN erp_stores AS ds ON ds.id = j.document_store
    WHERE j.store_id IS DISTINCT FROM j.document_store
),
per_document AS (
    SELECT document_id, string_agg(problem, '; ' ORDER BY problem) AS problems
    FROM problems GROUP BY document_id
)
SELECT d.number, s.code AS store, p.problems, count(*) OVER ()::int AS differ
FROM per_document AS p
JOIN erp_documents AS d ON d.id = p.document_id
JOIN erp_stores AS s ON s.id = d.store_id
ORDER BY d.id
LIMIT 5;

-- document_postings_vs_lines --
-- A posted document is what was posted: its fingerprint now (erp_document_fingerprints, the function posting used) equals the one kept when it was posted. The documents posting in the period that changed (first 5), and how many.
WITH now AS MATERIALIZED (
    SELECT f.document_id, f.fingerprint
    FROM erp_document_fingerprints(ARRAY(
        SELECT d.id FROM erp_documents AS d
        WHERE d.posting_period = %(period)s
          AND EXISTS (SELECT 1 FROM erp_document_postings AS p WHERE p.document_id = d.id)))
        AS f
)
-- met on the primary keys: the function's row estimate is a guess
SELECT d.number, s.code AS store, count(*) OVER ()::int AS differ
FROM now AS n
JOIN erp_document_postings AS k ON k.document_id = n.document_id
JOIN erp_documents AS d ON d.id = n.document_id
JOIN erp_stores AS s ON s.id = d.store_id
WHERE n.fingerprint <> k.fingerprint
ORDER BY d.id
LIMIT 5;

-- document_journals_vs_postings --
-- Both ways, one to one: every posted document posting in the period (dated in it, or redated into it) has its journal (source key document:<id>), the one its posting recorded, recorded in the month it posts in; every document journal of the period belongs to a posted document posting in it; a document recorded as posted is posted. The problems (first 5), and how many.
WITH docs AS (
    SELECT d.id, d.status, d.posting_period
    FROM erp_documents AS d
    WHERE d.posting_period = %(period)s
      AND (d.status = 'posted'
           OR EXISTS (SELECT 1 FROM erp_document_postings AS p WHERE p.document_id = d.id))
),
problems AS (
    SELECT d.id AS document_id, NULL::text AS journal, NULL::int AS journal_store_id,
           CASE
               WHEN d.status <> 'posted'
                   THEN format('recorded as posted in journal %%s but %%s', p.journal_id, d.status)
               WHEN j.id IS NULL AND p.document_id IS NULL
                   THEN 'posted without a journal or a record of its posting'
               WHEN j.id IS NULL
                   THEN format('its journal %%s (posted %%s) is gone', p.journal_id,
                               to_char(p.posted_at, 'YYYY-MM-DD HH24:MI:SS'))
               WHEN p.document_id IS NULL
                   THEN format('journal %%s has no record of the posting', j.id)
               WHEN p.journal_id <> j.id
                   THEN format('journal %%s is not the one posted (%%s)', j.id, p.journal_id)
               WHEN p.period <> d.posting_period
                   THEN format('recorded as posted in %%s, posts in %%s', p.period,
                               d.posting_period)
           END AS problem
    FROM docs AS d
    LEFT JOIN erp_journals AS j ON j.source_key = 'document:' || d.id
    LEFT JOIN erp_document_postings AS p ON p.document_id = d.id
    UNION ALL
    SELECT d.id, j.source_key, j.store_id,
           CASE
               WHEN d.id IS NULL THEN 'no such document'
               WHEN d.status <> 'posted' THEN format('its document is %%s', d.status)
               ELSE format('its document posts in %%s', d.posting_period)
           END
    FROM erp_journals AS j
    LEFT JOIN erp_documents AS d
           ON d.id = CASE WHEN j.source_key ~ '^document:[0-9]{1,18}$'
                          THEN substr(j.source_key, 10)::bigint END
    WHERE j.period = %(period)s AND j.source = 'document'
      AND (d.id IS NULL OR d.status <> 'posted' OR d.posting_period <> %(period)s)
)
SELECT coalesce(d.number, p.journal) AS document, s.code AS store,
       CASE WHEN p.journal IS NOT NULL THEN 'journal ' || p.journal || ': ' ELSE '' END
           || p.problem AS problem,
       count(*) OVER ()::int AS differ
FROM problems AS p
LEFT JOIN erp_documents AS d ON d.id = p.document_id
LEFT JOIN erp_stores AS s ON s.id = coalesce(d.store_id, p.journal_store_id)
WHERE p.problem IS NOT NULL
ORDER BY p.document_id NULLS FIRST, p.journal
LIMIT 5;

-- stock_moves_vs_document_lines --
-- Both ways, one to one: every item line of a posted document posting in the period (dated in it, or redated into it) has its stock moves as posting writes them (a sale, a return, a receipt at its unit cost, a count difference, a transfer's two sides; a cost correction's value-only move of its kept on-hand share, at the receipt's store, when not 0.00) in the period, on the document's date, store, item, quantity and value; every stock move of the period is one of them. The differences (first 5), and how many.
WITH docs AS (
    SELECT d.id, d.kind, d.store_id, d.counterpart_store_id, d.issued_on
    FROM erp_documents AS d
    WHERE d.posting_period = %(period)s AND d.status = 'posted'
      AND d.kind IN ('sales_invoice', 'credit_note', 'purchase_invoice', 'stock_count',
                     'stock_transfer', 'cost_correction')
),
expected AS (
    -- one move per item line at the document's store (a transfer's side out)...
    SELECT d.id AS document_id, l.line_no,
           CASE d.kind WHEN 'sales_invoice' THEN 'sale' WHEN 'credit_note' THEN 'return'
                       WHEN 'purchase_invoice' THEN 'receipt' WHEN 'stock_count' THEN 'adjustment'
                       ELSE 'transfer_out' END AS kind,
           d.store_id, l.item_id,
           CASE WHEN d.kind IN ('sales_invoice', 'stock_transfer') THEN -l.qty ELSE l.qty END
               AS qty,
           CASE WHEN d.kind = 'purchase_invoice' THEN l.unit_cost END AS unit_cost,
           CASE WHEN d.kind = 'stock_transfer' THEN d.counterpart_store_id END
               AS counterpart_store_id,
           d.issued_on AS moved_on, NULL::numeric AS value
    FROM docs AS d
    JOIN erp_document_lines AS l ON l.document_id = d.id AND l.item_id IS NOT NULL
    WHERE d.kind <> 'cost_correction'
    UNION ALL
    -- ... a cost correction's on-hand share, kept with its split ...
    SELECT d.id, l.line_no, 'revaluation', coalesce(v.store_id, d.store_id), l.item_id, 0, NULL,
           NULL, d.issued_on,
           v.on_hand_value
    FROM docs AS d
    JOIN erp_document_lines AS l ON l.document_id = d.id AND l.item_id IS NOT NULL
    LEFT JOIN erp_value_corrections AS v
           ON v.document_id = l.document_id AND v.line_no = l.line_no
    WHERE d.kind = 'cost_correction' AND coalesce(v.on_hand_value, 1) <> 0
    UNION ALL
    -- ... and a transfer's side in, at the receiving store
    SELECT d.id, l.line_no, 'transfer_in', d.counterpart_store_id, l.item_id, l.qty, NULL,
           d.store_id, d.issued_on, NULL
    FROM docs AS d
    JOIN erp_document_lines AS l ON l.document_id = d.id AND l.item_id IS NOT NULL
    WHERE d.kind = 'stock_transfer'
),
actual AS (
    SELECT document_id, line_no, kind, store_id, item_id, qty, unit_cost, counterpart_store_id,
           moved_on, value, id
    FROM erp_stock_moves WHERE period = %(period)s
),
differ AS (
    SELECT coalesce(e.document_id, a.document_id) AS document_id,
           coalesce(e.store_id, a.store_id) AS store_id,
           coalesce(e.item_id, a.item_id) AS item_id,
           coalesce(e.line_no, a.line_no) AS line_no,
           coalesce(e.kind, a.kind) AS kind,
           CASE
               WHEN a.kind IS NULL THEN format('no %%s move of qty %%s', e.kind, e.qty)
               WHEN e.kind IS NULL AND a.document_id IS NULL
                   THEN format('move %%s of qty %%s has no document', a.id, a.qty)
               WHEN e.kind IS NULL
                   THEN format('move %%s of qty %%s has no line of a posted document posting '
                               'in %%s', a.id, a.qty, %(period)s)
               ELSE format('move %%s differs: %%s', a.id, concat_ws(', ',
                   CASE WHEN a.store_id <> e.store_id
                        THEN format('store id %%s, line''s %%s', a.store_id, e.store_id) END,
                   CASE WHEN a.item_id <> e.item_id
                        THEN format('item id %%s, line''s %%s', a.item_id, e.item_id) END,
                   CASE WHEN a.qty <> e.qty THEN format('qty %%s, line''s %%s', a.qty, e.qty) END,
                   CASE WHEN a.unit_cost IS DISTINCT FROM e.unit_cost
                        THEN format('unit cost %%s, line''s %%s', a.unit_cost, e.unit_cost) END,
                   CASE WHEN a.value IS DISTINCT FROM e.value
                        THEN format('value %%s, split''s %%s', a.value,
                                    coalesce(e.value::text, 'none')) END,
                   CASE WHEN a.counterpart_store_id IS DISTINCT FROM e.counterpart_store_id
                        THEN format('counterpart store id %%s, document''s %%s',
                                    a.counterpart_store_id, e.counterpart_store_id) END,
                   CASE WHEN a.moved_on <> e.moved_on
                        THEN format('moved on %%s, dated %%s', to_char(a.moved_on, 'YYYY-MM-DD'),
                                    to_char(e.moved_on, 'YYYY-MM-DD')) END))
           END AS problem
    FROM expected AS e
    FULL JOIN actual AS a
      ON a.document_id = e.document_id AND a.line_no = e.line_no AND a.kind = e.kind
    WHERE a.kind IS NULL OR e.kind IS NULL
       OR (a.store_id, a.item_id, a.qty, a.moved_on) <> (e.store_id, e.item_id, e.qty, e.moved_on)
       OR a.unit_cost IS DISTINCT FROM e.unit_cost
       OR a.value IS DISTINCT FROM e.value
       OR a.counterpart_store_id IS DISTINCT FROM e.counterpart_store_id
)
SELECT d.number AS document, x.line_no, x.kind, s.code AS store, i.sku, x.problem,
       count(*) OVER ()::int AS differ
FROM differ AS x
LEFT JOIN erp_documents AS d ON d.id = x.document_id
JOIN erp_stores AS s ON s.id = x.store_id
JOIN erp_items AS i ON i.id = x.item_id
ORDER BY x.document_id NULLS FIRST, x.line_no, x.kind
LIMIT 5;

-- item_costs_recomputed --
-- Each item cost of the period is recomputed from its sources: opening from erp_opening_balances, receipts and transfers from the stock moves (each receipt at round(qty x unit cost, 2), each transfer at round(|qty| x the sender's solved average, 2)), the average as costing finds it (the period's solved average of an item that moves between stores, else (opening + receipts) / quantity in to 4 decimals, else the opening average, else the standard cost kept with the costs), COGS round(issued x average, 2), closing the remainder; every figure equal to its stored scale. A solved average satisfies its equation within its rounding. The store/items that differ (first 5), and how many.
WITH costed AS (
    SELECT store_id FROM erp_store_periods WHERE period = %(period)s AND costed_at IS NOT NULL
),
moves AS (
    SELECT m.store_id, m.item_id,
           coalesce(sum(m.qty) FILTER (WHERE m.kind = 'receipt'), 0) AS rq,
           coalesce(sum(coalesce(m.value, round(m.qty * m.unit_cost, 2)))
                        FILTER (WHERE m.kind IN ('receipt', 'revaluation')), 0) AS rv,
           coalesce(sum(m.qty) FILTER (WHERE m.kind = 'transfer_in'), 0) AS tq,
           coalesce(sum(round(m.qty * sa.average_cost, 2))
               FILTER (WHERE m.kind = 'transfer_in'), 0) AS tv,
           -- what the transfers in bring at the senders' rounded averages (the solve's check)
           coalesce(sum(m.qty * sa.average_cost) FILTER (WHERE m.kind = 'transfer_in'), 0)
               AS t_exact,
           coalesce(-sum(m.qty) FILTER (WHERE m.kind IN ('sale', 'return', 'adjustment')), 0)
               AS iq,
           coalesce(-sum(m.qty) FILTER (WHERE m.kind = 'transfer_out'), 0) AS xq,
           coalesce(sum(round(-m.qty * sa.average_cost, 2))
               FILTER (WHERE m.kind = 'transfer_out'), 0) AS xv,
           count(*) FILTER (WHERE m.kind IN ('transfer_in', 'transfer_out')
                            AND sa.average_cost IS NULL) AS unsolved
    FROM erp_stock_moves AS m
    JOIN costed AS k ON k.store_id = m.store_id
    LEFT JOIN erp_item_averages AS sa
           ON m.kind IN ('transfer_in', 'transfer_out')
          AND sa.period = m.period AND sa.item_id = m.item_id
          AND sa.store_id = CASE WHEN m.kind = 'transfer_in' THEN m.counterpart_store_id
                                 ELSE m.store_id END
    WHERE m.period = %(period)s
    GROUP BY m.store_id, m.item_id
),
opening AS (
    SELECT o.store_id, o.item_id, o.qty, o.value
    FROM erp_opening_balances AS o JOIN costed AS k ON k.store_id = o.store_id
    WHERE o.period = %(period)s
),
figures AS (
    SELECT coalesce(c.store_id, m.store_id, o.store_id) AS store_id,
           coalesce(c.item_id, m.item_id, o.item_id) AS item_id,
           c.store_id IS NOT NULL AS stored, coalesce(m.unsolved, 0) AS unsolved,
           coalesce(o.qty, 0) AS oq, coalesce(o.value, 0) AS ov,
           coalesce(m.rq, 0) AS rq, coalesce(m.rv, 0) AS rv,
           coalesce(m.tq, 0) AS tq, coalesce(m.tv, 0) AS tv, coalesce(m.t_exact, 0) AS t_exact,
           coalesce(m.iq, 0) AS iq, coalesce(m.xq, 0) AS xq, coalesce(m.xv, 0) AS xv,
           c.opening_qty, c.opening_value, c.receipt_qty, c.receipt_value, c.transfer_in_qty,
           c.transfer_in_value, c.average_cost, c.average_from, c.issue_qty, c.cogs_value,
           c.transfer_out_qty, c.transfer_out_value, c.closing_qty, c.closing_value,
           c.standard_cost
    FROM (SELECT * FROM erp_item_costs WHERE period = %(period)s) AS c
    FULL JOIN moves AS m ON m.store_id = c.store_id AND m.item_id = c.item_id
    FULL JOIN opening AS o
      ON o.store_id = coalesce(c.store_id, m.store_id)
     AND o.item_id = coalesce(c.item_id, m.item_id)
),
averaged AS (
    SELECT f.*, a.average_cost AS solved_cost, a.average_from AS solved_from,
           coalesce(a.average_cost,
               CASE WHEN f.oq + f.rq + f.tq > 0
                        THEN round((f.ov + f.rv)::numeric(38,20) / (f.oq + f.rq + f.tq), 4)
                    WHEN f.oq > 0 THEN round(f.ov::numeric(38,20) / f.oq, 4)
                    ELSE f.standard_cost END) AS avg_cost,
           coalesce(a.average_from,
               CASE WHEN f.oq + f.rq + f.tq > 0 THEN 'solved'
                    WHEN f.oq > 0 THEN 'fallback_opening'
                    ELSE 'fallback_standard' END) AS avg_from
    FROM figures AS f
    LEFT JOIN erp_item_averages AS a
           ON a.period = %(period)s AND a.item_id = f.item_id AND a.store_id = f.store_id
),
recomputed AS (
    SELECT v.*, round(v.iq * v.avg_cost, 2) AS cogs,
           v.oq + v.rq + v.tq - v.iq - v.xq AS cq,
           v.ov + v.rv + v.tv - round(v.iq * v.avg_cost, 2) - v.xv AS cv,
           -- a * A = opening + receipts + transfers in at the senders' averages, each rounded
           -- to 4 decimals: off by at most 0.00005 x (A + transfers in qty)
           v.solved_from = 'solved' AND v.oq + v.rq + v.tq > 0
           AND abs(v.solved_cost * (v.oq + v.rq + v.tq) - (v.ov + v.rv + v.t_exact))
               > 0.00005 * (v.oq + v.rq + v.tq + v.tq) AS unsolved_equation
    FROM averaged AS v
),
flagged AS (
    -- one comparison per row; only the rows that differ are spelled out
    SELECT r.* FROM recomputed AS r
    WHERE NOT r.stored OR r.unsolved > 0 OR r.unsolved_equation
       OR r.average_from IS DISTINCT FROM r.avg_from
       OR (r.opening_qty, r.opening_value, r.receipt_qty, r.receipt_value, r.transfer_in_qty,
           r.transfer_in_value, r.average_cost, r.issue_qty, r.cogs_value, r.transfer_out_qty,
           r.transfer_out_value, r.closing_qty, r.closing_value)
          IS DISTINCT FROM (r.oq, r.ov, r.rq, r.rv, r.tq, r.tv, r.avg_cost, r.iq, r.cogs, r.xq,
                            r.xv, r.cq, r.cv)
),
problems AS (
    SELECT v.store_id, v.item_id, concat_ws('; ',
        CASE WHEN NOT v.stored THEN 'moved or opened but no item cost' END,
        CASE WHEN v.stored THEN (
            SELECT string_agg(format('%%s %%s != %%s', x.name, x.stored, x.recomputed), ', '
                              ORDER BY x.n)
            FROM (VALUES
                (1, 'opening qty', v.opening_qty, v.oq),
                (2, 'opening value', v.opening_value, v.ov),
                (3, 'receipt qty', v.receipt_qty, v.rq),
                (4, 'receipt value', v.receipt_value, v.rv),
                (5, 'transfer in qty', v.transfer_in_qty, v.tq),
                (6, 'transfer in value', v.transfer_in_value, v.tv),
                (7, 'average cost', v.average_cost, v.avg_cost),
                (8, 'issue qty', v.issue_qty, v.iq),
                (9, 'COGS', v.cogs_value, v.cogs),
                (10, 'transfer out qty', v.transfer_out_qty, v.xq),
                (11, 'transfer out value', v.transfer_out_value, v.xv),
                (12, 'closing qty', v.closing_qty, v.cq),
                (13, 'closing value', v.closing_value, v.cv)
            ) AS x (n, name, stored, recomputed)
            WHERE x.stored IS DISTINCT FROM x.recomputed) END,
        CASE WHEN v.stored AND v.average_from IS DISTINCT FROM v.avg_from
             THEN format('average from %%s != %%s', v.average_from, v.avg_from) END,
        CASE WHEN v.unsolved > 0
             THEN format('%%s transfer(s) without a solved average', v.unsolved) END,
        CASE WHEN v.unsolved_equation
             THEN format('solved average %%s x quantity in %%s != opening + receipts + '
                         'transfers in %%s beyond rounding', v.solved_cost,
                         v.oq + v.rq + v.tq, v.ov + v.rv + v.t_exact) END
    ) AS problem
    FROM flagged AS v
)
SELECT s.code AS store, i.sku, p.problem, count(*) OVER ()::int AS differ
FROM problems AS p
JOIN erp_stores AS s ON s.id = p.store_id
JOIN erp_items AS i ON i.id = p.item_id
ORDER BY s.code, i.sku
LIMIT 5;

-- item_costs_standard_cost --
-- The standard cost the period used is kept with its item costs: every item cost carries one, an item has one in every store of the period (a store's that differs from the item's usual one is named), and an average that fell back to the standard cost is it (in the solve too). How many carry it, how many fell back, how many differ from erp_items today (kept as used, not a fault), and the item costs that break it (first 5).
WITH costs AS (
    SELECT c.store_id, c.item_id, c.standard_cost, c.average_cost, c.average_from,
           i.standard_cost AS today, a.average_cost AS solved_cost, a.average_from AS solved_from
    FROM erp_item_costs AS c
    JOIN erp_items AS i ON i.id = c.item_id
    LEFT JOIN erp_item_averages AS a
           ON a.period = c.period AND a.item_id = c.item_id AND a.store_id = c.store_id
    WHERE c.period = %(period)s
),
per_item AS (
    SELECT item_id, mode() WITHIN GROUP (ORDER BY standard_cost) AS usual,
           count(DISTINCT standard_cost) AS kinds
    FROM costs GROUP BY item_id
),
broken AS (
    SELECT k.store_id, k.item_id,
           CASE WHEN k.standard_cost IS NULL THEN 'no standard cost kept'
                WHEN p.kinds > 1 AND k.standard_cost <> p.usual
                    THEN format('standard cost %%s kept, %%s in its other stores (a period '
                                'costs one standard cost per item)', k.standard_cost, p.usual)
                WHEN k.average_from = 'fallback_standard' AND k.average_cost <> k.standard_cost
                    THEN format('average %%s fell back to the standard cost but it is %%s',
                                k.average_cost, k.standard_cost)
                ELSE format('the solve fell back to the standard cost %%s, the costs keep %%s',
                            k.solved_cost, k.standard_cost)
           END AS problem
    FROM costs AS k JOIN per_item AS p ON p.item_id = k.item_id
    WHERE k.standard_cost IS NULL
       OR (p.kinds > 1 AND k.standard_cost <> p.usual)
       OR (k.average_from = 'fallback_standard' AND k.average_cost <> k.standard_cost)
       OR (k.solved_from = 'fallback_standard' AND k.solved_cost <> k.standard_cost)
)
SELECT (SELECT count(*) FROM costs)::int AS costs,
       (SELECT count(*) FROM costs WHERE standard_cost IS NOT NULL)::int AS kept,
       (SELECT count(*) FROM costs WHERE average_from = 'fallback_standard')::int AS fell_back,
       (SELECT count(*) FROM costs WHERE standard_cost <> today)::int AS changed_since,
       (SELECT count(*) FROM broken)::int AS broken,
       (SELECT coalesce(jsonb_agg(e ORDER BY e), '[]') FROM (
            SELECT s.code || ' ' || i.sku || ': ' || b.problem AS e
            FROM broken AS b
            JOIN erp_stores AS s ON s.id = b.store_id
            JOIN erp_items AS i ON i.id = b.item_id
            ORDER BY 1 LIMIT 5) AS x) AS examples;

-- jit_select --
-- The session's JIT setting, restored after the ties (jit_set).
SELECT current_setting('jit') AS jit;

-- jit_set --
-- The ties are planned with inflated row estimates (moves and lines joined to what they should be): LLVM's optimisation then costs seconds for statements that run in one or two; off while they run, then back to what it was.
SELECT set_config('jit', %(jit)s, false);
