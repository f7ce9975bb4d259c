-- What was posted, kept, so the checks tie every figure to its source (issue 35).
--
-- erp_document_postings: per posted document, the fingerprint of what was
-- posted (erp_document_fingerprints: its kind, store, counterpart, date and
-- every line's account, item, quantity, unit cost, debit and credit), the
-- journal posting wrote for it and that journal's period. Written by
-- posting in the statement that marks the document posted
-- (flows/erp/sql/posting.sql), read by `engine books check`
-- (flows/erp/ties.py): a document edited after posting, a journal deleted
-- or replaced, is named there.
--
-- erp_item_costs.standard_cost: the standard cost the period's costing read,
-- kept with the item costs, so a closed period's exports never change when
-- an items migration changes erp_items.standard_cost afterwards.

-- One fingerprint, for posting and the check alike. Dates as text through
-- to_char (not ::text, which follows DateStyle); a NULL field is '' and
-- every field has its place, so no two different documents read the same.
-- The ids are unnested and met on the primary keys: a chunk's 500 documents
-- or a period's 200,000 are probes, never a scan of every document.
CREATE FUNCTION erp_document_fingerprints(ids bigint[])
RETURNS TABLE (document_id bigint, fingerprint text)
LANGUAGE sql STABLE AS $$
    SELECT d.id,
           encode(sha256(convert_to(
               format('%s|%s|%s|%s|', d.kind, d.store_id, d.counterpart_store_id,
                      to_char(d.issued_on, 'YYYY-MM-DD'))
               || coalesce(string_agg(
                      format('%s,%s,%s,%s,%s,%s,%s', l.line_no, l.account_code, l.item_id,
                             l.qty, l.unit_cost, l.debit, l.credit),
                      ';' ORDER BY l.line_no), ''),
               'UTF8')), 'hex')
    FROM (SELECT DISTINCT id FROM unnest(ids) AS u (id)) AS k
    JOIN erp_documents AS d ON d.id = k.id
    LEFT JOIN erp_document_lines AS l ON l.document_id = d.id
    GROUP BY d.id
$$;

CREATE TABLE erp_document_postings (
    document_id  bigint      PRIMARY KEY REFERENCES erp_documents (id),
    journal_id   bigint      NOT NULL,  -- no foreign key: a deleted journal is the check's to name
    period       text        NOT NULL REFERENCES erp_periods (period),
    fingerprint  text        NOT NULL,
    posted_at    timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX erp_document_postings_period ON erp_document_postings (period);

-- Documents posted before this migration: what they hold now is what is kept.
INSERT INTO erp_document_postings (document_id, journal_id, period, fingerprint, posted_at)
SELECT f.document_id, j.id, j.period, f.fingerprint, j.posted_at
FROM erp_document_fingerprints(ARRAY(SELECT id FROM erp_documents WHERE status = 'posted')) AS f
JOIN erp_journals AS j ON j.source_key = 'document:' || f.document_id;

-- The standard cost costing used; rows costed before this migration take today's.
ALTER TABLE erp_item_costs ADD COLUMN standard_cost numeric(14,4);
UPDATE erp_item_costs AS c SET standard_cost = i.standard_cost
FROM erp_items AS i WHERE i.id = c.item_id;
ALTER TABLE erp_item_costs ALTER COLUMN standard_cost SET NOT NULL;

-- The worker posts (and records what it posted); the console checks.
GRANT SELECT, INSERT ON erp_document_postings TO engine_worker;
GRANT SELECT ON erp_document_postings TO engine_console;
