-- Liveness (issue 10, invariant 13): no step run rests at its attempt cap.
--
-- A pending step run at its cap could never be claimed again (the claim
-- requires attempts < max_attempts), nor re-announced, nor dead-lettered: its
-- job stayed running forever and its fingerprint blocked every resubmit.
-- Giving a lease back (shutdown, a flow not loaded here) now returns the
-- attempt, a retry is scheduled only under the cap, and a reopen raises the
-- cap; this CHECK makes the state impossible whatever the path.
--
-- Rows an older engine left there get that attempt back: giving a lease back
-- was never the step's fault (invariant 14).
UPDATE engine_step_runs
SET attempts = max_attempts - 1
WHERE status = 'pending' AND attempts >= max_attempts;

ALTER TABLE engine_step_runs
    ADD CONSTRAINT engine_step_runs_pending_under_cap
    CHECK (status <> 'pending' OR attempts < max_attempts);
