-- documents_select_by_number --
-- Read to judge a correction (each write after it restates its guard, so a document that changed meanwhile is refused, not corrected): the documents named, with what a correction decides on: status, the month it is dated in and the one it posts to (and their status), and the first period not closed of each store it moves (its store, a transfer's receiver) at or after the store's first period; a number that names no document comes back with a NULL id.
WITH named AS (
    SELECT DISTINCT ON (u.number) u.number, u.ord
    FROM unnest(%(numbers)s::text[]) WITH ORDINALITY AS u (number, ord)
    ORDER BY u.number, u.ord
),
docs AS (
    SELECT d.id, d.number, d.status, d.reject_reason, d.rejections, d.date_period,
           d.posting_period, d.redated_into, d.store_id, d.counterpart_store_id
    FROM erp_documents AS d
    WHERE d.number IN (SELECT number FROM named)
)
SELECT n.number, d.id, d.status, d.reject_reason, d.rejections, d.date_period, d.posting_period,
       d.redated_into, pp.status AS posting_status,
       EXISTS (SELECT 1 FROM erp_document_lines AS l
               WHERE l.document_id = d.id AND l.item_id IS NOT NULL) AS moves_stock,
       (SELECT max(f.first_open) FROM (
            SELECT (SELECT min(p.period) FROM erp_periods AS p
                    WHERE p.status <> 'closed' AND p.period > d.date_period
                      AND p.period >= coalesce((SELECT min(sp.period) FROM erp_store_periods AS sp
                                                WHERE sp.store_id = s.id), '')) AS first_open
            FROM erp_stores AS s
            WHERE s.id IN (d.store_id, d.counterpart_store_id)) AS f) AS first_open
FROM named AS n
LEFT JOIN docs AS d ON d.number = n.number
LEFT JOIN erp_periods AS pp ON pp.period = d.posting_period
ORDER BY n.ord;

-- document_requeue_if_rejected --
-- A rejected document back to unposted, with its event, through the migration's function (the console's role may run it, and write no document otherwise); zero rows when it is no longer rejected or its period closed meanwhile.
SELECT document_id, period
FROM erp_document_requeue_if_rejected(%(id)s, %(actor)s, %(reason)s);

-- document_redate_if_waiting --
-- A document not posted, waiting in a closed month, marked to post in `into` (its own date untouched), with its event; zero rows when it was posted or redated meanwhile, or `into` closed.
WITH moved AS (
    UPDATE erp_documents AS d SET redated_into = %(into)s
    WHERE d.id = %(id)s AND d.status <> 'posted'
      AND EXISTS (SELECT 1 FROM erp_periods AS p
                  WHERE p.period = d.posting_period AND p.status = 'closed')
      AND EXISTS (SELECT 1 FROM erp_periods AS p
                  WHERE p.period = %(into)s AND p.status <> 'closed')
    RETURNING d.id, d.posting_period
)
INSERT INTO erp_document_events (document_id, action, period, actor, reason)
SELECT id, 'redated', posting_period, %(actor)s, %(reason)s FROM moved
RETURNING document_id, period;

-- document_events_insert_verdicts --
-- Posting's verdicts on a chunk, in the chunk's transaction, restated against the documents' status: a 'posted' event per document it posted, a 'rejected' one (with the reason) per document it rejected, each naming the job.
INSERT INTO erp_document_events (document_id, action, period, actor, reason, job_id)
SELECT d.id, v.action, d.posting_period, %(actor)s, coalesce(v.reason, ''), %(job_id)s
FROM (SELECT id, 'posted' AS action, NULL::text AS reason
      FROM unnest(%(posted)s::bigint[]) AS p (id)
      UNION ALL
      SELECT id, 'rejected', reason
      FROM unnest(%(rejected)s::bigint[], %(reasons)s::text[]) AS r (id, reason)) AS v
JOIN erp_documents AS d ON d.id = v.id AND d.status = v.action
ORDER BY d.id;

-- document_events_select_corrected --
-- The documents posting in the period that have a history beyond being posted once (rejected, requeued, redated), by id, the first `limit`, each with every event in order.
WITH docs AS (
    SELECT d.id, d.number, d.status, d.issued_on, d.date_period, d.posting_period
    FROM erp_documents AS d
    WHERE d.posting_period = %(period)s
      AND EXISTS (SELECT 1 FROM erp_document_events AS e
                  WHERE e.document_id = d.id AND e.action <> 'posted')
    ORDER BY d.id
    LIMIT %(limit)s
)
SELECT d.id, d.number, d.status, to_char(d.issued_on, 'YYYY-MM-DD') AS date, d.date_period,
       d.posting_period,
       (SELECT jsonb_agg(jsonb_build_object(
                   'action', e.action, 'period', e.period, 'actor', e.actor, 'reason', e.reason,
                   'job_id', e.job_id, 'at', e.at) ORDER BY e.id)
        FROM erp_document_events AS e WHERE e.document_id = d.id) AS events,
       count(*) OVER ()::int AS shown
FROM docs AS d
ORDER BY d.id;

-- document_events_count_corrected --
-- How many documents posting in the period have a history beyond being posted once, and how many of them are late (dated in an earlier month).
SELECT count(*)::int AS corrected,
       count(*) FILTER (WHERE d.posting_period <> d.date_period)::int AS late
FROM erp_documents AS d
WHERE d.posting_period = %(period)s
  AND EXISTS (SELECT 1 FROM erp_document_events AS e
              WHERE e.document_id = d.id AND e.action <> 'posted');

-- document_correctors_select --
-- Who requeued or redated the documents that posting the period judges now (unposted, posting in it), since their last verdict: they may not approve that posting.
SELECT DISTINCT e.actor
FROM erp_documents AS d
JOIN erp_document_events AS e ON e.document_id = d.id AND e.action IN ('requeued', 'redated')
WHERE d.posting_period = %(period)s AND d.status = 'unposted'
  AND NOT EXISTS (SELECT 1 FROM erp_document_events AS v
                  WHERE v.document_id = d.id AND v.action IN ('posted', 'rejected')
                    AND v.id > e.id)
ORDER BY e.actor;

-- documents_select_rejected --
-- Read only: the rejected documents posting in the period, by id, the first `limit`, with their reason and how many times each was rejected; and how many there are.
SELECT d.number, d.reject_reason AS reason, d.rejections, d.date_period, d.posting_period,
       count(*) OVER ()::int AS total
FROM erp_documents AS d
WHERE d.posting_period = %(period)s AND d.status = 'rejected'
ORDER BY d.id
LIMIT %(limit)s;
