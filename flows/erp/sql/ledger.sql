-- journals_post_if_absent --
-- One journal per source key, ever (the unique key): a journal whose key is posted already is skipped with its lines, so a retried step or a second job posts nothing twice; the deferred trigger erp_journal_balanced refuses, at commit, any journal whose lines do not balance.
WITH wanted AS (
    SELECT * FROM unnest(%(periods)s::text[], %(stores)s::int[], %(sources)s::text[],
                         %(keys)s::text[], %(memos)s::text[])
        AS w (period, store_id, source, source_key, memo)
),
inserted AS (
    INSERT INTO erp_journals (period, store_id, source, source_key, memo)
    SELECT period, store_id, source, source_key, memo FROM wanted
    ON CONFLICT (source_key) DO NOTHING
    RETURNING id, source_key
),
lines AS (
    INSERT INTO erp_journal_lines (journal_id, line_no, account_code, store_id, debit, credit)
    SELECT i.id, l.line_no, l.account_code, l.store_id, l.debit, l.credit
    FROM inserted AS i
    JOIN unnest(%(line_keys)s::text[], %(line_nos)s::int[], %(accounts)s::text[],
                %(line_stores)s::int[], %(debits)s::numeric[], %(credits)s::numeric[])
        AS l (source_key, line_no, account_code, store_id, debit, credit)
      ON l.source_key = i.source_key
    RETURNING journal_id
)
SELECT (SELECT count(*) FROM inserted)::int AS journals,
       (SELECT count(*) FROM lines)::int AS lines,
       (SELECT coalesce(jsonb_agg(source_key), '[]') FROM inserted) AS posted;

-- journal_ids_by_key --
-- The journals of these source keys, posted now or by an earlier run.
SELECT id, source_key FROM erp_journals WHERE source_key = ANY(%(keys)s::text[]);
