-- Costing never uses stale facts (issue 35).
--
-- A period's averages are solved once, from its facts: the opening
-- balances, receipts and transfers of the items that move between stores,
-- and those items' standard costs. The solve keeps a fingerprint of them
-- (per store, and of the standard costs); costing a store after the solve
-- compares it with the facts as they are then, and the books check does too,
-- so a change that got past the refusals (an opening, a document, a standard
-- cost written while the period is being costed) is named, never mixed in.
ALTER TABLE erp_average_solves ADD COLUMN facts jsonb;

GRANT UPDATE (facts) ON erp_average_solves TO engine_worker;
