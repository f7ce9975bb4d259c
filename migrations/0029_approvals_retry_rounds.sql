-- Segregation of duties on approvals, and honest retries (issue 35).
--
-- 1. Approvals. A flow declares which of its signals are approvals
--    (Flow(..., approvals=("approve",))); a job records them at submit, next
--    to its signals (0017), from its flow at its version. An approval is
--    refused (engine.ApprovalRefused, engine/waits/approvals.py) when its
--    sender is unknown, submitted the job or one of its ancestors, or gives
--    no reason. NULL: a job submitted before this migration (no approvals).
--
-- 2. Rejected jobs. A job failed by a step's Reject (the data's decision:
--    no dead letter, no alert) says so: `rejected`. `engine retry` refuses it
--    (the data must be corrected and submitted anew), and a parent sees it
--    through engine.Child.rejected.
--
-- 3. Retry rounds. `engine retry` of a failed job used to raise a dead step
--    run's cap (max_attempts = attempts + N): "attempt 2 of 6", "3 of 7".
--    Now each retry starts a round: `retries` counts them, `attempt_base` is
--    the attempts used before the round, and the cap moves by the step's own
--    budget, so the display reads attempts - attempt_base of max_attempts -
--    attempt_base: "attempt 1 of 5 (retry 2)". The claim's predicate
--    (attempts < max_attempts) is unchanged.
--
-- 4. Refusals are audited (action signal_refused) on a connection of their
--    own, by whichever role refused: the console's writes source console as
--    ever; the worker's may record a refusal of a signal to an active job in
--    the refused sender's name (it grants nothing: it records an attempt),
--    and a self-approval (ENGINE_ALLOW_SELF_APPROVAL) in the name of whoever
--    submitted the job or an ancestor of it (self_approval).

ALTER TABLE engine_jobs
    ADD COLUMN approvals text[],
    ADD COLUMN rejected  boolean NOT NULL DEFAULT false;

ALTER TABLE engine_step_runs
    ADD COLUMN retries      integer NOT NULL DEFAULT 0 CHECK (retries >= 0),
    ADD COLUMN attempt_base integer NOT NULL DEFAULT 0 CHECK (attempt_base >= 0);

-- the worker submits children (their approvals with them) and ends a job rejected
GRANT INSERT (approvals) ON engine_jobs TO engine_worker;
GRANT UPDATE (rejected) ON engine_jobs TO engine_worker;
-- the console submits (a schedule's run now) and retries (a retry round)
GRANT INSERT (approvals) ON engine_jobs TO engine_console;
GRANT UPDATE (retries, attempt_base) ON engine_step_runs TO engine_console;

-- As 0026, but for the worker's record of a refused signal (any sender's name).
CREATE OR REPLACE FUNCTION engine_audit_writer_check() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    job engine_jobs;
BEGIN
    -- only the chain sets these (at commit)
    NEW.seq := NULL;
    NEW.prev_hash := NULL;
    NEW.hash := NULL;
    IF engine_acts_as('engine_console') AND NEW.source <> 'console' THEN
        RAISE EXCEPTION 'role % writes audit entries with source console only, not %',
            current_user, NEW.source USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF engine_acts_as('engine_worker') THEN
        IF NEW.source <> 'api' THEN
            RAISE EXCEPTION 'role % writes audit entries with source api only, not %',
                current_user, NEW.source USING ERRCODE = 'insufficient_privilege';
        END IF;
        SELECT * INTO job FROM engine_jobs WHERE id = NEW.job_id;
        IF NOT FOUND OR job.status NOT IN ('pending', 'running', 'waiting') THEN
            RAISE EXCEPTION 'role % writes audit entries only for a job it runs (job %)',
                current_user, coalesce(NEW.job_id::text, 'none')
                USING ERRCODE = 'insufficient_privilege';
        END IF;
        IF NEW.actor IS DISTINCT FROM job.submitted_by AND NEW.actor <> 'job ' || job.id
           AND NEW.action NOT IN ('signal_refused', 'self_approval') THEN
            RAISE EXCEPTION 'role % may not write an audit entry as %: only as the submitter of job % (%) or as job %',
                current_user, NEW.actor, job.id, coalesce(job.submitted_by, 'none'), job.id
                USING ERRCODE = 'insufficient_privilege';
        END IF;
    END IF;
    RETURN NEW;
END
$$;
