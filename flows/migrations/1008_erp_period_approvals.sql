-- Approvals bind the period, not a job (issue 35).
--
-- A period's limit of rejected documents (erp_periods.approve_rejects_over)
-- is set by the first posting or close that names one (or from the setting
-- ERP_APPROVE_REJECTS_OVER) and only tightened by later submits; loosening
-- it is `engine books approval-threshold` with a reason. Each change is in
-- the period's history ('approval threshold').
--
-- An accountant decides on each rejected DOCUMENT, and on one rejection of
-- it: erp_documents.rejections counts the times a document was rejected (a
-- trigger, whoever writes the status), so a document corrected and rejected
-- again needs a new decision. A period whose rejected documents without an
-- approval exceed its limit cannot close (flows/erp/approvals.py).
ALTER TABLE erp_periods
    ADD COLUMN approve_rejects_over integer CHECK (approve_rejects_over >= 0);

ALTER TABLE erp_documents
    ADD COLUMN rejections integer NOT NULL DEFAULT 0 CHECK (rejections >= 0),
    ADD COLUMN rejected_at timestamptz;
UPDATE erp_documents SET rejections = 1, rejected_at = now() WHERE status = 'rejected';

-- every move into 'rejected' is a new rejection: it needs its own decision; the
-- count and its time are the trigger's alone (a write to them is ignored), so no
-- UPDATE can bring an old rejection's approval back
CREATE FUNCTION erp_documents_count_rejection() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        NEW.rejections := CASE WHEN NEW.status = 'rejected' THEN 1 ELSE 0 END;
        NEW.rejected_at := CASE WHEN NEW.status = 'rejected' THEN clock_timestamp() END;
        RETURN NEW;
    END IF;
    NEW.rejections := OLD.rejections;
    NEW.rejected_at := OLD.rejected_at;
    IF NEW.status = 'rejected' AND OLD.status <> 'rejected' THEN
        NEW.rejections := OLD.rejections + 1;
        NEW.rejected_at := clock_timestamp();
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER erp_documents_count_rejection
    BEFORE INSERT OR UPDATE ON erp_documents
    FOR EACH ROW EXECUTE FUNCTION erp_documents_count_rejection();

-- the rejected documents of a period (dated in it), and every document of it by status
CREATE INDEX erp_documents_by_date_status ON erp_documents (date_period, status);

-- One accountant's decision on one rejection of one document, in the
-- posting job's wait that showed it; append-only, the latest counts.
CREATE TABLE erp_rejection_decisions (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    document_id  bigint      NOT NULL REFERENCES erp_documents (id),
    rejection    integer     NOT NULL CHECK (rejection >= 1),
    decision     text        NOT NULL CHECK (decision IN ('approve', 'reject')),
    decided_by   text        NOT NULL CHECK (btrim(decided_by) <> ''),
    reason       text        NOT NULL DEFAULT '',
    job_id       uuid        NOT NULL,
    at           timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (document_id, rejection, job_id)
);

ALTER TABLE erp_period_events DROP CONSTRAINT erp_period_events_action_check;
ALTER TABLE erp_period_events ADD CONSTRAINT erp_period_events_action_check
    CHECK (action IN ('costed', 'closed', 'reopened', 'posting approved', 'posting rejected',
                      'approval threshold'));

-- The worker: posting pins the period's limit and records the decisions of its wait.
GRANT UPDATE (approve_rejects_over) ON erp_periods TO engine_worker;
GRANT SELECT, INSERT ON erp_rejection_decisions TO engine_worker;
-- The console: its periods page reads the decisions; its close counts them.
GRANT SELECT ON erp_rejection_decisions TO engine_console;
