-- period_select --
-- One row or none: period is the primary key of erp_periods.
SELECT period, status FROM erp_periods WHERE period = %(period)s;

-- journal_line_select_balances --
-- Every journal line up to the period counts once, under its account and store: in the opening when it is of an earlier period (income and expense only from the start of the period's fiscal year; earlier years' are retained earnings, 3100) or of an opening journal of the period itself, else in the period's debit and credit.
WITH scoped AS (
    SELECT CASE WHEN a.kind IN ('income', 'expense') AND j.period < %(fiscal_year_start)s
                THEN %(retained)s ELSE l.account_code END AS code,
           l.store_id,
           CASE WHEN j.period < %(period)s THEN 'carried'
                WHEN j.source = 'opening' THEN 'opened'
                ELSE 'moved' END AS part,
           j.period = %(period)s AS own,
           l.debit, l.credit
    FROM erp_journals AS j
    JOIN erp_journal_lines AS l ON l.journal_id = j.id
    JOIN erp_accounts AS a ON a.code = l.account_code
    WHERE j.period <= %(period)s
)
SELECT sc.code, a.name, a.kind, sc.store_id, s.code AS store,
       coalesce(sum(sc.debit - sc.credit) FILTER (WHERE sc.part = 'carried'), 0) AS carried,
       coalesce(sum(sc.debit - sc.credit) FILTER (WHERE sc.part = 'opened'), 0) AS opened,
       coalesce(sum(sc.debit) FILTER (WHERE sc.part = 'moved'), 0) AS debit,
       coalesce(sum(sc.credit) FILTER (WHERE sc.part = 'moved'), 0) AS credit,
       count(*) FILTER (WHERE sc.own)::int AS lines
FROM scoped AS sc
JOIN erp_accounts AS a ON a.code = sc.code
LEFT JOIN erp_stores AS s ON s.id = sc.store_id
GROUP BY sc.code, a.name, a.kind, sc.store_id, s.code
ORDER BY sc.code, sc.store_id NULLS FIRST;
