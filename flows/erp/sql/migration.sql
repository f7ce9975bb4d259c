-- items_lock --
-- New items take ids from max(id) + n: chunks loading items at once are serialised here.
LOCK TABLE erp_items IN SHARE ROW EXCLUSIVE MODE;

-- staged_keys_create --
-- The natural key and original line of every valid row of the file, for the plan's duplicate check; dropped by the step (steps grouped in one transaction each create it), at commit at the latest.
CREATE TEMP TABLE staged_keys (
    row_number integer, key text[], brand_code text, raw text, note text
) ON COMMIT DROP;

-- staged_keys_copy --
-- Streams the valid rows' keys in (row number, key values in KEYS order, an item's brand, original line, what a reason adds when that line is kept cut).
COPY staged_keys (row_number, key, brand_code, raw, note) FROM STDIN;

-- staged_keys_delete_unknown_brand --
-- An item row naming a brand that does not exist is rejected by its chunk: it is no valid row, and takes no sku from a later row that corrects it.
DELETE FROM staged_keys AS k
WHERE NOT EXISTS (SELECT FROM erp_brands AS b WHERE b.code = k.brand_code);

-- staged_keys_delete_unresolved_openings --
-- An opening-balance row naming a store, item or period that does not exist is rejected by its chunk with that name: it takes no key.
DELETE FROM staged_keys AS k
WHERE NOT EXISTS (SELECT FROM erp_stores AS s WHERE s.code = k.key[1])
   OR NOT EXISTS (SELECT FROM erp_items AS i WHERE i.sku = k.key[2])
   OR NOT EXISTS (SELECT FROM erp_periods AS p WHERE p.period = k.key[3]);

-- rejects_insert_duplicates --
-- A key is taken by the first valid row that states it (staged_keys holds the valid rows only): a later valid row repeating it is rejected naming that row (which alone may load), across the whole file, before any chunk loads.
INSERT INTO erp_migration_rejects (job_fingerprint, row_number, reason, raw)
SELECT %(key)s, k.row_number,
       format('duplicate of row %%s (%%s)', k.first_row,
              (SELECT string_agg(u.name || ' ' || u.value, ', ' ORDER BY u.position)
               FROM unnest(%(names)s::text[], k.key) WITH ORDINALITY AS u (name, value, position)))
           || k.note,
       k.raw
FROM (SELECT row_number, key, raw, note, min(row_number) OVER (PARTITION BY key) AS first_row
      FROM staged_keys) AS k
WHERE k.row_number > k.first_row
ORDER BY k.row_number
ON CONFLICT (job_fingerprint, row_number) DO NOTHING;

-- staged_keys_drop --
-- The plan is done with the keys: gone now, so another plan in this transaction can stage its own.
DROP TABLE staged_keys;

-- staged_items_create --
-- Validated rows of one chunk; dropped by the step (chunks grouped in one transaction each create it), at commit at the latest.
CREATE TEMP TABLE staged_items (
    row_number integer, sku text, brand_code text, name text,
    standard_cost numeric(14,4), price numeric(14,2)
) ON COMMIT DROP;

-- staged_items_copy --
-- Streams the chunk's valid rows in, in the columns of ItemRow.
COPY staged_items (row_number, sku, brand_code, name, standard_cost, price) FROM STDIN;

-- staged_items_drop --
-- The chunk is loaded: its staging table goes now, so another chunk in this transaction can stage its own.
DROP TABLE staged_items;

-- staged_items_cost_changes --
-- Existing items whose standard cost the chunk changes, read under items_lock before the upsert: the file is the new truth, and each change is reported old -> new, never silently overwritten.
SELECT s.row_number, s.sku, i.standard_cost AS old, s.standard_cost AS new
FROM staged_items AS s
JOIN erp_items AS i ON i.sku = s.sku
JOIN erp_brands AS b ON b.code = s.brand_code
WHERE i.standard_cost <> s.standard_cost
ORDER BY s.row_number;

-- items_upsert_from_staged --
-- Natural key sku: a rerun with the same values updates nothing (IS DISTINCT FROM guard).
WITH resolved AS (
    SELECT s.*, b.id AS brand_id,
           (SELECT coalesce(max(id), 0) FROM erp_items)
               + row_number() OVER (ORDER BY s.row_number) AS new_id
    FROM staged_items AS s JOIN erp_brands AS b ON b.code = s.brand_code
),
upserted AS (
    INSERT INTO erp_items AS i (id, brand_id, sku, name, standard_cost, price)
    SELECT new_id, brand_id, sku, name, standard_cost, price FROM resolved
    ON CONFLICT (sku) DO UPDATE
        SET brand_id = EXCLUDED.brand_id, name = EXCLUDED.name,
            standard_cost = EXCLUDED.standard_cost, price = EXCLUDED.price
        WHERE (i.brand_id, i.name, i.standard_cost, i.price)
              IS DISTINCT FROM (EXCLUDED.brand_id, EXCLUDED.name, EXCLUDED.standard_cost, EXCLUDED.price)
    RETURNING (xmax = 0) AS inserted
)
SELECT count(*) FILTER (WHERE inserted)::int AS inserted,
       count(*) FILTER (WHERE NOT inserted)::int AS updated
FROM upserted;

-- staged_items_unknown_brand --
-- Rows naming a brand that does not exist are rejected, not guessed.
SELECT row_number, brand_code FROM staged_items
WHERE brand_code NOT IN (SELECT code FROM erp_brands) ORDER BY row_number;

-- staged_openings_create --
-- Validated opening-balance rows of one chunk; dropped by the step (chunks grouped in one transaction each create it), at commit at the latest.
CREATE TEMP TABLE staged_openings (
    row_number integer, store_code text, sku text, period text,
    qty numeric(14,3), value numeric(16,2)
) ON COMMIT DROP;

-- staged_openings_copy --
-- Streams the chunk's valid rows in, in the columns of OpeningRow.
COPY staged_openings (row_number, store_code, sku, period, qty, value) FROM STDIN;

-- staged_openings_drop --
-- The chunk is loaded: its staging table goes now, so another chunk in this transaction can stage its own.
DROP TABLE staged_openings;

-- staged_openings_unresolved --
-- Rows whose store, item or period does not exist are rejected with the name that failed.
SELECT o.row_number,
       CASE WHEN s.id IS NULL THEN 'unknown store ' || o.store_code
            WHEN i.id IS NULL THEN 'unknown item ' || o.sku
            ELSE 'unknown period ' || o.period END AS reason
FROM staged_openings AS o
LEFT JOIN erp_stores AS s ON s.code = o.store_code
LEFT JOIN erp_items AS i ON i.sku = o.sku
LEFT JOIN erp_periods AS p ON p.period = o.period
WHERE s.id IS NULL OR i.id IS NULL OR p.period IS NULL
ORDER BY o.row_number;

-- openings_lock_periods --
-- Loading opening balances writes their periods' books: share-lock each period row (in one order), as every writer does, so a close waits or is seen.
SELECT period, status FROM erp_periods
WHERE period IN (SELECT period FROM staged_openings)
ORDER BY period
FOR SHARE;

-- openings_claim_first_periods --
-- Opening balances are loaded into a store's first period only: this is where it starts, unless it has a first period already (the partial unique index) or a row for this period (carried forward); a closed or costed period starts no store.
INSERT INTO erp_store_periods (store_id, period, opening)
SELECT DISTINCT s.id, o.period, 'loaded'
FROM staged_openings AS o
JOIN erp_stores AS s ON s.code = o.store_code
JOIN erp_periods AS p ON p.period = o.period AND p.status = 'open'
WHERE NOT EXISTS (SELECT FROM erp_average_solves AS a WHERE a.period = o.period)
ORDER BY 1, 2
ON CONFLICT DO NOTHING;

-- openings_lock_store_periods --
-- The (store, period) rows the chunk would write, locked: a costing of one of them (which updates its row) either has committed, and is seen below, or waits for this chunk and reads its balances.
SELECT sp.store_id, sp.period FROM erp_store_periods AS sp
JOIN erp_stores AS s ON s.id = sp.store_id
JOIN staged_openings AS o ON o.store_code = s.code AND o.period = sp.period
ORDER BY sp.store_id, sp.period
FOR UPDATE OF sp;

-- staged_openings_refused --
-- Resolvable rows the books refuse, with the reason: openings of a closed or costed period, of a store already costed for it, carried forward from its previous period, or outside the store's first period are never overwritten.
SELECT o.row_number,
       CASE WHEN p.status = 'closed' THEN format('period %%s is closed; its opening balances are never overwritten', o.period)
            WHEN p.status = 'costed' THEN format('period %%s is costed; its opening balances are never overwritten', o.period)
            WHEN sp.costed_at IS NOT NULL THEN format('store %%s is costed for %%s; its opening balances are never overwritten', o.store_code, o.period)
            WHEN a.period IS NOT NULL THEN format('period %%s is being costed (its averages were solved at %%s): an opening loaded now would be costed with stale averages; opening balances are loaded before a period''s costing starts', o.period, to_char(a.solved_at, 'YYYY-MM-DD HH24:MI:SS'))
            WHEN sp.opening = 'carried' THEN format('store %%s''s %%s opening balances were carried forward by costing the period before; they are never overwritten', o.store_code, o.period)
            ELSE format('store %%s''s books start in %%s: opening balances are loaded only into a store''s first period', o.store_code,
                        (SELECT f.period FROM erp_store_periods AS f WHERE f.store_id = s.id AND f.opening = 'loaded'))
       END AS reason
FROM staged_openings AS o
JOIN erp_stores AS s ON s.code = o.store_code
JOIN erp_items AS i ON i.sku = o.sku
JOIN erp_periods AS p ON p.period = o.period
LEFT JOIN erp_store_periods AS sp ON sp.store_id = s.id AND sp.period = o.period
LEFT JOIN erp_average_solves AS a ON a.period = o.period
WHERE p.status <> 'open' OR sp.store_id IS NULL OR sp.opening <> 'loaded' OR sp.costed_at IS NOT NULL
   OR a.period IS NOT NULL
ORDER BY o.row_number;

-- openings_upsert_from_staged --
-- Natural key (store, item, period); a rerun with the same values updates nothing. Only into an open period that is the store's first and not costed (the rows refused above are left out).
WITH upserted AS (
    INSERT INTO erp_opening_balances AS b (store_id, item_id, period, qty, value)
    SELECT s.id, i.id, o.period, o.qty, o.value
    FROM staged_openings AS o
    JOIN erp_stores AS s ON s.code = o.store_code
    JOIN erp_items AS i ON i.sku = o.sku
    JOIN erp_periods AS p ON p.period = o.period AND p.status = 'open'
    JOIN erp_store_periods AS sp
      ON sp.store_id = s.id AND sp.period = o.period
     AND sp.opening = 'loaded' AND sp.costed_at IS NULL
    WHERE NOT EXISTS (SELECT FROM erp_average_solves AS a WHERE a.period = o.period)
    ON CONFLICT (store_id, item_id, period) DO UPDATE
        SET qty = EXCLUDED.qty, value = EXCLUDED.value
        WHERE (b.qty, b.value) IS DISTINCT FROM (EXCLUDED.qty, EXCLUDED.value)
    RETURNING (xmax = 0) AS inserted
)
SELECT count(*) FILTER (WHERE inserted)::int AS inserted,
       count(*) FILTER (WHERE NOT inserted)::int AS updated
FROM upserted;

-- rejects_insert --
-- A rejected row is recorded once per job and source file (its checksum) and row number, with its reason and original line.
INSERT INTO erp_migration_rejects (job_fingerprint, row_number, reason, raw)
SELECT %(key)s, r.row_number, r.reason, r.raw
FROM unnest(%(rows)s::int[], %(reasons)s::text[], %(raws)s::text[]) AS r (row_number, reason, raw)
ON CONFLICT (job_fingerprint, row_number) DO NOTHING;

-- rejects_select_rows_between --
-- The rows of a chunk's range rejected already (duplicates, when the job planned): the chunk skips them.
SELECT row_number FROM erp_migration_rejects
WHERE job_fingerprint = %(key)s AND row_number BETWEEN %(first)s AND %(last)s;

-- rejects_select --
-- Every rejected row of a job's source file, for the file written beside the report.
SELECT row_number, reason, raw FROM erp_migration_rejects
WHERE job_fingerprint = %(key)s ORDER BY row_number;
