-- queue_send_many --
-- A message is a row; inserted in the caller's transaction, it exists (and the NOTIFY that wakes idle receivers is sent) only if that transaction commits.
WITH sent AS (
    INSERT INTO engine_queue (body, visible_at)
    SELECT m.body, clock_timestamp() + make_interval(secs => m.delay_s)
    FROM unnest(%(bodies)s::text[], %(delays)s::float8[]) AS m (body, delay_s)
    RETURNING id
)
SELECT pg_notify('engine_queue', '') WHERE EXISTS (SELECT 1 FROM sent);

-- queue_receive_visible_many --
-- SKIP LOCKED: concurrent receivers never take the same row, and a fresh receipt per delivery makes every older receipt of that row stale.
UPDATE engine_queue AS q
SET visible_at = clock_timestamp() + make_interval(secs => %(visibility_s)s::float8),
    receive_count = q.receive_count + 1,
    receipt = gen_random_uuid()
FROM (
    SELECT id
    FROM engine_queue
    WHERE visible_at <= clock_timestamp()
    ORDER BY visible_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
) AS due
WHERE q.id = due.id
RETURNING q.id, q.body, q.receipt, q.receive_count;

-- queue_select_next_visible --
-- Seconds (database clock) until the earliest hidden or delayed row becomes visible; NULL when the queue is empty.
SELECT extract(epoch FROM min(visible_at) - clock_timestamp())::float8 AS wait_s
FROM engine_queue;

-- queue_extend_if_receipt_many --
-- Only the latest receipt of a row extends it: a row received again or deleted since is not returned.
UPDATE engine_queue AS q
SET visible_at = clock_timestamp() + make_interval(secs => %(visibility_s)s::float8)
FROM unnest(%(ids)s::bigint[], %(receipts)s::uuid[]) AS r (id, receipt)
WHERE q.id = r.id AND q.receipt = r.receipt
RETURNING q.id, q.receipt;

-- queue_release_if_receipt_many --
-- Only the latest receipt of a row releases it; waiting receivers are woken because the row is visible at once.
WITH released AS (
    UPDATE engine_queue AS q
    SET visible_at = clock_timestamp()
    FROM unnest(%(ids)s::bigint[], %(receipts)s::uuid[]) AS r (id, receipt)
    WHERE q.id = r.id AND q.receipt = r.receipt
    RETURNING q.id
)
SELECT pg_notify('engine_queue', '') WHERE EXISTS (SELECT 1 FROM released);

-- queue_delete_if_receipt_many --
-- Only the latest receipt of a row deletes it: a stale receipt deletes nothing (that copy was lost).
DELETE FROM engine_queue AS q
USING unnest(%(ids)s::bigint[], %(receipts)s::uuid[]) AS r (id, receipt)
WHERE q.id = r.id AND q.receipt = r.receipt;

-- queue_listen --
-- Receivers wait on this channel; publish and release notify it, and NOTIFY is delivered only on commit.
LISTEN engine_queue;

-- queue_notify --
-- Wakes every waiting receiver (used on close to end this transport's own wait); a spurious wake-up only costs one empty receive.
SELECT pg_notify('engine_queue', '');

-- queue_receiver_commit_async --
-- Only for the receiving connection (never claims, checkpoints or in-transaction deletes): a receive lost in a server crash only makes its message visible again, so its commit need not wait for the WAL flush.
SET synchronous_commit = off;

-- queue_select_depth --
-- Read-only: how many messages wait and how many are visible now (health checks); it changes nothing.
SELECT count(*)::bigint AS messages,
       count(*) FILTER (WHERE visible_at <= clock_timestamp())::bigint AS visible
FROM engine_queue;
