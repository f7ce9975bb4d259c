"""The retail ERP's domain: its books, demo data and tools.

The flows (``flows/costing.py``, ``flows/posting.py``, ``flows/migration.py``)
run the heavy jobs on these tables; this package holds what they share, and
exports the command line tools the ``engine`` CLI adds (``engine seed``,
``engine books``, ``engine demo``). It uses ``engine``'s public API only,
except that the demo starts its worker processes with :mod:`engine.worker.processes`:
an operator's tool, not something a flow needs.
"""

from flows.erp.commands import commands

__all__ = ["commands"]
