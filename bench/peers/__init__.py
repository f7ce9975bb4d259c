"""The engine against its peers in one run: ``make bench-peers`` / ``python -m bench.peers``.

Procrastinate, DBOS and pgqueuer live in their own virtualenv
(``bench/.peers-venv``, made by ``make bench-peers``), never in the project's:
each runs as a script of this folder (``<peer>_run.py``, with ``peer_common.py``)
under that virtualenv's python, and prints one JSON line that ``__main__``
reads. ``ratios`` is the closing table, pure over the figures.
"""
