-- The ERP's books, owned by flows/ (the engine knows nothing of them).
-- Money is numeric, never float. Quantities are signed on stock moves:
-- positive into the store, negative out of it.

CREATE TABLE erp_brands (
    id    integer PRIMARY KEY,
    code  text    NOT NULL UNIQUE,
    name  text    NOT NULL
);

CREATE TABLE erp_stores (
    id        integer PRIMARY KEY,
    code      text    NOT NULL UNIQUE,
    brand_id  integer NOT NULL REFERENCES erp_brands (id),
    name      text    NOT NULL,
    size      text    NOT NULL CHECK (size IN ('small', 'medium', 'large', 'flagship'))
);

CREATE TABLE erp_employees (
    id        integer PRIMARY KEY,
    store_id  integer NOT NULL REFERENCES erp_stores (id),
    name      text    NOT NULL,
    role      text    NOT NULL
);

CREATE TABLE erp_items (
    id             integer       PRIMARY KEY,
    brand_id       integer       NOT NULL REFERENCES erp_brands (id),
    sku            text          NOT NULL UNIQUE,
    name           text          NOT NULL,
    standard_cost  numeric(14,4) NOT NULL CHECK (standard_cost >= 0),
    price          numeric(14,2) NOT NULL CHECK (price >= 0)
);

CREATE TABLE erp_accounts (
    code  text PRIMARY KEY CHECK (code ~ '^[0-9]{4}$'),
    name  text NOT NULL,
    kind  text NOT NULL CHECK (kind IN ('asset', 'liability', 'equity', 'income', 'expense'))
);

INSERT INTO erp_accounts (code, name, kind) VALUES
    ('1000', 'Cash', 'asset'),
    ('1100', 'Accounts receivable', 'asset'),
    ('1300', 'Inventory', 'asset'),
    ('2000', 'Accounts payable', 'liability'),
    ('2100', 'VAT payable', 'liability'),
    ('3000', 'Equity', 'equity'),
    ('4000', 'Sales revenue', 'income'),
    ('4100', 'Sales returns', 'income'),
    ('5000', 'Cost of goods sold', 'expense'),
    ('5100', 'Inventory adjustments', 'expense');

CREATE TABLE erp_periods (
    period     text        PRIMARY KEY CHECK (period ~ '^[0-9]{4}-(0[1-9]|1[0-2])$'),
    status     text        NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'costed', 'closed')),
    costed_at  timestamptz,
    CHECK ((status = 'open') = (costed_at IS NULL) OR status = 'closed')
);

-- Stock on hand at the start of the first period a store is costed in
-- (loaded by the migration flow, or by the seed).
CREATE TABLE erp_opening_balances (
    store_id  integer       NOT NULL REFERENCES erp_stores (id),
    item_id   integer       NOT NULL REFERENCES erp_items (id),
    period    text          NOT NULL REFERENCES erp_periods (period),
    qty       numeric(14,3) NOT NULL,
    value     numeric(16,2) NOT NULL,
    PRIMARY KEY (store_id, item_id, period)
);

CREATE TABLE erp_documents (
    id             bigint      PRIMARY KEY,
    number         text        NOT NULL UNIQUE,
    kind           text        NOT NULL CHECK (kind IN (
                       'sales_invoice', 'purchase_invoice', 'credit_note', 'stock_transfer')),
    period         text        NOT NULL REFERENCES erp_periods (period),
    store_id       integer     NOT NULL REFERENCES erp_stores (id),
    employee_id    integer     NOT NULL REFERENCES erp_employees (id),
    issued_on      date        NOT NULL,
    memo           text        NOT NULL DEFAULT '',
    status         text        NOT NULL DEFAULT 'unposted'
                   CHECK (status IN ('unposted', 'posted', 'rejected')),
    reject_reason  text,
    CHECK ((status = 'rejected') = (reject_reason IS NOT NULL))
);
CREATE INDEX erp_documents_unposted ON erp_documents (period, id) WHERE status = 'unposted';

-- Lines carry their accounting; the account is not a foreign key on purpose:
-- a document naming an unknown account is rejected by posting, with a reason.
CREATE TABLE erp_document_lines (
    document_id  bigint        NOT NULL REFERENCES erp_documents (id),
    line_no      integer       NOT NULL,
    account_code text          NOT NULL,
    item_id      integer       REFERENCES erp_items (id),
    qty          numeric(14,3),
    debit        numeric(16,2) NOT NULL DEFAULT 0 CHECK (debit >= 0),
    credit       numeric(16,2) NOT NULL DEFAULT 0 CHECK (credit >= 0),
    description  text          NOT NULL DEFAULT '',
    PRIMARY KEY (document_id, line_no)
);

-- Every journal comes from exactly one source; the unique key makes posting
-- the same document (or the same costing step) twice impossible.
CREATE TABLE erp_journals (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    period      text        NOT NULL REFERENCES erp_periods (period),
    store_id    integer     REFERENCES erp_stores (id),
    source      text        NOT NULL CHECK (source IN ('document', 'costing')),
    source_key  text        NOT NULL UNIQUE,
    memo        text        NOT NULL DEFAULT '',
    posted_at   timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE erp_journal_lines (
    journal_id    bigint        NOT NULL REFERENCES erp_journals (id),
    line_no       integer       NOT NULL,
    account_code  text          NOT NULL REFERENCES erp_accounts (code),
    store_id      integer       REFERENCES erp_stores (id),
    debit         numeric(16,2) NOT NULL DEFAULT 0 CHECK (debit >= 0),
    credit        numeric(16,2) NOT NULL DEFAULT 0 CHECK (credit >= 0),
    PRIMARY KEY (journal_id, line_no),
    CHECK (debit = 0 OR credit = 0)
);
CREATE INDEX erp_journal_lines_account ON erp_journal_lines (account_code);

CREATE TABLE erp_stock_moves (
    id                    bigint        GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    period                text          NOT NULL REFERENCES erp_periods (period),
    store_id              integer       NOT NULL REFERENCES erp_stores (id),
    item_id               integer       NOT NULL REFERENCES erp_items (id),
    moved_on              date          NOT NULL,
    kind                  text          NOT NULL CHECK (kind IN (
                              'receipt', 'sale', 'return', 'transfer_in', 'transfer_out',
                              'adjustment')),
    qty                   numeric(14,3) NOT NULL CHECK (qty <> 0),
    unit_cost             numeric(14,4),
    counterpart_store_id  integer       REFERENCES erp_stores (id),
    document_id           bigint        REFERENCES erp_documents (id),
    CHECK ((kind = 'receipt') = (unit_cost IS NOT NULL)),
    CHECK (kind NOT IN ('receipt', 'return', 'transfer_in') OR qty > 0),
    CHECK (kind NOT IN ('sale', 'transfer_out') OR qty < 0),
    CHECK ((kind IN ('transfer_in', 'transfer_out')) = (counterpart_store_id IS NOT NULL))
);
CREATE INDEX erp_stock_moves_period_store ON erp_stock_moves (period, store_id, item_id);

-- The result of costing one store for one period, per item.
CREATE TABLE erp_item_costs (
    period              text          NOT NULL REFERENCES erp_periods (period),
    store_id            integer       NOT NULL REFERENCES erp_stores (id),
    item_id             integer       NOT NULL REFERENCES erp_items (id),
    opening_qty         numeric(14,3) NOT NULL,
    opening_value       numeric(16,2) NOT NULL,
    receipt_qty         numeric(14,3) NOT NULL,
    receipt_value       numeric(16,2) NOT NULL,
    transfer_in_qty     numeric(14,3) NOT NULL,
    transfer_in_value   numeric(16,2) NOT NULL,
    average_cost        numeric(14,4) NOT NULL,
    issue_qty           numeric(14,3) NOT NULL,
    cogs_value          numeric(16,2) NOT NULL,
    transfer_out_qty    numeric(14,3) NOT NULL,
    transfer_out_value  numeric(16,2) NOT NULL,
    closing_qty         numeric(14,3) NOT NULL,
    closing_value       numeric(16,2) NOT NULL,
    PRIMARY KEY (period, store_id, item_id),
    -- value conservation, to the cent
    CHECK (opening_value + receipt_value + transfer_in_value
           = cogs_value + transfer_out_value + closing_value),
    CHECK (opening_qty + receipt_qty + transfer_in_qty
           = issue_qty + transfer_out_qty + closing_qty)
);

-- What a migration job loaded and rejected (migration flow).
CREATE TABLE erp_migration_rejects (
    job_fingerprint  text    NOT NULL,
    row_number       integer NOT NULL,
    reason           text    NOT NULL,
    raw              text    NOT NULL,
    PRIMARY KEY (job_fingerprint, row_number)
);
