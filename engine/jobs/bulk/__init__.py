"""Bulk actions on a frozen preview: retry, cancel, replay or purge what a filter finds.

An operator facing a thousand dead letters after an outage acts on them in
one reviewed action, in two steps:

1. :func:`preview` (``engine retry|cancel|dlq replay|dlq purge FILTER
   --dry-run``) finds what a :class:`BulkFilter` names *now* and writes it
   as a preview (``engine_bulk_previews``, migration 0032): the exact job or
   dead-letter ids, the state each was in, counts by flow and state, who
   previewed it and until when it may be applied. Nothing else changes.
2. :func:`apply` (``--apply PREVIEW --reason R``) acts on that set only,
   never on what the filter would find by then. Each of its transactions
   locks the preview's row and records each item's outcome with its action,
   so a re-run finishes an apply stopped half way, never acting twice on one
   item (:class:`~engine.errors.PreviewClosed` when it was applied, or
   expired before it began). Each item is then locked (its job's row first:
   the store's lock order) and checked against the state it was previewed
   in; an item that changed is skipped and listed, never acted on blind.
   The action is the single-item one (:func:`engine.jobs.admin.retry_in`,
   :func:`~engine.jobs.admin.cancel_in`, a replay or purge of one dead
   letter), or for a retry or replay of a job with nothing the single one
   would refuse or reach below, its set-based equivalent per chunk
   (:mod:`.reopening`), so every rule a single retry or cancel keeps holds per item
   (a rejected job is refused, segregation of duties on approvals,
   invariant 21), and a refused item is listed with why. Each item acted on
   gets its own audit entry (actor, reason, the preview's id), in the
   transaction that acts on it (invariant 19).

Items acted on one by one are a savepoint each: one refusal or lock timeout
skips that item alone (a lock timeout leaves it for a re-run).

Modules: :mod:`.filtering` (what a filter names, checked against the action),
:mod:`.previews` (the dry run: the frozen set written), :mod:`.applying` (acting
on it, resumably), :mod:`.reopening` (a retry or replay chunk, set-based).
"""

from engine.jobs.bulk.applying import *  # noqa: F403
from engine.jobs.bulk.filtering import *  # noqa: F403
from engine.jobs.bulk.previews import *  # noqa: F403
