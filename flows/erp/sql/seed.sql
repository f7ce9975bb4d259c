-- erp_seed_lock --
-- Two seeds at once serialise here (the mode conflicts with itself), so the second sees the first's brands and refuses.
LOCK TABLE erp_brands IN SHARE ROW EXCLUSIVE MODE;

-- brand_exists --
-- Brands present means ERP data present: the seed never mixes its rows with someone else's.
SELECT EXISTS (SELECT 1 FROM erp_brands);

-- erp_data_truncate --
-- Replace empties every ERP data table (the chart of accounts stays) and restarts identities, so a reseed is row-identical; CASCADE reaches only tables that reference these.
TRUNCATE erp_period_events, erp_store_periods, erp_period_balances,
         erp_item_averages, erp_average_solves,
         erp_journal_lines, erp_journals, erp_item_costs, erp_stock_moves,
         erp_document_postings, erp_document_lines, erp_documents, erp_opening_balances, erp_periods,
         erp_items, erp_employees, erp_stores, erp_brands, erp_migration_rejects
RESTART IDENTITY CASCADE;

-- constraint_select_foreign_keys --
-- A bulk load drops a table's foreign keys and re-creates them from these exact definitions, checked once, set-based, in the same transaction.
SELECT conname, pg_get_constraintdef(oid)
FROM pg_constraint
WHERE conrelid = %(table)s::regclass AND contype = 'f'
ORDER BY conname;

-- index_select_secondary --
-- Plain (non-unique) indexes are rebuilt after a bulk load from their exact definitions; unique ones stay and keep checking.
SELECT indexrelid::regclass::text, pg_get_indexdef(indexrelid)
FROM pg_index
WHERE indrelid = %(table)s::regclass AND NOT indisunique
ORDER BY 1;

-- constraint_drop --
-- Only inside the loading transaction: a failure rolls the drop back with the rows.
ALTER TABLE {table} DROP CONSTRAINT {name};

-- constraint_add --
-- Re-adding validates every loaded row against the referenced table in one pass.
ALTER TABLE {table} ADD CONSTRAINT {name} {definition};

-- index_drop --
-- Only inside the loading transaction, re-created before it commits.
DROP INDEX {name};

-- brand_copy --
-- Ids are the seed's own (1..B), so the rows are the same on every run with the same seed.
COPY erp_brands (id, code, name) FROM STDIN;

-- store_copy --
-- Stores go to brands round-robin; ids 1..S.
COPY erp_stores (id, code, brand_id, name, size) FROM STDIN;

-- employee_copy --
-- Every store has at least one employee, so every document has an issuer of its store.
COPY erp_employees (id, store_id, name, role) FROM STDIN;

-- item_copy --
-- Items belong to one brand; ids are contiguous per brand.
COPY erp_items (id, brand_id, sku, name, standard_cost, price) FROM STDIN;

-- period_copy --
-- The seeded period is open; the one before it is closed and holds only the deliberately bad documents.
COPY erp_periods (period, status, costed_at, closed_at, closed_by) FROM STDIN;

-- opening_balance_copy --
-- Opening stock of the seeded period (the first one costed), a subset of each store's brand items.
COPY erp_opening_balances (store_id, item_id, period, qty, value) FROM STDIN;

-- store_period_copy --
-- The seeded period is every store's first: costing starts there, from the loaded openings.
COPY erp_store_periods (store_id, period, opening) FROM STDIN;

-- document_copy --
-- Documents arrive unposted; posting decides, and rejects the bad ones with a reason.
COPY erp_documents (id, number, kind, period, store_id, employee_id, issued_on, memo, counterpart_store_id) FROM STDIN;

-- document_line_copy --
-- Accounts are not foreign keys on purpose: an unknown account must reach posting to be rejected there.
COPY erp_document_lines (document_id, line_no, account_code, item_id, qty, debit, credit, description, unit_cost) FROM STDIN;

-- erp_seed_analyze --
-- Fresh statistics, so the first costing or posting job plans its joins on real row counts.
ANALYZE erp_stores, erp_items, erp_opening_balances, erp_documents, erp_document_lines;

-- demo_rejected_unknown_account --
-- The demo's correction: the first document posting in the period that posting rejected for the seed's unknown account 9999 (its VAT line), if any.
SELECT id, number, reject_reason
FROM erp_documents
WHERE posting_period = %(period)s AND status = 'rejected'
  AND reject_reason LIKE 'unknown account 9999 on line %%'
ORDER BY id
LIMIT 1;

-- demo_document_lines_fix_unknown_account --
-- The ERP fixes the document as its clerk would: the line the seed wrote to the unknown account 9999 goes to 2100 VAT, where it belongs.
UPDATE erp_document_lines SET account_code = '2100'
WHERE document_id = %(id)s AND account_code = '9999';
