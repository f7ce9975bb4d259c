-- outbox_lock_unpublished_many --
-- SKIP LOCKED: concurrent relays never hand the same row on at once; rows of uncommitted transactions are invisible, so nothing is published before its commit.
SELECT o.id, o.step_run_id, s.job_id,
       greatest(0, extract(epoch FROM o.deliver_at - clock_timestamp()))::float8 AS delay_s
FROM engine_outbox AS o
JOIN engine_step_runs AS s ON s.id = o.step_run_id
WHERE o.published_at IS NULL
  AND (%(ids)s::bigint[] IS NULL OR o.id = ANY (%(ids)s::bigint[]))
  AND o.deliver_at <= clock_timestamp() + make_interval(secs => %(horizon_s)s)
ORDER BY o.id
LIMIT %(limit)s
FOR UPDATE OF o SKIP LOCKED;

-- outbox_mark_published_many --
-- Marked after the rows were handed on: a crash in between causes a harmless duplicate, never a loss.
UPDATE engine_outbox
SET published_at = clock_timestamp()
WHERE id = ANY (%(ids)s::bigint[]) AND published_at IS NULL
RETURNING id;

-- outbox_notify --
-- Sent in a caller's transaction that wrote outbox rows: PostgreSQL delivers it only on commit, so a relay wakes for committed rows only (invariant 8).
SELECT pg_notify('engine_outbox', '');

-- outbox_listen --
-- A relay's own connection listens for committed outbox rows.
LISTEN engine_outbox;
