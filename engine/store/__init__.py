"""The store: the one place that runs SQL against the engine's tables.

Queries live in ``sql/*.sql`` as named blocks, each with the invariant it
keeps (see :mod:`engine.store.queries`). Guarded writes are named
``<entity>_<verb>_if_<guard>``: zero rows is a normal outcome that the calling
function turns into a typed result, never a silent ``None``. Driver errors are
wrapped into :class:`engine.errors.StoreError` here, keeping ``__cause__``.
Every function takes the psycopg connection whose transaction it joins; the
caller decides when that transaction commits.
"""
