-- What the console's role (engine_console, migration 0026) may do to the books:
-- exactly what its periods page (flows/tools/console.py) runs. It reads the
-- periods, their history and, to check a period before closing it, the books;
-- it closes and reopens a period (erp_periods' status and close columns, the
-- period's event, its kept closing balances), each with its audit entry. It
-- never writes a document, a journal or a cost. Numbered after the engine's
-- 0026, which creates the role.
REVOKE ALL ON erp_brands, erp_stores, erp_employees, erp_items, erp_accounts, erp_periods,
              erp_opening_balances, erp_documents, erp_document_lines, erp_journals,
              erp_journal_lines, erp_stock_moves, erp_item_costs, erp_migration_rejects,
              erp_store_periods, erp_period_events, erp_item_averages, erp_average_solves,
              erp_period_balances
    FROM engine_console;

GRANT SELECT ON erp_brands, erp_stores, erp_items, erp_accounts, erp_periods,
                erp_opening_balances, erp_documents, erp_document_lines, erp_journals,
                erp_journal_lines, erp_stock_moves, erp_item_costs, erp_store_periods,
                erp_period_events, erp_item_averages, erp_average_solves, erp_period_balances
    TO engine_console;

-- close (costed first if every store is), reopen; FOR UPDATE of the period row
GRANT UPDATE (status, costed_at, closed_at, closed_by) ON erp_periods TO engine_console;
GRANT INSERT ON erp_period_events TO engine_console;
-- a close keeps the period's closing balances, a reopen drops them
GRANT INSERT, DELETE ON erp_period_balances TO engine_console;
