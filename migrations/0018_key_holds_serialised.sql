-- A lapsed lease holds nothing, and whatever keeps a key's slot serialises
-- with the claims of that key (issue 27, item 1).
--
-- A claim of a key takes the key's advisory lock, then counts its holders: a
-- running step run counts only while its lease is live. A holder whose lease
-- lapsed (its worker paused past it, its heartbeat starved) must then never
-- keep, take or hand on the slot afterwards: not by its checkpoint (its
-- writes would commit beside the next holder's), not by parking on a signal
-- or on its children (the park keeps the slot by status, and the children
-- inherit it), not by renewing its lease. And the check must not race a
-- claim: a checkpoint that found its lease live an instant before it lapsed,
-- but commits after a claim counted it as lapsed, would overlap the next
-- holder just the same.
--
-- engine_concurrency_hold(key, job, run, token) is that check, for a step
-- run `run` of job `job` holding `key` by the lease `token`: true at once
-- without a key; else it locks the job row (the one lock order: job, then its
-- key; NULL job: a renewal, which holds no row lock and locks no job row),
-- then the key's transaction-scoped advisory lock (waiting for a claim of
-- the key in progress to commit; a claim after it waits for this
-- transaction's commit), then looks, on a fresh snapshot (VOLATILE), whether
-- the lease is still ours and live. So a keyed checkpoint or park either
-- commits before a claim counts the holders (and is counted, or is done) or
-- finds its lease lapsed and writes nothing.
CREATE FUNCTION engine_concurrency_hold(key text, job uuid, run uuid, token uuid)
RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF key IS NULL THEN
        RETURN true;
    END IF;
    IF job IS NOT NULL THEN
        PERFORM 1 FROM engine_jobs WHERE id = job FOR UPDATE;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('engine.concurrency:' || key, 0));
    RETURN EXISTS (
        SELECT 1 FROM engine_step_runs
        WHERE id = run AND lease_token = token AND status = 'running'
          AND lease_expires_at > clock_timestamp());
END
$$;

GRANT EXECUTE ON FUNCTION engine_concurrency_hold(text, uuid, uuid, uuid) TO engine_worker;
