-- Corrections (issue 36): rejected documents come back, late documents post forward.
--
-- erp_documents.redated_into: a document dated in a closed month, marked by
-- `engine books redate` to be posted in the first open period after it. It
-- keeps its own date (issued_on, date_period); posting_period is the month
-- it posts to, its journal's and its stock moves' period: redated_into when
-- set, else date_period. Posting P, the approval limit of P, the waiting
-- list, the close's "unposted documents dated in it" and the ties all read
-- posting_period. A late document only goes forward (the CHECK).
--
-- erp_document_events: each document's history, append-only: rejected (why,
-- by which posting job, each time), requeued (by whom, why), redated (by
-- whom, why, into which period), posted (by which job). Posting writes its
-- events in the chunk's transaction; `engine books requeue|redate` (and the
-- console) theirs with their audit entry.
ALTER TABLE erp_documents
    ADD COLUMN redated_into text REFERENCES erp_periods (period),
    ADD COLUMN posting_period text NOT NULL GENERATED ALWAYS AS (coalesce(redated_into,
        lpad(extract(year FROM issued_on)::int::text, 4, '0') || '-'
        || lpad(extract(month FROM issued_on)::int::text, 2, '0'))) STORED;
ALTER TABLE erp_documents ADD CONSTRAINT erp_documents_redated_forward
    CHECK (redated_into IS NULL OR redated_into > date_period);

-- posting P reads the unposted documents it posts, in id order; the pages count them by status
CREATE INDEX erp_documents_unposted_by_posting ON erp_documents (posting_period, id)
    WHERE status = 'unposted';
CREATE INDEX erp_documents_by_posting_status ON erp_documents (posting_period, status);

CREATE TABLE erp_document_events (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    document_id  bigint      NOT NULL REFERENCES erp_documents (id),
    action       text        NOT NULL
                 CHECK (action IN ('rejected', 'requeued', 'redated', 'posted')),
    period       text        NOT NULL,  -- the month it was to post to (after a redate: the new)
    actor        text        NOT NULL CHECK (btrim(actor) <> ''),
    reason       text        NOT NULL DEFAULT '',
    job_id       uuid,
    at           timestamptz NOT NULL DEFAULT clock_timestamp(),
    CHECK (action NOT IN ('requeued', 'redated', 'rejected') OR btrim(reason) <> '')
);
CREATE INDEX erp_document_events_document ON erp_document_events (document_id, id);

-- Documents judged before this migration: their last verdict is their history.
INSERT INTO erp_document_events (document_id, action, period, actor, reason, at)
SELECT id, 'rejected', date_period, 'posting', reject_reason, coalesce(rejected_at, now())
FROM erp_documents WHERE status = 'rejected'
ORDER BY id;
INSERT INTO erp_document_events (document_id, action, period, actor, at)
SELECT p.document_id, 'posted', p.period, 'posting', p.posted_at
FROM erp_document_postings AS p
ORDER BY p.document_id;

-- A rejected document back to unposted (its reason cleared; its count of
-- rejections kept, so a rejection after this is a new one that needs a new
-- decision), with its event; no row when it is not rejected or its period is
-- closed. The one way to
-- requeue, for the CLI and the console alike: the console's role may run it
-- and nothing more (it writes no document otherwise), so it runs as its owner.
CREATE FUNCTION erp_document_requeue_if_rejected(doc bigint, who text, why text)
RETURNS TABLE (document_id bigint, period text)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    WITH back AS (
        UPDATE erp_documents AS d SET status = 'unposted', reject_reason = NULL
        WHERE d.id = doc AND d.status = 'rejected'
          AND NOT EXISTS (SELECT 1 FROM erp_periods AS p
                          WHERE p.period = d.posting_period AND p.status = 'closed')
        RETURNING d.id, d.posting_period
    )
    INSERT INTO erp_document_events (document_id, action, period, actor, reason)
    SELECT id, 'requeued', posting_period, who, why FROM back
    RETURNING document_id, period
$$;
REVOKE ALL ON FUNCTION erp_document_requeue_if_rejected(bigint, text, text) FROM PUBLIC;

-- The worker: posting records its verdicts.
GRANT SELECT, INSERT ON erp_document_events TO engine_worker;
-- The console: the posting's page requeues a rejected document (only through
-- the function) and shows every document's history.
GRANT SELECT ON erp_document_events TO engine_console;
GRANT EXECUTE ON FUNCTION erp_document_requeue_if_rejected(bigint, text, text)
    TO engine_console;
