-- A document's accounting period is the month of its date (issue 35).
--
-- `period` is the month a document was entered under; `date_period` is the
-- month it is dated in (issued_on, as 'YYYY-MM'), the one its journal and
-- stock moves belong to. Posting P takes the unposted documents dated in P;
-- one dated in a closed month waits there, listed by the check, the close
-- report and the Periods page, never posted into another month. The
-- expression is immutable (to_char is not), so the column is stored.
ALTER TABLE erp_documents
    ADD COLUMN date_period text NOT NULL GENERATED ALWAYS AS (
        lpad(extract(year FROM issued_on)::int::text, 4, '0') || '-'
        || lpad(extract(month FROM issued_on)::int::text, 2, '0')) STORED;

-- posting P reads the unposted documents dated in P, in id order
CREATE INDEX erp_documents_unposted_by_date ON erp_documents (date_period, id)
    WHERE status = 'unposted';
