-- Declared signals and waits that wait again (issue 27, item 8).
--
-- A job records the signals its flow declares, at the version it was
-- submitted with: `engine signal` refuses any other name (a typo) and writes
-- nothing. NULL for a job submitted before this migration: its flow declared
-- nothing then, so any valid name is accepted, as it was.

ALTER TABLE engine_jobs ADD COLUMN signals text[];

-- The deadlines of the waits a step run passed before the one it waits at
-- now, in the order the step called them (NULL: that wait returned). A step
-- that caught a timeout and waits again runs from its start on every wake:
-- its first wait raises its timeout again from here, and the next one has a
-- deadline of its own (wait_until). Cleared when the step run is reopened.
ALTER TABLE engine_step_runs ADD COLUMN wait_past timestamptz[] NOT NULL DEFAULT '{}';

-- A worker submits child jobs (their signals with them) and parks its steps.
GRANT INSERT (signals) ON engine_jobs TO engine_worker;
GRANT UPDATE (wait_past) ON engine_step_runs TO engine_worker;
