"""The chaos run (``make chaos``): real workers, seeded faults, the oracles of RELIABILITY.md.

A *scenario* is one transport (the PostgreSQL queue, or SQS through moto's
server on 127.0.0.1) and one seed. It seeds a small ERP into a scratch
database with ``engine seed``, copies it for a clean run, starts ``engine
worker`` processes with short leases, and plays ``CHAOS_ROUNDS`` *rounds*:
each submits work (chaos jobs, and ERP posting and costing on their turn)
and injects one fault drawn from the seed. Then the faults stop, the run
waits for every job to end, checks the oracles by SQL and compares the books
with the clean run to the cent. One JSON line per scenario goes to stdout.

- :mod:`.config`: sizes and timings from ``CHAOS_*``; the recovery bound
- :mod:`.chaosflow`: the test flow (timed steps, one effect each)
- :mod:`.run`: a scenario's databases, processes and record of submits
- :mod:`.procs`: worker and submit processes, signalled by name
- :mod:`.inject`: one method per fault kind
- :mod:`.oracles`, ``chaos.sql``: the checks; :mod:`.books`: the books compared
- :mod:`.scenario`: a scenario end to end; ``__main__``: every scenario
"""
