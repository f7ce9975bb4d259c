-- `engine worker --check` (the container's health check) runs as the worker
-- and asks whether every migration file it ships is applied: the worker may
-- read which versions are applied (their names and checksums are no secret),
-- and still never change them.
GRANT SELECT ON engine_migrations TO engine_worker;
