-- The hot tables churn: every delivery is inserted, updated on receive and
-- deleted, and every step run is updated on claim and checkpoint. Their dead
-- rows sit at the front of the indexes a receive walks, so each receive gets
-- slower as a big batch drains. Vacuum them after a fixed number of dead rows
-- rather than a share of the table, and without throttling.
ALTER TABLE engine_queue SET (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 500,
    autovacuum_vacuum_cost_delay = 0,
    autovacuum_analyze_scale_factor = 0,
    autovacuum_analyze_threshold = 500
);
ALTER TABLE engine_step_runs SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0
);
ALTER TABLE engine_outbox SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0
);
