-- audit_insert --
-- engine_audit is append-only (the trigger refuses UPDATE, DELETE, TRUNCATE); the row joins the action's transaction, so it exists exactly when the action committed.
INSERT INTO engine_audit (actor, source, action, target_kind, target_id, job_id, reason, detail)
VALUES (%(actor)s, %(source)s, %(action)s, %(target_kind)s, %(target_id)s, %(job_id)s,
        %(reason)s, %(detail)s)
RETURNING id, at, actor, source, action, target_kind, target_id, job_id, reason, detail;

-- audit_select_recent --
-- Read-only, newest first (id follows commit order closely enough for people; `at` is the database clock); a job's entries through the partial index on job_id. Each filter left NULL matches every entry: who (exact), the action (exact), at or after `since`, before `until`.
SELECT id, at, actor, source, action, target_kind, target_id, job_id, reason, detail
FROM engine_audit
WHERE (%(job_id)s::uuid IS NULL OR job_id = %(job_id)s::uuid)
  AND (%(actor)s::text IS NULL OR actor = %(actor)s::text)
  AND (%(action)s::text IS NULL OR action = %(action)s::text)
  AND (%(since)s::timestamptz IS NULL OR at >= %(since)s::timestamptz)
  AND (%(until)s::timestamptz IS NULL OR at < %(until)s::timestamptz)
ORDER BY id DESC
LIMIT %(limit)s;

-- audit_select_chain_after --
-- Read-only, in chain order from position `after` (keyset, a batch at a time); the canonical text is the one the chain's trigger hashed (migration 0026).
SELECT seq, id, prev_hash, hash, engine_audit_canonical(a) AS canonical
FROM engine_audit AS a
WHERE seq > %(after)s
ORDER BY seq
LIMIT %(limit)s;

-- audit_select_unchained --
-- Read-only: committed entries the chain never saw (only possible with its trigger disabled), oldest first.
SELECT id FROM engine_audit WHERE seq IS NULL ORDER BY id LIMIT %(limit)s;

-- audit_select_head --
-- Read-only: the chain's last position and hash as the trigger recorded them (one row, or none if someone deleted it).
SELECT seq, hash, last_id FROM engine_audit_head;

-- audit_insert_many --
-- audit_insert for a bulk action's chunk: one entry per item (its target, job and detail), one actor, source, action and reason, in one statement; each row joins the audit chain as a single one does (its trigger is per row), in the action's transaction.
INSERT INTO engine_audit (actor, source, action, target_kind, target_id, job_id, reason, detail)
SELECT %(actor)s, %(source)s, %(action)s, %(target_kind)s, e.target_id, e.job_id, %(reason)s,
       e.detail
FROM unnest(%(target_ids)s::text[], %(job_ids)s::uuid[], %(details)s::jsonb[])
     AS e(target_id, job_id, detail);
