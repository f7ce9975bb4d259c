-- A posting's approval in the period's history (issue 28).
--
-- A posting that rejected more documents than its limit waits for an
-- accountant's decision (the signal `approve`: approve, or reject with a
-- reason). The decision is recorded in the period's history with who made
-- it and why, in the posting step's fenced transaction (it commits once,
-- with the step's checkpoint): `engine books history --period P` shows it
-- beside the period's costing, close and reopen.
ALTER TABLE erp_period_events DROP CONSTRAINT erp_period_events_action_check;
ALTER TABLE erp_period_events ADD CONSTRAINT erp_period_events_action_check
    CHECK (action IN ('costed', 'closed', 'reopened', 'posting approved', 'posting rejected'));
