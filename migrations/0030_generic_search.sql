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

-- A tag keeps its job's created_at, so that a search by one tag walks the
-- tag's index in the runs page's order (created_at DESC, id DESC) and stops
-- after a page, as 0021's expression indexes did, instead of fetching every
-- job that carries a common value. A job's created_at never changes; the
-- trigger copies it on insert (a plain read: it locks nothing of the job,
-- see 0021 on why tags have no foreign key), whoever inserts the tag.
ALTER TABLE engine_job_tags ADD COLUMN job_created_at timestamptz;
UPDATE engine_job_tags AS t SET job_created_at = j.created_at
FROM engine_jobs AS j
WHERE j.id = t.job_id;
DELETE FROM engine_job_tags WHERE job_created_at IS NULL;  -- of no job: found by no search

CREATE FUNCTION engine_job_tag_created() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.job_created_at IS NULL THEN
        NEW.job_created_at := (SELECT created_at FROM engine_jobs WHERE id = NEW.job_id);
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER engine_job_tag_created BEFORE INSERT ON engine_job_tags
    FOR EACH ROW EXECUTE FUNCTION engine_job_tag_created();
ALTER TABLE engine_job_tags ALTER COLUMN job_created_at SET NOT NULL;

-- by tag, newest first (replaces (name, value, job_id))
DROP INDEX engine_job_tags_value;
CREATE INDEX engine_job_tags_value
    ON engine_job_tags (name, value, job_created_at DESC, job_id DESC);
-- free text: any tag's value, whatever its name (a document number, a code)
CREATE INDEX engine_job_tags_text ON engine_job_tags (value, job_id);

-- whoever submits tags the job: the console submits too (0026)
GRANT INSERT ON engine_job_tags TO engine_console;
