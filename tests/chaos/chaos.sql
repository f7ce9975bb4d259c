-- clock --
-- Faults are stamped by the database clock (the admin connection: same server), the clock of the rows they are compared with.
SELECT clock_timestamp() AS at;

-- running_select --
-- Step runs under a live lease: their owners are mid-step, the workers a fault may hit.
SELECT s.id, s.job_id, s.step, s.attempts, s.max_attempts, s.lease_owner, j.flow, j.params
FROM engine_step_runs AS s
JOIN engine_jobs AS j ON j.id = s.job_id
WHERE s.status = 'running' AND s.lease_expires_at > clock_timestamp()
ORDER BY s.id;

-- running_select_all --
-- Every running step run, live lease or not: what an outage or a dead worker takes away.
SELECT id, attempts, lease_owner
FROM engine_step_runs
WHERE status = 'running'
ORDER BY id;

-- step_runs_select --
-- The state of some step runs, read to decide when a fault is over and how long recovery took.
SELECT id, job_id, step, status, attempts, max_attempts, lease_owner, finished_at
FROM engine_step_runs
WHERE id = ANY (%(ids)s::uuid[]);

-- step_runs_select_some --
-- Step runs to send duplicate messages for: any status, a seeded sample.
SELECT s.id, s.job_id, s.status
FROM engine_step_runs AS s
ORDER BY s.id;

-- job_select_by_n --
-- Chaos jobs by their job number: a rolled-back submit must leave none.
SELECT id, status
FROM engine_jobs
WHERE flow = 'chaos' AND (params->>'n')::int = ANY (%(ns)s::int[]);

-- jobs_active_select --
-- Active chaos jobs: submitting their parameters again must return them.
SELECT id, params
FROM engine_jobs
WHERE flow = 'chaos' AND status IN ('pending', 'running')
ORDER BY created_at, id;

-- job_status_by_id --
-- One job's status (ERP jobs are chained: costing of the next period needs this one done).
SELECT status FROM engine_jobs WHERE id = %(id)s;

-- progress --
-- Read-only progress: after the faults stop, no change in these for the whole bound means whatever is active is stranded.
SELECT count(*) AS jobs,
       count(*) FILTER (WHERE status IN ('pending', 'running')) AS active,
       count(*) FILTER (WHERE status = 'done') AS done,
       (SELECT count(*) FROM engine_step_runs) AS steps,
       (SELECT count(*) FROM engine_step_runs WHERE status IN ('done', 'dead', 'cancelled'))
         AS steps_ended,
       (SELECT coalesce(sum(attempts), 0) FROM engine_step_runs) AS attempts
FROM engine_jobs;

-- sessions_terminate_by_app --
-- pg_terminate_backend of one worker's sessions (every process sets PGAPPNAME=chaos:<name>).
SELECT count(pg_terminate_backend(pid)) AS terminated
FROM pg_stat_activity
WHERE datname = %(db)s AND application_name = %(app)s;

-- sessions_select_by_app --
-- What one worker's sessions are doing: for a pause that outlived the bound.
SELECT state, wait_event_type, wait_event,
       round(extract(epoch FROM now() - state_change)::numeric, 1) AS in_state_s,
       left(regexp_replace(query, '\s+', ' ', 'g'), 120) AS query
FROM pg_stat_activity
WHERE datname = %(db)s AND application_name = %(app)s
ORDER BY state_change;

-- sessions_terminate_all --
-- The outage: every session of the database, workers and harness alike.
SELECT count(pg_terminate_backend(pid)) AS terminated
FROM pg_stat_activity
WHERE datname = %(db)s AND pid <> pg_backend_pid();

-- sessions_count_by_app --
-- A worker is up once it holds a session (start-up connects before it receives).
SELECT count(*) AS sessions
FROM pg_stat_activity
WHERE datname = %(db)s AND application_name = %(app)s;

-- oracle_jobs --
-- Oracles 7 and 8: every job, to compare with what was committed, rolled back or ambiguous (a child job is expected when its parent is).
SELECT id, flow, status, params, error, created_at, finished_at, parent_job_id
FROM engine_jobs
ORDER BY created_at, id;

-- oracle_chaos_effects --
-- Oracles 1 and 4: one effect per finished step run of the chaos flows (each step that takes a context), written by the attempt that checkpointed it; extra rows are double effects.
SELECT count(*) FILTER (WHERE s.status = 'done') AS done,
       coalesce(sum(greatest(e.n - 1, 0)), 0) AS double_effects,
       count(*) FILTER (WHERE s.status = 'done' AND e.n = 0) AS missing,
       coalesce(sum(e.unfenced), 0) AS unfenced,
       (SELECT count(*) FROM chaos_effects AS x
         WHERE NOT EXISTS (SELECT 1 FROM engine_step_runs AS r
                           WHERE r.job_id = x.job_id AND r.step = x.step
                             AND r.fanout_key = x.fanout_key)) AS orphans
FROM engine_step_runs AS s
JOIN engine_jobs AS j ON j.id = s.job_id
  AND j.flow IN ('chaos', 'chaos_keyed', 'chaos_close', 'chaos_kid')
  -- the pure steps of the newer flows take no context: they write no effect
  AND s.step NOT IN ('tally', 'seal')
CROSS JOIN LATERAL (
    SELECT count(*) AS n,
           count(*) FILTER (
               WHERE x.attempt <> s.attempts OR s.status <> 'done'
                  OR NOT EXISTS (SELECT 1 FROM engine_history AS v
                                 WHERE v.kind = 'succeeded' AND v.step_run_id = s.id
                                   AND v.worker = x.worker AND v.attempt = x.attempt)
           ) AS unfenced
    FROM chaos_effects AS x
    WHERE x.job_id = s.job_id AND x.step = s.step AND x.fanout_key = s.fanout_key
) AS e;

-- oracle_erp_effects --
-- Oracle 1 for the books: a posted document has exactly one journal (one line per account its lines net to) and its stock moves once, every journal balances.
SELECT
    (SELECT count(*) FROM erp_documents AS d
      WHERE d.status = 'posted'
        AND NOT EXISTS (SELECT 1 FROM erp_journals AS j
                        WHERE j.source_key = 'document:' || d.id)) AS posted_without_journal,
    (SELECT count(*) FROM erp_journals AS j
      WHERE j.source = 'document'
        AND NOT EXISTS (SELECT 1 FROM erp_documents AS d
                        WHERE j.source_key = 'document:' || d.id AND d.status = 'posted'))
      AS journal_without_posted,
    -- a document's journal has one line per account its lines net to non-zero, and a
    -- posted document one stock move per stock line (two for a transfer)
    (SELECT count(*) FROM erp_journals AS j
      WHERE j.source = 'document'
        AND (SELECT count(*) FROM erp_journal_lines AS l WHERE l.journal_id = j.id)
            <> (SELECT count(*) FROM (SELECT dl.account_code FROM erp_document_lines AS dl
                                      WHERE j.source_key = 'document:' || dl.document_id
                                      GROUP BY dl.account_code
                                      HAVING sum(dl.debit) - sum(dl.credit) <> 0) AS a))
    + (SELECT count(*) FROM erp_documents AS d
        WHERE d.status = 'posted'
          AND (SELECT count(*) FROM erp_stock_moves AS m WHERE m.document_id = d.id)
              <> (SELECT count(*) * CASE WHEN d.kind = 'stock_transfer' THEN 2 ELSE 1 END
                  FROM erp_document_lines AS dl
                  WHERE dl.document_id = d.id AND dl.item_id IS NOT NULL))
      AS journal_lines_off,
    (SELECT count(*) FROM (SELECT journal_id FROM erp_journal_lines
                           GROUP BY journal_id HAVING sum(debit) <> sum(credit)) AS u)
      AS unbalanced;

-- oracle_refused_by_key --
-- Oracle 1: an attempt turned away by a unique key is a second effect that only the key stopped.
SELECT count(*) AS refused
FROM engine_history
WHERE kind IN ('retried', 'dead_lettered') AND detail::text LIKE '%%duplicate key%%';

-- oracle_stranded_steps --
-- Oracles 5 and 13: once workers are quiet, nothing runs under an expired lease, nothing rests pending (or waiting) at its cap, no wait is past its deadline unwoken, and an ended job has no step run left active (waiting included).
SELECT count(*) FILTER (WHERE s.status = 'running' AND s.lease_expires_at <= clock_timestamp())
         AS expired_running,
       count(*) FILTER (WHERE s.status IN ('pending', 'waiting') AND s.attempts >= s.max_attempts)
         AS pending_at_cap,
       count(*) FILTER (WHERE s.status = 'waiting' AND s.wait_until <= clock_timestamp())
         AS waiting_past_deadline,
       count(*) FILTER (WHERE s.status IN ('pending', 'running', 'waiting')
                          AND j.status NOT IN ('pending', 'running')) AS left_in_ended_jobs
FROM engine_step_runs AS s
JOIN engine_jobs AS j ON j.id = s.job_id;

-- oracle_attempts --
-- Oracle 6: attempts go up by exactly one per claim (claimed and reclaimed events), come back only with a recorded release or a wait (invariant 14: waiting is not running the step), and never pass the cap.
SELECT count(*) FILTER (WHERE s.attempts > s.max_attempts) AS over_cap,
       count(*) FILTER (WHERE s.attempts <> c.claims - c.released) AS miscounted,
       coalesce(max(s.attempts), 0) AS max_used
FROM engine_step_runs AS s
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE v.kind IN ('claimed', 'reclaimed')) AS claims,
           count(*) FILTER (WHERE v.kind IN ('released', 'waiting')) AS released
    FROM engine_history AS v
    WHERE v.step_run_id = s.id
) AS c;

-- oracle_events --
-- What happened, counted from the append-only history (reclaims, fenced commits, releases, dead letters).
SELECT count(*) FILTER (WHERE kind = 'reclaimed') AS reclaims,
       count(*) FILTER (WHERE kind = 'fenced') AS fenced,
       count(*) FILTER (WHERE kind = 'released') AS released,
       count(*) FILTER (WHERE kind = 'claim_refused') AS claim_refused,
       count(*) FILTER (WHERE kind = 'dead_lettered') AS dead_lettered,
       count(*) FILTER (WHERE kind = 'message_dropped'
                          AND detail->>'reason' = 'unknown step run') AS unknown_messages
FROM engine_history;

-- oracle_refusal_attempts --
-- Invariant 14: a worker that lacks a flow uses no attempt of that flow's step runs (no claim event of its own).
SELECT count(*) AS claims
FROM engine_history AS v
JOIN engine_jobs AS j ON j.id = v.job_id
JOIN unnest(%(workers)s::text[], %(flows)s::text[]) AS r (worker, flow)
  ON split_part(v.worker, '/', 1) = r.worker AND j.flow = r.flow
WHERE v.kind IN ('claimed', 'reclaimed');

-- oracle_dead_messages --
-- Messages the transport dead-lettered (SQS redrive by receive count, poison): none is expected, nothing malformed is sent.
SELECT count(*) AS dead_messages
FROM engine_dead_letters
WHERE source = 'message';

-- oracle_overlap --
-- Oracle 9: no two jobs with one fingerprint were ever active at the same time.
SELECT count(*) AS overlapping
FROM engine_jobs AS a
JOIN engine_jobs AS b ON b.fingerprint = a.fingerprint AND b.id > a.id
WHERE tstzrange(a.created_at, coalesce(a.finished_at, 'infinity'))
   && tstzrange(b.created_at, coalesce(b.finished_at, 'infinity'));

-- oracle_key_overlap --
-- Concurrency keys counted per job (per step run for a key not per job; every chaos key has limit 1): the holds that checkpointed of two different jobs of one key never overlap, unless one job is an ancestor of the other (a child inherits its ancestors' slots). A hold runs from a claim to the checkpoint, through every wait on the way: an attempt that parked (waiting) keeps its slot until the step run is claimed again, so that claim continues the hold; a claim after a retry, a release, a fence or an expired lease starts a new one. Also: how many holds included a wait, and how often a step run waited for its key (over_limit refusals, its eager form included).
WITH RECURSIVE marks AS (
    SELECT e.step_run_id, e.kind, e.at, e.id,
           lag(e.kind) OVER (PARTITION BY e.step_run_id ORDER BY e.at, e.id) AS before
    FROM engine_history AS e
    JOIN engine_step_runs AS s ON s.id = e.step_run_id
    WHERE s.concurrency_key IS NOT NULL
      AND e.kind IN ('claimed', 'reclaimed', 'waiting', 'succeeded', 'retried', 'released',
                     'fenced', 'lease_lost', 'dead_lettered', 'cancelled')
), holds AS (
    SELECT m.*,
           sum(CASE WHEN m.kind = 'reclaimed'
                      OR (m.kind = 'claimed' AND m.before IS DISTINCT FROM 'waiting')
                    THEN 1 ELSE 0 END)
               OVER (PARTITION BY m.step_run_id ORDER BY m.at, m.id) AS hold
    FROM marks AS m
), spans AS (
    SELECT s.concurrency_key AS key, s.job_id,
           -- who holds: the job (limit per job) or the step run itself
           CASE WHEN s.concurrency_per_job THEN s.job_id ELSE s.id END AS holder,
           min(h.at) FILTER (WHERE h.kind IN ('claimed', 'reclaimed')) AS claimed,
           min(h.at) FILTER (WHERE h.kind = 'succeeded') AS ended,
           bool_or(h.kind = 'waiting') AS waited
    FROM holds AS h
    JOIN engine_step_runs AS s ON s.id = h.step_run_id
    WHERE h.hold > 0
    GROUP BY s.concurrency_key, s.job_id, s.id, s.concurrency_per_job, h.step_run_id, h.hold
    HAVING bool_or(h.kind = 'succeeded')
), lineage (job_id, ancestor) AS (
    SELECT j.id, j.parent_job_id FROM engine_jobs AS j WHERE j.parent_job_id IS NOT NULL
    UNION
    SELECT l.job_id, j.parent_job_id
    FROM lineage AS l
    JOIN engine_jobs AS j ON j.id = l.ancestor
    WHERE j.parent_job_id IS NOT NULL
)
SELECT (SELECT count(*) FROM spans AS a
        JOIN spans AS b ON b.key = a.key AND b.holder > a.holder
        WHERE a.claimed < b.ended AND b.claimed < a.ended
          AND NOT EXISTS (
              SELECT 1 FROM lineage AS l
              WHERE (l.job_id = a.job_id AND l.ancestor = b.job_id)
                 OR (l.job_id = b.job_id AND l.ancestor = a.job_id))) AS overlapping,
       (SELECT count(*) FROM spans) AS spans,
       (SELECT count(*) FROM spans WHERE waited) AS held_waiting,
       (SELECT count(*) FROM engine_history
        WHERE kind = 'claim_refused' AND detail ->> 'reason' = 'over_limit') AS waited;

-- books_item_costs --
-- Oracle 3: item costs, to the cent, compared with the clean run.
SELECT period, store_id, item_id, opening_qty, opening_value, receipt_qty, receipt_value,
       transfer_in_qty, transfer_in_value, average_cost, issue_qty, cogs_value,
       transfer_out_qty, transfer_out_value, closing_qty, closing_value
FROM erp_item_costs
ORDER BY period, store_id, item_id;

-- books_opening_balances --
-- Oracle 3: on-hand carried forward, compared with the clean run.
SELECT store_id, item_id, period, qty, value
FROM erp_opening_balances
ORDER BY period, store_id, item_id;

-- books_documents --
-- Oracle 3: what posting did to each document, compared with the clean run.
SELECT id, status, reject_reason
FROM erp_documents
ORDER BY id;

-- books_journal_lines --
-- Oracle 3: every journal line by its journal's source key (ids differ between runs), compared with the clean run.
SELECT j.source, j.source_key, j.period, j.store_id, l.line_no, l.account_code,
       l.store_id AS line_store_id, l.debit, l.credit
FROM erp_journals AS j
JOIN erp_journal_lines AS l ON l.journal_id = j.id
ORDER BY j.source_key, l.line_no;

-- books_periods --
-- Oracle 3: period statuses (costed once), compared with the clean run.
SELECT period, status
FROM erp_periods
ORDER BY period;

-- schedule_exists --
-- Whether the chaos schedule was added already (one per run, added by its first round).
SELECT id FROM engine_schedules WHERE name = %(schedule)s;

-- schedule_age --
-- Makes the chaos schedule due now (time moved by ageing the row); each ageing is a new scheduled time.
UPDATE engine_schedules
SET next_fire_at = clock_timestamp() - interval '1 second'
WHERE name = %(schedule)s
RETURNING next_fire_at;

-- schedule_fired --
-- Whether a scheduled time of the chaos schedule has fired (its fire row is committed).
SELECT f.job_id
FROM engine_schedule_fires AS f
JOIN engine_schedules AS s ON s.id = f.schedule_id
WHERE s.name = %(schedule)s AND f.scheduled_for = %(at)s;

-- schedule_jobs --
-- The jobs the chaos schedule fired: expected to finish, like the harness's own.
SELECT f.job_id
FROM engine_schedule_fires AS f
JOIN engine_schedules AS s ON s.id = f.schedule_id
WHERE s.name = %(schedule)s AND f.job_id IS NOT NULL;

-- oracle_schedule --
-- Each time made due fired once with one job, and the schedule submitted no job besides its fires' (one job per scheduled time, whatever worker died while firing).
SELECT
    (SELECT count(*) FROM unnest(%(times)s::timestamptz[]) AS t (at)
      WHERE NOT EXISTS (SELECT 1 FROM engine_schedule_fires AS f
                        JOIN engine_schedules AS s ON s.id = f.schedule_id
                        WHERE s.name = %(schedule)s AND f.scheduled_for = t.at
                          AND f.job_id IS NOT NULL)) AS unfired,
    (SELECT count(*) FROM engine_jobs WHERE submitted_by = 'schedule ' || %(schedule)s) AS jobs,
    (SELECT count(DISTINCT f.job_id) FROM engine_schedule_fires AS f
      JOIN engine_schedules AS s ON s.id = f.schedule_id
      WHERE s.name = %(schedule)s) AS fired_jobs,
    (SELECT count(*) FROM engine_schedule_fires AS f
      JOIN engine_schedules AS s ON s.id = f.schedule_id
      WHERE s.name = %(schedule)s) AS fires;

-- jobs_status_select --
-- The status of some jobs: a close-like parent failed by its planned child is retried by the harness.
SELECT id, status FROM engine_jobs WHERE id = ANY (%(ids)s::uuid[]);

-- gate_open --
-- Opens the gate of a close-like parent's failing child (the data a retry finds fixed).
INSERT INTO chaos_gates (n) VALUES (%(n)s) ON CONFLICT (n) DO NOTHING RETURNING n;

-- oracle_uncharged --
-- Invariant 18: an attempt is charged (retried, dead-lettered) only for the step's own exception. Every failure a chaos step raises on purpose says "planned"; the ERP steps raise none in a chaos run. Any other charge: a neighbour, a timeout, a lost connection, a pooler, a fence paid by a step that did not raise.
SELECT e.id, e.kind, e.at, e.job_id, e.step_run_id, e.worker, e.attempt, j.flow, s.step,
       left(coalesce(e.detail ->> 'error', e.detail ->> 'reason', ''), 300) AS why
FROM engine_history AS e
JOIN engine_step_runs AS s ON s.id = e.step_run_id
JOIN engine_jobs AS j ON j.id = e.job_id
WHERE e.kind IN ('retried', 'dead_lettered')
  AND coalesce(e.detail ->> 'error', e.detail ->> 'reason', '') NOT LIKE '%%planned%%'
ORDER BY e.id;

-- oracle_zombie_commits --
-- Fencing from the history: a step run's checkpoint (succeeded) is by the worker and attempt of the last claim before it; one after another worker's (or a later attempt's) claim was committed by a zombie whose lease had been reclaimed.
SELECT v.id, v.at, v.step_run_id, v.job_id, v.worker, v.attempt,
       c.worker AS claimed_by, c.attempt AS claimed_attempt, c.at AS claimed_at, c.kind AS claim
FROM engine_history AS v
CROSS JOIN LATERAL (
    SELECT x.worker, x.attempt, x.at, x.kind
    FROM engine_history AS x
    WHERE x.step_run_id = v.step_run_id AND x.kind IN ('claimed', 'reclaimed')
      AND (x.at, x.id) < (v.at, v.id)
    ORDER BY x.at DESC, x.id DESC
    LIMIT 1
) AS c
WHERE v.kind = 'succeeded'
  AND (c.worker IS DISTINCT FROM v.worker OR c.attempt IS DISTINCT FROM v.attempt)
ORDER BY v.id;

-- key_holders_over_limit --
-- Sampled while the run goes (the key_overlaps oracle): the holders of every key as engine_concurrency_holders defines them (running under a live lease, or waiting or woken with its slot kept), and those that see at least the key's limit of other holders, not counting their own job's runs (a limit per job), their ancestors' (a child inherits its ancestors' slots) nor their descendants' (the same inheritance, seen from the parent).
WITH h AS (
    SELECT s.id, s.job_id, s.concurrency_key AS key, s.concurrency_limit AS lim,
           s.concurrency_per_job AS per_job, s.status, s.lease_owner
    FROM engine_step_runs AS s
    WHERE s.concurrency_key IS NOT NULL
      AND ((s.status = 'running' AND s.lease_expires_at > clock_timestamp())
           OR (s.concurrency_kept AND s.status IN ('waiting', 'pending')))
), a AS (
    SELECT h.*, engine_job_ancestors(h.job_id) AS anc FROM h
)
SELECT x.key, x.lim, x.per_job, x.id, x.job_id, x.status, x.lease_owner,
       count(DISTINCT CASE WHEN x.per_job THEN o.job_id ELSE o.id END) AS others,
       array_agg(DISTINCT o.job_id::text || ':' || o.status || ':'
                 || coalesce(o.lease_owner, '-')) AS other_holders,
       clock_timestamp() AS at
FROM a AS x
JOIN a AS o ON o.key = x.key AND o.id <> x.id
 AND (NOT x.per_job OR o.job_id <> x.job_id)
 AND o.job_id <> ALL (x.anc) AND x.job_id <> ALL (o.anc)
GROUP BY x.key, x.lim, x.per_job, x.id, x.job_id, x.status, x.lease_owner
HAVING count(DISTINCT CASE WHEN x.per_job THEN o.job_id ELSE o.id END) >= x.lim;

-- key_holders_count --
-- How many key holders a sample saw (that the sampler saw keys held at all).
SELECT count(*) AS holders
FROM engine_step_runs AS s
WHERE s.concurrency_key IS NOT NULL
  AND ((s.status = 'running' AND s.lease_expires_at > clock_timestamp())
       OR (s.concurrency_kept AND s.status IN ('waiting', 'pending')));

-- worker_registered --
-- Behind PgBouncer a worker's sessions are the pooler's (no application name of its own): it is up once its roster row says running, from this process.
SELECT count(*) AS sessions
FROM engine_workers
WHERE id = %(id)s AND pid = %(pid)s AND status = 'running';

-- renewals_by_owner --
-- Lease renewals of some step runs by one worker: a partition cuts a worker whose heartbeat has its connection open already.
SELECT count(*) AS renewals
FROM engine_history
WHERE kind = 'renewed' AND step_run_id = ANY (%(ids)s::uuid[]) AND worker LIKE %(prefix)s;

-- parks_select --
-- When some step runs parked (a signal, a sleep, their children): a step run a fault took away has recovered once it ran again up to its wait; what it waits for then (an operator's signal, its children, a time) is not the fault's.
SELECT step_run_id, at
FROM engine_history
WHERE kind = 'waiting' AND step_run_id = ANY (%(ids)s::uuid[])
ORDER BY at;

-- key_refusals_select --
-- When a worker tried to take over some step runs and was refused because their concurrency key's slot was held by another job: the lapsed lease was noticed and acted on (the slot passed to the next holder, as a lapsed holder counts for nothing); the wait for the slot after that is the key's, not the fault's.
SELECT step_run_id, at
FROM engine_history
WHERE kind = 'claim_refused' AND detail ->> 'reason' = 'over_limit'
  AND step_run_id = ANY (%(ids)s::uuid[])
ORDER BY at;
