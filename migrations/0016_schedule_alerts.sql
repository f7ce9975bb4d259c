-- Schedules that cannot fire raise an alert (issue 27, item 9).
--
-- A fire records its outcome: the job it submitted, or why it has none
-- ('refused': the flow's admission or its parameters said no; 'error': the
-- submit raised). Either is alerted once per schedule and scheduled time, in
-- the fire's own transaction. A due schedule whose flow no live worker loads
-- is alerted once per schedule and time too, by the sweeper; it is not a
-- fire (the time still fires once a worker with the flow is back).

ALTER TABLE engine_schedule_fires
    ADD COLUMN outcome text CHECK (outcome IN ('job', 'refused', 'error'));
-- fires recorded before this migration: a job, or a refusal (errors rolled back then)
UPDATE engine_schedule_fires
SET outcome = CASE WHEN job_id IS NOT NULL THEN 'job' ELSE 'refused' END
WHERE job_id IS NOT NULL OR error IS NOT NULL;
-- NULL only inside the firing transaction, between the fire's insert and its outcome
ALTER TABLE engine_schedule_fires
    ADD CONSTRAINT engine_schedule_fires_outcome_complete
    CHECK ((outcome = 'job') = (job_id IS NOT NULL)
           AND (outcome IN ('refused', 'error')) = (error IS NOT NULL));
GRANT UPDATE (outcome) ON engine_schedule_fires TO engine_worker;

-- The schedule alert's key: the schedule (by id: a removed and re-added name
-- is a new schedule) and the scheduled time. No foreign key: an alert's
-- history outlives the schedule it was about; the name is kept for the text.
ALTER TABLE engine_alerts DROP CONSTRAINT engine_alerts_source_check;
ALTER TABLE engine_alerts
    ADD CONSTRAINT engine_alerts_source_check
    CHECK (source IN ('step', 'message', 'version', 'schedule'));
ALTER TABLE engine_alerts ADD COLUMN schedule_id bigint;
ALTER TABLE engine_alerts ADD COLUMN schedule text;
ALTER TABLE engine_alerts ADD COLUMN scheduled_for timestamptz;
ALTER TABLE engine_alerts
    ADD CONSTRAINT engine_alerts_schedule_complete
    CHECK (source <> 'schedule' OR (schedule_id IS NOT NULL AND schedule IS NOT NULL
                                    AND scheduled_for IS NOT NULL AND flow IS NOT NULL
                                    AND dead_letter_id IS NULL));
-- exactly one alert per schedule and time, whatever the number of firers and sweepers
CREATE UNIQUE INDEX engine_alerts_schedule_time
    ON engine_alerts (schedule_id, scheduled_for) WHERE source = 'schedule';
