-- An operator pauses and resumes a schedule (issue 28: `engine schedule
-- pause|resume NAME`, and the console's buttons).
--
-- A paused schedule is not due: no worker fires it, and the sweeper does not
-- alert it as unloaded. Its next_fire_at stays as it was; on resume it moves
-- to the first scheduled time after the resume if it was passed meanwhile,
-- so the times that fell while paused are skipped, never fired in a burst
-- (whatever its catch-up policy: that is for times missed while no worker
-- was up, not for times an operator held). Who paused it, when and why are
-- kept on the row for the list; the audit trail keeps every pause and resume.
ALTER TABLE engine_schedules ADD COLUMN paused_at timestamptz;
ALTER TABLE engine_schedules ADD COLUMN paused_by text;
ALTER TABLE engine_schedules ADD COLUMN paused_reason text;
ALTER TABLE engine_schedules
    ADD CONSTRAINT engine_schedules_paused_complete
    CHECK ((paused_at IS NULL) = (paused_by IS NULL)
           AND (paused_reason IS NULL OR paused_at IS NOT NULL));

-- Pausing and resuming are the operator's (the owner's role): the worker
-- keeps SELECT and the column UPDATEs of 0010, none on these columns.
REVOKE UPDATE (paused_at, paused_by, paused_reason) ON engine_schedules FROM engine_worker;
