-- sweep_announce_all --
-- Set-based: every claimable step run announced just now and published (the steady state of a backlog whose messages are all out): what each sweep round re-checks.
INSERT INTO engine_outbox (step_run_id, published_at)
SELECT id, clock_timestamp()
FROM engine_step_runs
WHERE status IN ('pending', 'running');
