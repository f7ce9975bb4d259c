-- documents_count_period --
-- Every document of the period counted once: those posting in it (dated in it, or late: dated in a closed month and redated into it) by status (the rejected split by their current rejection's latest decision), the late ones, and those entered under it but posting in another month.
SELECT count(*) FILTER (WHERE d.posting_period = %(period)s)::int AS dated,
       count(*) FILTER (WHERE d.posting_period = %(period)s AND d.status = 'posted')::int
           AS posted,
       count(*) FILTER (WHERE d.posting_period = %(period)s AND d.status = 'unposted')::int
           AS unposted,
       count(*) FILTER (WHERE d.posting_period = %(period)s AND d.status = 'rejected')::int
           AS rejected,
       count(*) FILTER (WHERE d.posting_period = %(period)s AND d.status = 'rejected'
                          AND last.decision = 'approve')::int AS rejected_approved,
       count(*) FILTER (WHERE d.posting_period = %(period)s AND d.status = 'rejected'
                          AND last.decision = 'reject')::int AS rejected_refused,
       count(*) FILTER (WHERE d.posting_period = %(period)s AND d.status = 'rejected'
                          AND last.decision IS NULL)::int AS rejected_undecided,
       count(*) FILTER (WHERE d.posting_period = %(period)s
                          AND d.date_period <> %(period)s)::int AS late,
       count(*) FILTER (WHERE d.period = %(period)s
                          AND d.posting_period <> %(period)s)::int AS dated_elsewhere
FROM erp_documents AS d
LEFT JOIN LATERAL (
    SELECT r.decision FROM erp_rejection_decisions AS r
    WHERE d.status = 'rejected' AND r.document_id = d.id AND r.rejection = d.rejections
    ORDER BY r.id DESC LIMIT 1) AS last ON true
WHERE d.posting_period = %(period)s OR d.period = %(period)s;
