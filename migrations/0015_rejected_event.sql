-- A step that refuses its input data (engine.Reject): the step run ends, its
-- job fails once with the reason, and nothing is dead-lettered or alerted.
-- The attempt's ending is recorded as a 'rejected' event (the history says
-- what happened; 'dead_lettered' would claim a dead letter that is not there).

ALTER TABLE engine_events DROP CONSTRAINT engine_events_kind_check;
ALTER TABLE engine_events ADD CONSTRAINT engine_events_kind_check CHECK (kind IN (
    'submitted', 'published', 'claimed', 'claim_refused', 'renewed',
    'lease_lost', 'reclaimed', 'released', 'succeeded', 'retried',
    'dead_lettered', 'rejected', 'cancelled', 'fenced', 'message_dropped',
    'job_done', 'job_failed', 'replayed',
    'waiting', 'signalled', 'woken'));
