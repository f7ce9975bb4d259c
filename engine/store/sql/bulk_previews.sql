-- bulk_preview_insert --
-- A dry run's frozen set, written once; only applied_at and applied_by ever change (bulk_preview_claim_if_open).
INSERT INTO engine_bulk_previews (id, action, filter, items, counts, total, created_by, expires_at)
VALUES (%(id)s, %(action)s, %(filter)s, %(items)s, %(counts)s, %(total)s, %(created_by)s,
        clock_timestamp() + make_interval(secs => %(ttl_s)s))
RETURNING id, created_at, expires_at;

-- bulk_preview_claim_if_open --
-- A preview is applied at most once and never after it expired (database clock): the guard is restated here, under the row's lock, so two applies of one preview cannot both pass; zero rows: expired, applied already or no such preview (bulk_preview_select_one says which).
UPDATE engine_bulk_previews
SET applied_at = clock_timestamp(), applied_by = %(applied_by)s
WHERE id = %(id)s AND applied_at IS NULL AND expires_at > clock_timestamp()
RETURNING id, action, filter, items, total, created_by, created_at, expires_at, applied_at;

-- bulk_preview_select_one --
-- Read only: one preview, to show it or to say why it cannot be applied (expired is judged by the database clock).
SELECT id, action, filter, items, counts, total, created_by, created_at, expires_at,
       applied_at, applied_by, expires_at <= clock_timestamp() AS expired
FROM engine_bulk_previews WHERE id = %(id)s;
