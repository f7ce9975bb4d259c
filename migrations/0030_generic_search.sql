-- Search without a flow's words (issue 37): a flow declares which of its
-- parameters are searchable (Flow(searchable=...)), and submit tags each as
-- `param.NAME` in the submit's own transaction; a search by parameter, by a
-- step's tag or by free text is then a lookup of the tags' indexes, one for
-- every flow. The expression indexes of 0021 on two parameters of one
-- domain's flows go: the engine gives no parameter a meaning.
--
-- Jobs submitted before this migration carry no parameter tags: SQL knows
-- no flow's searchable parameters, so a flow package backfills its own
-- (flows/migrations/1015_erp_search_tags.sql for the ERP's).
DROP INDEX engine_jobs_period_created;
DROP INDEX engine_jobs_store_created;

-- free text: any tag's value, whatever its name (a document number, a code)
CREATE INDEX engine_job_tags_text ON engine_job_tags (value, job_id);

-- whoever submits tags the job: the console submits (a close, a retry's new job)
GRANT INSERT ON engine_job_tags TO engine_console;
