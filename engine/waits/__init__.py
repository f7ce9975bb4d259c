"""Durable waits: a step parks holding nothing, until a signal, a time or its children.

A waiting step run holds no lease, no worker slot and no attempt; only its
concurrency key's slot is kept (a posting awaiting approval keeps its
period), until it is claimed again, ends or is cancelled. What wakes it makes
it pending and announces it in one transaction; the step then runs again from
its start, and the wait returns what came. Every time is the database's.

- :mod:`.wait`: ``Wait`` (what every wait raises) and ``sleep_until``;
- :mod:`.signals`: waiting for a signal, and sending one (``engine.signal``);
- :mod:`.approvals`: segregation of duties on the signals a flow declares
  approvals (not from the job's or an ancestor's submitter, a reason
  required, each refusal audited);
- :mod:`.children`: submitting child jobs and waiting for them;
- :mod:`.inbox`: the approvals inbox, every wait for a signal now with the
  summary its step published for the approver.

The runner's side of a park (the fenced transition to ``waiting``) is
:mod:`engine.runner.park`.
"""
