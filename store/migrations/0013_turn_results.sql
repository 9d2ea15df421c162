-- A turn's result, recorded by the session's workflow when the turn ends
-- (completed, paused, failed, interrupted or refused). Messages reach the
-- workflow as signals, so the server relaying a turn to its driver waits
-- for this row instead of for a Temporal Update's answer; a resend of the
-- same turn, on any replica and after any continue-as-new, reads it too.
ALTER TABLE turn_inputs ADD COLUMN result json;
