"""The retail ERP's domain: its books, demo data and tools.

The flows (``flows/costing.py``, ``flows/posting.py``, ``flows/migration.py``)
run the heavy jobs on these tables; this package holds what they share, and
exports the command line tools the ``engine`` CLI adds (``engine seed``,
``engine books``). It uses ``engine``'s public API only.
"""

from flows.erp.commands import commands

__all__ = ["commands"]
