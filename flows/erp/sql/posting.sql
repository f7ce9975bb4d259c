-- document_select_unposted_chunks --
-- Chunks are disjoint, ordered id ranges over the period's unposted documents (partial index erp_documents_unposted), so every document falls in exactly one chunk.
SELECT min(id) AS first_id, max(id) AS last_id, count(*) AS count
FROM (
    SELECT id, (row_number() OVER (ORDER BY id) - 1) / %(chunk_size)s AS chunk
    FROM erp_documents
    WHERE period = %(period)s AND status = 'unposted'
) AS numbered
GROUP BY chunk
ORDER BY chunk;

-- document_post_or_reject_many_if_unposted --
-- A document is posted at most once (the caller holds the period's row FOR SHARE, so it is not closed): its journal's source_key 'document:<id>' is unique, only documents whose journal this statement inserted are marked posted, and every UPDATE restates status = 'unposted'.
WITH docs AS (
    -- row locks, taken in id order, serialise two postings of the same range
    SELECT id, number, period, store_id, memo
    FROM erp_documents
    WHERE period = %(period)s AND id BETWEEN %(first_id)s AND %(last_id)s AND status = 'unposted'
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
               FILTER (WHERE l.debit > 0 AND l.credit > 0) AS two_sided
    FROM docs AS d
    LEFT JOIN erp_document_lines AS l ON l.document_id = d.id
    LEFT JOIN erp_accounts AS a ON a.code = l.account_code
    GROUP BY d.id
),
verdict AS (
    SELECT d.id, d.number, d.period, d.store_id, d.memo,
           -- every problem found, in a fixed order; NULL when the document is valid
           nullif(array_to_string(ARRAY[
               CASE
                   WHEN t.lines = 0 THEN 'no lines'
                   WHEN t.debit <> t.credit
                       THEN format('unbalanced: debit %%s != credit %%s', t.debit, t.credit)
                   WHEN t.debit = 0 THEN 'zero amount: debit and credit are both 0.00'
               END,
               t.unknown_accounts,
               t.two_sided
           ], '; '), '') AS reason
    FROM docs AS d
    JOIN per_doc AS t ON t.id = d.id
),
journals AS (
    INSERT INTO erp_journals (period, store_id, source, source_key, memo)
    SELECT period, store_id, 'document', 'document:' || id, memo
    FROM verdict
    WHERE reason IS NULL
    ORDER BY id
    ON CONFLICT (source_key) DO NOTHING
    RETURNING id AS journal_id, source_key
),
posting AS (
    SELECT j.journal_id, v.id, v.store_id
    FROM journals AS j
    JOIN verdict AS v ON j.source_key = 'document:' || v.id
),
journal_lines AS (
    INSERT INTO erp_journal_lines (journal_id, line_no, account_code, store_id, debit, credit)
    SELECT p.journal_id, l.line_no, l.account_code, p.store_id, l.debit, l.credit
    FROM posting AS p
    JOIN erp_document_lines AS l ON l.document_id = p.id
    RETURNING debit, credit
),
posted AS (
    UPDATE erp_documents AS d
    SET status = 'posted'
    FROM posting AS p
    WHERE d.id = p.id AND d.status = 'unposted'
    RETURNING d.id
),
rejected AS (
    UPDATE erp_documents AS d
    SET status = 'rejected', reject_reason = v.reason
    FROM verdict AS v
    WHERE d.id = v.id AND v.reason IS NOT NULL AND d.status = 'unposted'
    RETURNING d.id, d.number, v.reason
)
SELECT (SELECT count(*) FROM posted) AS posted,
       (SELECT count(*) FROM rejected) AS rejected,
       (SELECT coalesce(sum(debit), 0) FROM journal_lines) AS debit,
       (SELECT coalesce(sum(credit), 0) FROM journal_lines) AS credit,
       (SELECT coalesce(jsonb_agg(jsonb_build_object(
                   'id', r.id, 'number', r.number, 'reason', r.reason) ORDER BY r.id), '[]')
        FROM (SELECT * FROM rejected ORDER BY id LIMIT %(max_rejections)s) AS r) AS rejections;

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
