-- The foreign keys 0043 added NOT VALID, validated: each scans its table for a
-- reference to no row (none can exist: the keys were enforced all along) under
-- SHARE UPDATE EXCLUSIVE, which no claim, checkpoint or submit waits for. A
-- file of its own, so that 0043's brief locks are not held through the scans.

DO $$
DECLARE
    k record;
BEGIN
    FOR k IN
        SELECT c.conrelid::regclass AS tab, c.conname
        FROM pg_constraint AS c
        WHERE c.contype = 'f' AND NOT c.convalidated
          AND c.confrelid IN ('engine_jobs'::regclass, 'engine_step_runs'::regclass)
        ORDER BY c.conname
    LOOP
        EXECUTE format('ALTER TABLE %s VALIDATE CONSTRAINT %I', k.tab, k.conname);
    END LOOP;
END
$$;
