-- Indexes for what a recost's costing job reads at ~1M moves (issue 36's figure through
-- workers: one backdated receipt corrected in about a second).
--
-- The openings of an item by period: the facts fingerprint (flows/erp/sql/facts.sql) asks, for
-- every item, whether the period has an opening of it. Without this index each of those
-- questions was a scan of every period's openings: 13 s of the recost step (8,000 items x
-- 1.5 ms), where an index probe takes microseconds. Led by the item, not the period: led by
-- the period it looked like a cheap way to every opening of a period just carried (its
-- statistics not analysed yet: "1 row"), and the recost's carry of a few pairs scanned the
-- whole period through it.
CREATE INDEX erp_opening_balances_item_period ON erp_opening_balances (item_id, period);

-- A store's stock counts of a period (their share of COGS goes to 5100): the stores' totals
-- read them for every store at once (flows/erp/sql/costing.sql, store_costs_totals), which
-- scanned every move of the month for the 2% that are counts.
CREATE INDEX erp_stock_moves_adjustments ON erp_stock_moves (period, store_id, item_id)
    WHERE kind = 'adjustment';
