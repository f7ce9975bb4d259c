-- documents_waiting_in_closed_periods --
-- Unposted documents dated in a closed month: posting takes a month's documents only while it is open, so these wait (never posted into another month) until that month is reopened or their date is corrected. Per month, with a few numbers to find them by.
SELECT d.date_period AS period, count(*)::int AS documents,
       (array_agg(d.number ORDER BY d.id))[1:5] AS examples,
       array_agg(DISTINCT d.period ORDER BY d.period) AS entered_under
FROM erp_documents AS d
JOIN erp_periods AS p ON p.period = d.date_period AND p.status = 'closed'
WHERE d.status = 'unposted'
GROUP BY d.date_period
ORDER BY d.date_period;

-- documents_unposted_dated_in --
-- Unposted documents dated in the period: a period with any cannot close (post them, or correct their dates).
SELECT count(*)::int AS documents, (array_agg(number ORDER BY id))[1:5] AS examples
FROM erp_documents
WHERE date_period = %(period)s AND status = 'unposted';
