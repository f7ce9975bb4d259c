-- What the worker's role (engine_worker, migration 0006) may do to the books:
-- exactly what the steps of costing, posting and migration run
-- (flows/erp/sql/costing.sql, posting.sql, migration.sql, books.sql), stated
-- in full per table. Posted books are append-only: journals, journal lines
-- and item costs are inserted once (unique keys) and never updated or
-- deleted; seeding, truncating and closing periods are the owner's (`engine
-- seed`, an operator).
REVOKE ALL ON erp_brands, erp_stores, erp_employees, erp_items, erp_accounts, erp_periods,
              erp_opening_balances, erp_documents, erp_document_lines, erp_journals,
              erp_journal_lines, erp_stock_moves, erp_item_costs, erp_migration_rejects
    FROM engine_worker;

-- Reference data and source documents: read only.
GRANT SELECT ON erp_brands, erp_stores, erp_accounts, erp_document_lines, erp_stock_moves
    TO engine_worker;

-- Costing marks its period costed and opens the next one.
GRANT SELECT, INSERT ON erp_periods TO engine_worker;
GRANT UPDATE (status, costed_at) ON erp_periods TO engine_worker;

-- Posting marks each document posted or rejected (and locks them FOR UPDATE);
-- a document's number, amounts and memo are not the worker's.
GRANT SELECT ON erp_documents TO engine_worker;
GRANT UPDATE (status, reject_reason) ON erp_documents TO engine_worker;

-- The books: insert once, read; no UPDATE, DELETE or TRUNCATE.
GRANT SELECT, INSERT ON erp_journals, erp_journal_lines, erp_item_costs TO engine_worker;

-- Costing carries closing balances forward; the migration flow upserts
-- opening balances by natural key.
GRANT SELECT, INSERT ON erp_opening_balances TO engine_worker;
GRANT UPDATE (qty, value) ON erp_opening_balances TO engine_worker;

-- The migration flow upserts items by sku under LOCK TABLE ... SHARE ROW
-- EXCLUSIVE, which needs UPDATE on the whole table, not on columns.
GRANT SELECT, INSERT, UPDATE ON erp_items TO engine_worker;
GRANT SELECT, INSERT ON erp_migration_rejects TO engine_worker;

-- erp_employees: nothing (no step reads them). Its staging tables are
-- temporary (CREATE TEMP TABLE, PUBLIC's TEMPORARY privilege on the database).
