"""The chaos run (``make chaos``): real workers, seeded faults, the oracles of RELIABILITY.md.

A *scenario* is one transport (the PostgreSQL queue, or SQS through moto's
server on 127.0.0.1) and one seed. It seeds a small ERP into a scratch
database with ``engine seed``, copies it for a clean run, starts ``engine
worker`` processes with short leases, and plays ``CHAOS_ROUNDS`` *rounds*:
each submits work (chaos jobs; keyed jobs that park on a signal and on child
jobs, a close-like parent, pure steps; ERP posting and costing on their
turn) and injects one fault drawn from the seed, while the harness plays the
operator (signals, ``engine retry`` of a parent whose child failed). Then
the faults stop, the run waits for every job to end, checks the oracles by
SQL and compares the books with the clean run to the cent. One JSON line per
scenario goes to stdout, and a summary line each to stderr. After the
scenarios, the pooler scenario (``CHAOS_POOLER``) runs one transport again
with every worker behind PgBouncer in transaction pooling.

- :mod:`.config`: sizes and timings from ``CHAOS_*``; the recovery and notice bounds
- :mod:`.chaosflow`: the test flow (timed steps, one effect each)
- :mod:`.keyflows`: keys, signals, child jobs, a close-like parent, pure steps
- :mod:`.proxy`: the TCP fault proxy of the ``partition`` fault
- :mod:`.sampler`: key holders over the limit, sampled during the run
- :mod:`.run`: a scenario's databases, processes and record of submits
- :mod:`.procs`: worker and submit processes, signalled by name
- :mod:`.inject`: one method per fault kind
- :mod:`.oracles`, ``chaos.sql``: the checks; :mod:`.books`: the books compared
- :mod:`.scenario`: a scenario end to end; ``__main__``: every scenario
"""
