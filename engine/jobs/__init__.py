"""Jobs as a caller sees them: submit, look up, wait, act, in the caller's transaction.

What any process may do to jobs (the ERP's API install included), apart from
the worker process that runs them. A submit is idempotent by fingerprint (one
active job per fingerprint, invariant 7) and enqueues only after the caller's
commit (invariant 8): the job, its first step runs and their announcements
are written in one transaction, the caller's own when it passes one.

- :mod:`.transaction`: the caller's transaction or our own, and publishing after its commit;
- :mod:`.submit`: ``submit`` and the flow's admission check;
- :mod:`.fingerprint`: the canonical form of what identifies a job or step run;
- :mod:`.plan`: which step runs exist and are ready, from a job's checkpoints;
- :mod:`.ending`: a job has ended (cancel the rest, free its slots, wake its parent);
- :mod:`.admin`: operator actions (cancel, retry, replay, purge, alerts);
- :mod:`.bulk`: the same in bulk: a filter's frozen preview, then acting on that set only;
- :mod:`.lookup`: one job, the active jobs, and waiting for a job to end;
- :mod:`.watch`: a job's state (``waiting`` derived) and progress, its descendants' included;
- :mod:`.search`: the runs page: jobs by id prefix, flow, state, a flow's searchable
  parameters or a step's tags, newest first, a page at a time by a keyset cursor.
"""
