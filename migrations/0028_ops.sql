-- A step run's lease owner names the worker's slot, not the worker (issue 34):
-- a worker `host:pid` claims under `host:pid/0`, `host:pid/1`, ... (one per
-- slot, engine.store.leases.lease_owner). Whoever relates a lease to a worker
-- (the console's Workers page, a report, an operator's SQL) maps the owner
-- with this one function, the mirror of engine.store.leases.worker_of: the
-- owner without its last `/<slot>`. A worker id may itself contain `/`.
CREATE FUNCTION engine_worker_of(lease_owner text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT regexp_replace(lease_owner, '/[0-9]+$', '')
$$;

GRANT EXECUTE ON FUNCTION engine_worker_of(text) TO engine_worker;
