-- One ledger and one stock ledger, both driven by the documents.
--
-- Journals come from three sources (flows/erp/ledger.py posts them all):
-- documents (posting), costing (COGS, transfers between stores) and
-- openings (a store's first period). Each balances, enforced at commit by
-- the deferred constraint trigger below, not only checked afterwards.
-- Stock moves are written by posting, from the lines of the document they
-- belong to; costing solves each item's averages across stores exactly
-- (flows/erp/average.py) before it costs the stores.

INSERT INTO erp_accounts (code, name, kind) VALUES
    ('1350', 'Inter-store transfers', 'asset'),
    ('3100', 'Retained earnings', 'equity')
ON CONFLICT (code) DO NOTHING;

ALTER TABLE erp_journals DROP CONSTRAINT erp_journals_source_check;
ALTER TABLE erp_journals ADD CONSTRAINT erp_journals_source_check
    CHECK (source IN ('document', 'costing', 'opening'));
CREATE INDEX erp_journals_period ON erp_journals (period, source);

-- Double entry, kept by the database: at commit, every journal a
-- transaction touched has debit = credit. Deferred, so a journal's lines
-- may be inserted one by one within the transaction.
CREATE FUNCTION erp_journal_must_balance() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    touched bigint[];
    jid bigint;
    d numeric;
    c numeric;
    src text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        touched := ARRAY[NEW.journal_id];
    ELSIF TG_OP = 'DELETE' THEN
        touched := ARRAY[OLD.journal_id];
    ELSE
        touched := ARRAY[OLD.journal_id, NEW.journal_id];
    END IF;
    FOREACH jid IN ARRAY touched LOOP
        SELECT coalesce(sum(debit), 0), coalesce(sum(credit), 0) INTO d, c
        FROM erp_journal_lines WHERE journal_id = jid;
        IF d <> c THEN
            SELECT source_key INTO src FROM erp_journals WHERE id = jid;
            RAISE EXCEPTION 'journal % (%) does not balance: debit % != credit %', jid, src, d, c
                USING ERRCODE = 'check_violation', CONSTRAINT = 'erp_journal_balanced';
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;

CREATE CONSTRAINT TRIGGER erp_journal_balanced
    AFTER INSERT OR UPDATE OR DELETE ON erp_journal_lines
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION erp_journal_must_balance();

-- Documents: stock counts, and where a transfer goes.
ALTER TABLE erp_documents DROP CONSTRAINT erp_documents_kind_check;
ALTER TABLE erp_documents ADD CONSTRAINT erp_documents_kind_check CHECK (kind IN (
    'sales_invoice', 'purchase_invoice', 'credit_note', 'stock_transfer', 'stock_count'));
-- a transfer's receiving store; posting rejects a transfer without one (with a reason)
ALTER TABLE erp_documents ADD COLUMN counterpart_store_id integer REFERENCES erp_stores (id);
-- a purchase line's unit cost (4 decimals): its amount is round(qty x unit_cost, 2)
ALTER TABLE erp_document_lines ADD COLUMN unit_cost numeric(14,4);

-- A stock move is a line of a posted document: (document, line, kind) once.
-- Moves written before this migration keep their NULL document.
ALTER TABLE erp_stock_moves ADD COLUMN line_no integer;
ALTER TABLE erp_stock_moves ADD CONSTRAINT erp_stock_moves_from_a_document
    CHECK (document_id IS NOT NULL AND line_no IS NOT NULL) NOT VALID;
CREATE UNIQUE INDEX erp_stock_moves_document_line ON erp_stock_moves (document_id, line_no, kind);
CREATE INDEX erp_stock_moves_period_item ON erp_stock_moves (period, item_id)
    WHERE kind IN ('transfer_in', 'transfer_out');

-- How each average was found: solved exactly, or a fallback; the loop it is in.
-- 'legacy': costed before this migration (transfers at the sender's opening average).
ALTER TABLE erp_item_costs
    ADD COLUMN average_from text NOT NULL DEFAULT 'legacy'
        CHECK (average_from IN ('solved', 'fallback_opening', 'fallback_standard', 'legacy')),
    ADD COLUMN loop_group text;
ALTER TABLE erp_item_costs ALTER COLUMN average_from DROP DEFAULT;

-- The averages of the period's items that move between stores, solved once
-- per period for every store (a transfer's two sides need the same value),
-- before any store is costed.
CREATE TABLE erp_item_averages (
    period        text          NOT NULL REFERENCES erp_periods (period),
    item_id       integer       NOT NULL REFERENCES erp_items (id),
    store_id      integer       NOT NULL REFERENCES erp_stores (id),
    average_cost  numeric(14,4) NOT NULL,
    average_from  text          NOT NULL
                  CHECK (average_from IN ('solved', 'fallback_opening', 'fallback_standard')),
    loop_group    text,
    PRIMARY KEY (period, item_id, store_id)
);

CREATE TABLE erp_average_solves (
    period           text        PRIMARY KEY REFERENCES erp_periods (period),
    solved_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    items            integer     NOT NULL,
    loops            integer     NOT NULL,
    fallback_groups  jsonb       NOT NULL DEFAULT '[]'
);

-- A closed period's closing balances, per account and store, as they were
-- when it closed: the next period's opening is checked against them.
CREATE TABLE erp_period_balances (
    period        text          NOT NULL REFERENCES erp_periods (period),
    account_code  text          NOT NULL REFERENCES erp_accounts (code),
    store_id      integer       REFERENCES erp_stores (id),
    balance       numeric(18,2) NOT NULL,
    UNIQUE NULLS NOT DISTINCT (period, account_code, store_id)
);

-- A store's item costs and opening balances belong to a period of its chain
-- (erp_store_periods, which refers to the store and the period): one key for
-- both, checked once per row instead of twice.
ALTER TABLE erp_item_costs
    DROP CONSTRAINT erp_item_costs_period_fkey,
    DROP CONSTRAINT erp_item_costs_store_id_fkey,
    ADD CONSTRAINT erp_item_costs_store_period_fkey
        FOREIGN KEY (store_id, period) REFERENCES erp_store_periods (store_id, period);
ALTER TABLE erp_opening_balances
    DROP CONSTRAINT erp_opening_balances_period_fkey,
    DROP CONSTRAINT erp_opening_balances_store_id_fkey,
    ADD CONSTRAINT erp_opening_balances_store_period_fkey
        FOREIGN KEY (store_id, period) REFERENCES erp_store_periods (store_id, period);

-- The worker's share: posting writes the stock moves of the documents it
-- posts; costing solves and stores the averages; the close snapshots the
-- balances (a reopen deletes the snapshot, the next close writes it again).
GRANT INSERT ON erp_stock_moves TO engine_worker;
GRANT SELECT, INSERT ON erp_item_averages, erp_average_solves TO engine_worker;
GRANT UPDATE (items, loops, fallback_groups) ON erp_average_solves TO engine_worker;
GRANT SELECT, INSERT, DELETE ON erp_period_balances TO engine_worker;
GRANT SELECT ON erp_items TO engine_worker;
