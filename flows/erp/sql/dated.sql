-- documents_waiting_in_closed_periods --
-- Unposted documents waiting in a closed month (the month they post to: dated in it and not redated, or redated into it before it closed): posting takes a month's documents only while it is open, so these wait until they are redated into the first open period (or that month is reopened). Per month, with a few numbers to find them by.
SELECT d.posting_period AS period, count(*)::int AS documents,
       (array_agg(d.number ORDER BY d.id))[1:5] AS examples,
       array_agg(DISTINCT d.period ORDER BY d.period) AS entered_under
FROM erp_documents AS d
JOIN erp_periods AS p ON p.period = d.posting_period AND p.status = 'closed'
WHERE d.status = 'unposted'
GROUP BY d.posting_period
ORDER BY d.posting_period;

-- documents_unposted_dated_in --
-- Unposted documents posting in the period (dated in it, or redated into it): a period with any cannot close (post them, or correct their dates).
SELECT count(*)::int AS documents, (array_agg(number ORDER BY id))[1:5] AS examples
FROM erp_documents
WHERE posting_period = %(period)s AND status = 'unposted';
