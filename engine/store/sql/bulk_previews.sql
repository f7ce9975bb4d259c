-- bulk_preview_insert --
-- A dry run's frozen set, written once; only applied_at and applied_by ever change (bulk_preview_mark_applied_if_complete).
INSERT INTO engine_bulk_previews (id, action, filter, items, counts, total, created_by, expires_at)
VALUES (%(id)s, %(action)s, %(filter)s, %(items)s, %(counts)s, %(total)s, %(created_by)s,
        clock_timestamp() + make_interval(secs => %(ttl_s)s))
RETURNING id, created_at, expires_at;

-- bulk_preview_lock --
-- Each transaction of an apply locks its preview's row first (FOR NO KEY UPDATE): two applies of one preview take turns, so an item's outcome, read after the lock, is never missed by the other; what it says (applied, expired, begun: an outcome recorded) is read under that lock. Zero rows: no such preview.
SELECT p.id, p.action, p.total, p.applied_at, p.applied_by, p.expires_at,
       p.expires_at <= clock_timestamp() AS expired,
       EXISTS (SELECT 1 FROM engine_bulk_preview_outcomes AS o WHERE o.preview_id = p.id) AS begun
FROM engine_bulk_previews AS p WHERE p.id = %(id)s
FOR NO KEY UPDATE OF p;

-- bulk_outcome_select_recorded --
-- Read under the preview's lock: which of these items have an outcome already (acted on, skipped or refused by an earlier run of the apply); joined to the list, so each item is one probe of the primary key (an ANY list against a scan grows with the outcomes times the chunk).
SELECT o.item
FROM unnest(%(items)s::text[]) AS i(item)
JOIN engine_bulk_preview_outcomes AS o ON o.preview_id = %(id)s AND o.item = i.item;

-- bulk_outcome_insert_many --
-- Each item's outcome, in the transaction that acted on it (or found it changed, or refused): the primary key refuses a second outcome for one item, so an item is never acted on twice.
INSERT INTO engine_bulk_preview_outcomes (preview_id, item, outcome, why)
SELECT %(id)s, item, outcome, why
FROM unnest(%(items)s::text[], %(outcomes)s::text[], %(whys)s::text[]) AS o(item, outcome, why);

-- bulk_outcome_counts --
-- Read only: a preview's outcomes by kind (what earlier runs of its apply did, for the report).
SELECT outcome, count(*) AS n FROM engine_bulk_preview_outcomes
WHERE preview_id = %(id)s GROUP BY outcome;

-- bulk_preview_mark_applied_if_complete --
-- A preview is applied once every item has an outcome (under the row's lock, by the apply that recorded the last ones); zero rows: items are left (locked by someone else: a re-run finishes them).
UPDATE engine_bulk_previews AS p
SET applied_at = clock_timestamp(), applied_by = %(applied_by)s
WHERE p.id = %(id)s AND p.applied_at IS NULL
  AND p.total = (SELECT count(*) FROM engine_bulk_preview_outcomes AS o WHERE o.preview_id = p.id)
RETURNING p.applied_at;

-- bulk_preview_select_one --
-- Read only: one preview, to show it or to say why it cannot be applied (expired is judged by the database clock).
SELECT id, action, filter, items, counts, total, created_by, created_at, expires_at,
       applied_at, applied_by, expires_at <= clock_timestamp() AS expired
FROM engine_bulk_previews WHERE id = %(id)s;
