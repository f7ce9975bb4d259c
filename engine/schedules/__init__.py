"""Recurring jobs: a flow submitted on a cron calendar, each time fired once by any worker.

- :mod:`.calendar`: a cron expression in a timezone, its DST rules and fire-time parameters;
- :mod:`.schedules`: ``Schedule``, ``add_schedule``, ``list_schedules``, ``remove_schedule``,
  and an operator's ``pause_schedule``, ``resume_schedule``, ``run_schedule_now`` (audited);
- :mod:`.firer`: the thread every worker runs; one conditional UPDATE claims a
  due time, and the job it submits carries that time in its fingerprint, so a
  time fires once however many workers race for it.
"""
