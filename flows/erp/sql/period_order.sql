-- store_periods_before_not_closed --
-- Periods close in order: every earlier period of each store (its rows in erp_store_periods, from its first, where its books start) must be closed before a later one closes. A store whose books start after them is not in them, so it blocks nothing before its start.
SELECT sp.period, p.status, array_agg(s.code ORDER BY s.id) AS stores
FROM erp_store_periods AS sp
JOIN erp_periods AS p ON p.period = sp.period
JOIN erp_stores AS s ON s.id = sp.store_id
WHERE sp.period < %(period)s AND p.status <> 'closed'
GROUP BY sp.period, p.status
ORDER BY sp.period;

-- periods_after_closed_lock --
-- The closed periods after this one, locked in period order (the order every close and reopen locks in): a reopen of the period needs them reopened first, latest first, or is refused.
SELECT period FROM erp_periods
WHERE period > %(period)s AND status = 'closed'
ORDER BY period
FOR UPDATE;

-- periods_after_closed --
-- Read-only: the closed periods after this one, latest first, for a page that offers to reopen them with it.
SELECT period FROM erp_periods
WHERE period > %(period)s AND status = 'closed'
ORDER BY period DESC;
