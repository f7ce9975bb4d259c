-- Value-only corrections to goods already partly sold (issue 36, bullet 4).
--
-- A cost correction (a landed cost, a supplier's price correction) names
-- the purchase invoice of a closed period it corrects (corrects_id) and
-- carries, per item of that receipt, an amount on 1300 (a debit adds, a
-- credit takes away), no quantity, against its counter account (2000). It
-- posts in the first open period P (a BEFORE INSERT trigger redates one
-- dated in a closed month into it): the closed period never changes.
-- Posting splits each item line by quantity, the way SAP's material ledger
-- does: received R, still on hand H = least(R, greatest(0, the pair's
-- opening quantity of P)); on hand = round(amount x H / R, 2) to 1300, the
-- rest to 5000 (COGS). The split is kept (erp_value_corrections, one row
-- per item line, written with the journal) and the on-hand share enters P's
-- average as a value-only stock move (kind 'revaluation', qty 0, value),
-- which costing adds to the receipts' value.
ALTER TABLE erp_documents DROP CONSTRAINT erp_documents_kind_check;
ALTER TABLE erp_documents ADD CONSTRAINT erp_documents_kind_check CHECK (kind IN (
    'sales_invoice', 'purchase_invoice', 'credit_note', 'stock_transfer', 'stock_count',
    'cost_correction'));
-- the receipt a cost correction corrects; posting rejects one naming none, or naming a
-- document that is not a posted purchase invoice of a closed period (with a reason)
ALTER TABLE erp_documents ADD COLUMN corrects_id bigint REFERENCES erp_documents (id);
ALTER TABLE erp_documents ADD CONSTRAINT erp_documents_corrects_only_a_cost_correction
    CHECK (corrects_id IS NULL OR kind = 'cost_correction');

-- A value-only move: no quantity, its value; every other move has a quantity and no value.
ALTER TABLE erp_stock_moves ADD COLUMN value numeric(16,2);
ALTER TABLE erp_stock_moves DROP CONSTRAINT erp_stock_moves_kind_check;
ALTER TABLE erp_stock_moves ADD CONSTRAINT erp_stock_moves_kind_check CHECK (kind IN (
    'receipt', 'sale', 'return', 'transfer_in', 'transfer_out', 'adjustment', 'revaluation'));
ALTER TABLE erp_stock_moves DROP CONSTRAINT erp_stock_moves_qty_check;
ALTER TABLE erp_stock_moves ADD CONSTRAINT erp_stock_moves_qty_check
    CHECK ((kind = 'revaluation') = (qty = 0));
ALTER TABLE erp_stock_moves ADD CONSTRAINT erp_stock_moves_value_only_revaluation
    CHECK ((kind = 'revaluation') = (value IS NOT NULL));

-- The split of each item line of a posted cost correction, as posting made it.
CREATE TABLE erp_value_corrections (
    document_id    bigint        NOT NULL REFERENCES erp_documents (id),
    line_no        integer       NOT NULL,
    receipt_id     bigint        NOT NULL REFERENCES erp_documents (id),
    period         text          NOT NULL REFERENCES erp_periods (period),
    store_id       integer       NOT NULL REFERENCES erp_stores (id),
    item_id        integer       NOT NULL REFERENCES erp_items (id),
    received_qty   numeric(14,3) NOT NULL CHECK (received_qty > 0),
    on_hand_qty    numeric(14,3) NOT NULL,
    amount         numeric(16,2) NOT NULL CHECK (amount <> 0),
    on_hand_value  numeric(16,2) NOT NULL,
    cogs_value     numeric(16,2) NOT NULL,
    PRIMARY KEY (document_id, line_no),
    CHECK (on_hand_qty BETWEEN 0 AND received_qty),
    CHECK (on_hand_value + cogs_value = amount)
);
CREATE INDEX erp_value_corrections_period ON erp_value_corrections (period, document_id);

-- A cost correction dated in a closed month posts in the first open period after it.
CREATE FUNCTION erp_cost_correction_posts_forward() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.kind = 'cost_correction' AND NEW.redated_into IS NULL
       AND EXISTS (SELECT 1 FROM erp_periods
                   WHERE period = to_char(NEW.issued_on, 'YYYY-MM') AND status = 'closed') THEN
        NEW.redated_into := (SELECT min(period) FROM erp_periods
                             WHERE period > to_char(NEW.issued_on, 'YYYY-MM')
                               AND status <> 'closed');
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER erp_cost_correction_posts_forward BEFORE INSERT ON erp_documents
    FOR EACH ROW EXECUTE FUNCTION erp_cost_correction_posts_forward();

GRANT SELECT, INSERT ON erp_value_corrections TO engine_worker;
GRANT SELECT ON erp_value_corrections TO engine_console;

-- What was posted includes the receipt a cost correction corrects (a correction re-aimed
-- after posting is named by the check); every other document's fingerprint is as before.
CREATE OR REPLACE FUNCTION erp_document_fingerprints(ids bigint[])
RETURNS TABLE (document_id bigint, fingerprint text)
LANGUAGE sql STABLE AS $$
    SELECT d.id,
           encode(sha256(convert_to(
               format('%s|%s|%s|%s|', d.kind, d.store_id, d.counterpart_store_id,
                      to_char(d.issued_on, 'YYYY-MM-DD'))
               || coalesce(string_agg(
                      format('%s,%s,%s,%s,%s,%s,%s', l.line_no, l.account_code, l.item_id,
                             l.qty, l.unit_cost, l.debit, l.credit),
                      ';' ORDER BY l.line_no), '')
               || coalesce('|corrects ' || d.corrects_id, ''),
               'UTF8')), 'hex')
    FROM (SELECT DISTINCT id FROM unnest(ids) AS u (id)) AS k
    JOIN erp_documents AS d ON d.id = k.id
    LEFT JOIN erp_document_lines AS l ON l.document_id = d.id
    GROUP BY d.id
$$;
