-- period_threshold_select --
-- A period's limit of rejected documents without an approval (NULL: none set on the period).
SELECT period, status, approve_rejects_over FROM erp_periods WHERE period = %(period)s;

-- period_threshold_set_if_tighter --
-- A submit may set the period's limit or tighten it, never loosen it: zero rows when the period's limit is already at or below the one asked (or there is no such period).
UPDATE erp_periods AS p SET approve_rejects_over = %(over)s
FROM (SELECT period, approve_rejects_over AS was FROM erp_periods
      WHERE period = %(period)s FOR UPDATE) AS old
WHERE p.period = old.period
  AND (old.was IS NULL OR old.was > %(over)s)
RETURNING p.period, old.was;

-- period_threshold_set --
-- Loosening (or any change) with a reason: the caller records it in the period's history in the same transaction.
UPDATE erp_periods AS p SET approve_rejects_over = %(over)s
FROM (SELECT period, approve_rejects_over AS was FROM erp_periods
      WHERE period = %(period)s FOR UPDATE) AS old
WHERE p.period = old.period
RETURNING p.period, old.was;

-- rejection_select_unapproved --
-- The rejected documents posting in the period (dated in it, or redated into it) whose current rejection has no approval (undecided, or whose latest decision is reject), rejected no later than `before` (NULL: any time), by id: what an accountant must decide on before the period closes; with each one's store, day and debit total (what the approver reads it by).
SELECT d.id, d.number, d.reject_reason AS reason, d.rejections AS rejection,
       last.decision, s.code AS store, d.issued_on,
       (SELECT coalesce(sum(l.debit), 0) FROM erp_document_lines AS l
        WHERE l.document_id = d.id) AS amount
FROM erp_documents AS d
JOIN erp_stores AS s ON s.id = d.store_id
LEFT JOIN LATERAL (
    SELECT r.decision FROM erp_rejection_decisions AS r
    WHERE r.document_id = d.id AND r.rejection = d.rejections
    ORDER BY r.id DESC LIMIT 1) AS last ON true
WHERE d.posting_period = %(period)s AND d.status = 'rejected'
  AND last.decision IS DISTINCT FROM 'approve'
  AND (%(before)s::timestamptz IS NULL OR d.rejected_at <= %(before)s::timestamptz)
ORDER BY d.id;

-- rejection_decisions_insert --
-- One decision per document rejection per job (the unique key): the posting's wait records what it showed once, with its step's checkpoint; the rejection number restated, so a document rejected again since is not decided by it.
INSERT INTO erp_rejection_decisions
    (document_id, rejection, decision, decided_by, reason, job_id)
SELECT d.id, d.rejections, %(decision)s, %(by)s, %(reason)s, %(job_id)s
FROM unnest(%(ids)s::bigint[], %(rejections)s::int[]) AS s (id, rejection)
JOIN erp_documents AS d ON d.id = s.id AND d.rejections = s.rejection AND d.status = 'rejected'
ON CONFLICT (document_id, rejection, job_id) DO NOTHING;
