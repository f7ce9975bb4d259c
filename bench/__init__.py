"""Benchmarks of the engine against a bare-psycopg floor: ``make bench`` / ``python -m bench``.

Every figure is one JSON line on stdout (``{"bench", "metric", "value", "unit"}``);
progress and explanations go to stderr. Runs use a scratch database
``engine_bench`` on the engine's server (``ENGINE_DATABASE_URL``, else the
embedded one), dropped and re-created for each run.
"""
