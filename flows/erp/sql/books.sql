-- period_select --
-- One row or none: period is the primary key of erp_periods.
SELECT period, status FROM erp_periods WHERE period = %(period)s;

-- journal_line_select_totals_by_account --
-- Each journal line of the period counts once, under its account (a foreign key to erp_accounts), whatever the journal's source.
SELECT a.code, a.name,
       sum(l.debit) AS debit,
       sum(l.credit) AS credit,
       sum(l.debit) - sum(l.credit) AS balance,
       count(*) AS lines
FROM erp_journals AS j
JOIN erp_journal_lines AS l ON l.journal_id = j.id
JOIN erp_accounts AS a ON a.code = l.account_code
WHERE j.period = %(period)s
GROUP BY a.code, a.name
ORDER BY a.code;
