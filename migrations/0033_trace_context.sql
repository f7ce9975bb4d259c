-- Traces from submit to checkpoint (issue 38, item 3): the W3C trace context
-- (`traceparent`, https://www.w3.org/TR/trace-context/) of the span that
-- submitted a job, written with the job row when tracing is on (NULL when it
-- is off, and for jobs submitted before). Every claim already reads its job
-- row (it locks it), so each attempt finds its submit's context there,
-- whichever transport delivered it: the outbox and SQS carry only ids, and a
-- reclaim after a crash reads the same row. Nullable and without a default:
-- adding it rewrites nothing.
ALTER TABLE engine_jobs ADD COLUMN traceparent text
    CONSTRAINT engine_jobs_traceparent_w3c
    CHECK (traceparent ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$');

-- the roles that submit jobs write it (a schedule's or a child's submit, the console's)
GRANT INSERT (traceparent) ON engine_jobs TO engine_worker;
GRANT INSERT (traceparent) ON engine_jobs TO engine_console;
