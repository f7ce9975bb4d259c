"""The retail ERP's domain: its books, periods, inventory and checks.

The flows (``flows/costing.py``, ``flows/posting.py``, ``flows/migration.py``,
``flows/close.py``) run the heavy jobs on these tables; this package holds
what they share: the one module that posts journals (:mod:`.ledger`), a
period's documents posted through it (:mod:`.document_posting`), the
ledger read as a trial balance (:mod:`.books`), the lifecycle of a period
(:mod:`.periods`), its documents counted (:mod:`.documents`) and the
approvals that bind it (:mod:`.approvals`), inventory costing (:mod:`.inventory`) and its exact
multi-store average cost (:mod:`.average`), backdated documents recosted
forward where they reach (:mod:`.recost`), value-only corrections of a closed
period's receipts split between stock on hand and COGS
(:mod:`.value_corrections`), the auditor's identities
(:mod:`.checks`), the flags an accountant expects (:mod:`.flags`) and exports
(:mod:`.exports`), legacy CSV exports checked for migration (:mod:`.legacy_csv`),
the ``ERP_*`` settings
(:mod:`.config`) and the SQL they run (``sql/``). It uses ``engine``'s
public API only and knows nothing of the command line: the operator's tools
(seed, demo, ``engine books``) live in :mod:`flows.tools`, which imports this
package, never the other way round.
"""
