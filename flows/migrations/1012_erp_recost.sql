-- Backdated documents recosted forward, only where they reach (issue 36).
--
-- A document that moves stock may now be posted into a period whose stock
-- is costed (and not closed). Posting marks, in the chunk's own transaction,
-- the (store, item) pairs whose figures it changes: the pairs it moves, the
-- pairs their transfers reach in that period, and the same pairs in every
-- later costed period whose opening they feed (flows/erp/recost.py). The
-- next costing of the period recosts exactly those pairs, period by period,
-- posts the differences as new journals (source 'costing', key
-- 'recost:<period>:<store>:<job>') and clears the marks, all in one fenced
-- step transaction.
CREATE TABLE erp_stale_pairs (
    period    text        NOT NULL REFERENCES erp_periods (period),
    store_id  integer     NOT NULL REFERENCES erp_stores (id),
    item_id   integer     NOT NULL REFERENCES erp_items (id),
    since     timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (period, store_id, item_id)
);

-- The worker marks (posting) and clears (the recost) stale pairs; the recost
-- rewrites the figures of the pairs it recosts (never their keys), the solved
-- averages of the items it solves again, and the openings they carry.
GRANT SELECT, INSERT, DELETE ON erp_stale_pairs TO engine_worker;
GRANT UPDATE (opening_qty, opening_value, receipt_qty, receipt_value, transfer_in_qty,
              transfer_in_value, average_cost, average_from, loop_group, issue_qty,
              cogs_value, transfer_out_qty, transfer_out_value, closing_qty, closing_value,
              standard_cost)
    ON erp_item_costs TO engine_worker;
GRANT UPDATE (average_cost, average_from, loop_group) ON erp_item_averages TO engine_worker;
GRANT SELECT ON erp_stale_pairs TO engine_console;

-- A closed period never changes: its item costs (and solved averages) refuse any update,
-- whoever makes it; only an open or costed period is recosted.
CREATE FUNCTION erp_refuse_closed_period_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM erp_periods WHERE period = OLD.period AND status = 'closed') THEN
        RAISE EXCEPTION 'period % is closed: its % never change (reopen it first)',
            OLD.period, TG_TABLE_NAME USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER erp_item_costs_closed_unchanged BEFORE UPDATE ON erp_item_costs
    FOR EACH ROW EXECUTE FUNCTION erp_refuse_closed_period_update();
CREATE TRIGGER erp_item_averages_closed_unchanged BEFORE UPDATE ON erp_item_averages
    FOR EACH ROW EXECUTE FUNCTION erp_refuse_closed_period_update();
