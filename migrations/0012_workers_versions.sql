-- Versions in flight (issue 14, item 5): which worker runs which flow versions.
--
-- A job is pinned to the flow version it was submitted with, and a worker
-- claims only versions it has loaded (the claim's own predicate). During a
-- rolling deploy old and new workers run side by side; this table says who
-- they are, so that `engine flows show NAME` can tell which versions active
-- jobs need and who can run them, and the sweeper can alert when a version
-- active jobs need has been loaded by no live worker for too long.

-- One row per worker (its ENGINE_WORKER_ID, by default host:pid), upserted
-- when it starts, its last_seen_at renewed by the database clock at every
-- sweep, marked stopped when it shuts down cleanly. A worker is live while
-- it is running and was seen within ENGINE_WORKER_LIVE_S; a crashed one just
-- stops being seen. `runnable` holds what its claims accept, 'flow:version'.
CREATE TABLE engine_workers (
    id            text        PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 200),
    host          text        NOT NULL,
    pid           integer     NOT NULL,
    transport     text        NOT NULL CHECK (transport IN ('postgres', 'sqs')),
    concurrency   integer     NOT NULL CHECK (concurrency >= 1),
    runnable      text[]      NOT NULL,
    status        text        NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'stopped')),
    started_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    last_seen_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    stopped_at    timestamptz,
    CHECK ((status = 'stopped') = (stopped_at IS NOT NULL)),
    CHECK (array_position(runnable, NULL) IS NULL)
);
-- who is live: the sweeper's orphan check and `engine workers` read recent rows only
CREATE INDEX engine_workers_seen ON engine_workers (last_seen_at) WHERE status = 'running';

-- Active jobs by flow version: `engine flows show` and the orphan check.
CREATE INDEX engine_jobs_active_flow_version
    ON engine_jobs (flow, flow_version, created_at) WHERE status IN ('pending', 'running');

-- Alerts are no longer only about dead letters: a flow version that active
-- jobs need and no live worker has loaded raises one alert per orphan
-- episode. The episode is the last time any worker that had the version was
-- seen ('epoch', 1970, when none ever had it): stable while the version stays
-- orphaned, new once a worker loads it again and goes. The unique index
-- makes "exactly one per episode" hold whatever the number of sweepers.
ALTER TABLE engine_alerts DROP CONSTRAINT engine_alerts_source_check;
ALTER TABLE engine_alerts
    ADD CONSTRAINT engine_alerts_source_check CHECK (source IN ('step', 'message', 'version'));
ALTER TABLE engine_alerts ADD COLUMN flow_version integer CHECK (flow_version >= 1);
ALTER TABLE engine_alerts ADD COLUMN episode timestamptz;
ALTER TABLE engine_alerts
    ADD CONSTRAINT engine_alerts_version_complete
    CHECK (source <> 'version' OR (flow IS NOT NULL AND flow_version IS NOT NULL
                                   AND episode IS NOT NULL AND dead_letter_id IS NULL));
CREATE UNIQUE INDEX engine_alerts_version_episode
    ON engine_alerts (flow, flow_version, episode) WHERE source = 'version';

-- The worker registers itself and renews its row; it never deletes one (a
-- gone worker's row is the history the orphan episodes are keyed on).
REVOKE ALL ON engine_workers FROM engine_worker;
GRANT SELECT, INSERT ON engine_workers TO engine_worker;
GRANT UPDATE (host, pid, transport, concurrency, runnable, status, started_at, last_seen_at,
              stopped_at)
    ON engine_workers TO engine_worker;
