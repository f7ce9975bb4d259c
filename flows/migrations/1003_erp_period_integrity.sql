-- Period integrity: where each store stands in the chain of periods, the
-- lifecycle of a period (open -> costed -> closed, reopened with a reason),
-- and its history.

-- A store's starting point for a period, and whether it is costed there.
-- 'loaded': opening balances loaded (seed, migration flow) into the store's
-- first period, at most one per store (the partial unique index);
-- 'carried': the closing balances of the store's costing of the period before.
-- Costing a store for P needs its row for P, so periods are costed in order.
CREATE TABLE erp_store_periods (
    store_id   integer     NOT NULL REFERENCES erp_stores (id),
    period     text        NOT NULL REFERENCES erp_periods (period),
    opening    text        NOT NULL CHECK (opening IN ('loaded', 'carried')),
    costed_at  timestamptz,
    PRIMARY KEY (store_id, period)
);
CREATE UNIQUE INDEX erp_store_periods_first ON erp_store_periods (store_id)
    WHERE opening = 'loaded';
CREATE INDEX erp_store_periods_period ON erp_store_periods (period);

ALTER TABLE erp_periods ADD COLUMN closed_at timestamptz, ADD COLUMN closed_by text;
UPDATE erp_periods SET closed_at = coalesce(costed_at, now()), closed_by = 'migration 1003'
WHERE status = 'closed';
ALTER TABLE erp_periods ADD CONSTRAINT erp_periods_closed_stamp
    CHECK ((status = 'closed') = (closed_at IS NOT NULL AND closed_by IS NOT NULL));

-- Every change of a period's status, with who made it and why.
CREATE TABLE erp_period_events (
    id      bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    period  text        NOT NULL REFERENCES erp_periods (period),
    action  text        NOT NULL CHECK (action IN ('costed', 'closed', 'reopened')),
    actor   text        NOT NULL CHECK (actor <> ''),
    reason  text        NOT NULL DEFAULT '',
    at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    CHECK (action <> 'reopened' OR btrim(reason) <> '')
);
CREATE INDEX erp_period_events_period ON erp_period_events (period, id);

-- Books written before this migration: a store's first period with openings
-- or costs is 'loaded', later ones 'carried'; costed where it has item costs.
INSERT INTO erp_store_periods (store_id, period, opening)
SELECT store_id, period,
       CASE WHEN row_number() OVER (PARTITION BY store_id ORDER BY period) = 1
            THEN 'loaded' ELSE 'carried' END
FROM (SELECT store_id, period FROM erp_opening_balances
      UNION SELECT store_id, period FROM erp_item_costs) AS known;
UPDATE erp_store_periods AS sp SET costed_at = coalesce(p.costed_at, p.closed_at, now())
FROM erp_periods AS p
WHERE p.period = sp.period
  AND EXISTS (SELECT 1 FROM erp_item_costs AS c
              WHERE c.period = sp.period AND c.store_id = sp.store_id);
INSERT INTO erp_store_periods (store_id, period, opening)
SELECT sp.store_id, p.period, 'carried'
FROM erp_store_periods AS sp
JOIN erp_periods AS p
  ON p.period = to_char(to_date(sp.period || '-01', 'YYYY-MM-DD') + interval '1 month', 'YYYY-MM')
WHERE sp.costed_at IS NOT NULL
ON CONFLICT DO NOTHING;

-- The worker's share: costing marks its stores and carries them forward;
-- the migration flow adds first periods; the month-end close job closes.
-- FOR SHARE / FOR UPDATE row locks need UPDATE on a column.
GRANT SELECT, INSERT ON erp_store_periods TO engine_worker;
GRANT UPDATE (costed_at) ON erp_store_periods TO engine_worker;
GRANT UPDATE (closed_at, closed_by) ON erp_periods TO engine_worker;
GRANT SELECT, INSERT ON erp_period_events TO engine_worker;
