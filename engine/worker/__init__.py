"""The worker process: slots that run step runs, a receive loop, side services, shutdown.

``engine worker`` receives deliveries in batches (no more than it has idle
slots), hands each to a slot's runner (:mod:`engine.runner`), and runs its side
services: the sweeper (liveness never depends on a message, invariant 9), the
schedule firer, the roster row that makes the fleet visible from SQL, and the
outage probe. It refuses to start unless heartbeat < lease and heartbeat <
visibility (invariant 6); on SIGTERM it stops claiming and lets running steps
finish within a grace period or gives their leases back (invariant 12).

- :mod:`.worker`: ``Worker`` and ``check_startup``;
- :mod:`.slot`: one executor slot, a thread that claims and runs what it is handed;
- :mod:`.sweeper`: re-announces lapsed and unpublished step runs, ends what timed out;
- :mod:`.roster`: each worker's row, and which flow versions active jobs need;
- :mod:`.health`: ``engine worker --check``, the container's health check;
- :mod:`.processes`: one launcher of real worker processes (demo, simulator, bench, tests).

Nothing is re-exported here: ``engine.worker.processes`` is imported by the
demo on the API install, which must not pull in the worker's own dependencies.
"""
