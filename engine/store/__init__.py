"""The store: the one place that runs SQL against the engine's tables.

Queries live in ``sql/*.sql`` as named blocks, each with the invariant it
keeps (see :mod:`engine.store.queries`). Guarded writes are named
``<entity>_<verb>_if_<guard>``: zero rows is a normal outcome that the calling
function turns into a typed result, never a silent ``None``. Driver errors are
wrapped into :class:`engine.errors.StoreError` here, keeping ``__cause__``.
Every function takes the psycopg connection whose transaction it joins; the
caller decides when that transaction commits.

One module and one ``sql/<name>.sql`` per table or concept, holding every
statement that writes it, whoever calls it (``claims`` and ``leases`` share
``sql/step_runs.sql``):

- ``step_runs``: insert, checkpoint, retry, dead, cancel;
- ``step_waits``: park under the lease, wake by signal, deadline or child;
- ``claims``: a step run taken by one worker (one delivery, a batch of them,
  an eager successor), with a fresh lease token and one attempt;
- ``leases``: renewed or given back, only by the current token's holder;
- ``jobs``: submit once per fingerprint, finish, cancel, reopen, pin;
- ``job_summaries``: what stays of a pruned job, and the retirement of finished ones;
- ``outbox``: announcements, their relay, the sweeper's re-announcements;
- ``dead_letters``: step runs past their cap and unusable messages;
- ``alerts``: one alert per dead letter (orphaned version, schedule time) and
  its deliveries, one per sink;
- ``schedules``: calendars of jobs and each scheduled time they fired;
- ``signals``: one signal per job and name, and what a waiting step finds;
- ``events``: the append-only history;
- ``audit``: the append-only trail of operator actions (who, what, why);
- ``tags``: searchable keys a step gives its job, with its checkpoint;
- ``bulk_previews``: the frozen set a bulk action's dry run found, applied once;
- ``search``: one page of the jobs some filters find (the runs page), read only;
- ``console_users``: who may sign in to the console, with which role;
- ``console_sessions``: the console's sessions (a hash of each id), until when;
- ``console_signins``: failed sign-ins per user and address, and their locks;
- ``server``: the server itself (ping, the embedded database);
- ``migrations``: the numbered schema files;
- ``workers``: each worker's row (started, last seen, the flow versions it
  runs) and the versions in flight.

``rows`` holds the types they return, ``errors`` the driver-error wrapping,
``jsonb`` what a ``jsonb`` column can carry (checked before a statement),
``queries`` the ``.sql`` loader, ``batch`` the one-message sending of
statements that need no answer yet (what commits with a checkpoint);
``models`` and ``read`` are the typed, read-only side for the CLI and reports
(SQLModel); ``db`` opens the connections, ``prepared`` prepares a
checkpoint's statements once per connection, and ``pooler`` says what
changes behind a transaction pooler (PgBouncer, RDS Proxy: no startup
options, nothing prepared, no ``LISTEN``).

The one lock order, which every statement and transaction here follows (a
lock taken out of it could deadlock against one taken in it):

1. job rows before step rows (a claim, a checkpoint, a retry, a dead letter,
   a park, a cancel: the job row first, ``FOR NO KEY UPDATE``, never
   ``FOR UPDATE``: that would also wait on every uncommitted row that
   references the job, such as a child job a running step submitted, so
   a sibling's checkpoint would wait for that step to commit and be
   released to run its body again: issue 34);
2. a parent job before its child jobs, level by level (a park for children
   takes the parent job, then ``job_lock_children``; a cancel takes the job,
   then ``job_cancel_descendants``), then step runs;
3. ascending ids within a level (``ORDER BY id ... FOR NO KEY UPDATE`` over many
   jobs; a group's or a round's checkpoints in job order).

Statements that touch one step row and no job row (a lease renewal, a lease
given back) hold nothing while they wait, so they cannot close a cycle. A
lock wait past ``lock_timeout``, a deadlock, or a prepared statement a
pooler lost becomes :class:`~engine.errors.Contention`: "not done, try
again", never an attempt (invariant 18). Known exception: ``step_cancel_by_job`` and
``step_reopen_by_job`` update a job's step rows in scan order, which is safe
only because every writer of several step rows of one job holds that job's
row first.

Callers use this package as one namespace (``from engine import store``,
then ``store.lease_extend_if_owner(...)``): the query names already say which
table they touch, so where a statement lives can change without its callers.
That namespace is the ``__all__`` of each module star-imported below (the
modules listed above but ``migrations``, plus ``rows`` and ``batch``): a new
statement is exported where it is written, and nowhere else. The other
modules are imported by name (``from engine.store import db, migrations``).
"""

from engine.store.alerts import *  # noqa: F403
from engine.store.audit import *  # noqa: F403
from engine.store.batch import *  # noqa: F403
from engine.store.bulk_previews import *  # noqa: F403
from engine.store.claims import *  # noqa: F403
from engine.store.console_sessions import *  # noqa: F403
from engine.store.console_signins import *  # noqa: F403
from engine.store.console_users import *  # noqa: F403
from engine.store.dead_letters import *  # noqa: F403
from engine.store.events import *  # noqa: F403
from engine.store.job_summaries import *  # noqa: F403
from engine.store.jobs import *  # noqa: F403
from engine.store.leases import *  # noqa: F403
from engine.store.outbox import *  # noqa: F403
from engine.store.rows import *  # noqa: F403
from engine.store.schedules import *  # noqa: F403
from engine.store.search import *  # noqa: F403
from engine.store.server import *  # noqa: F403
from engine.store.signals import *  # noqa: F403
from engine.store.step_runs import *  # noqa: F403
from engine.store.step_waits import *  # noqa: F403
from engine.store.tags import *  # noqa: F403
from engine.store.wait_rows import *  # noqa: F403
from engine.store.workers import *  # noqa: F403
