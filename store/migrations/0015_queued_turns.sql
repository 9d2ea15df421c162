-- The caps on queued turns (stored, not yet begun) count them on every
-- sendMessage, per session and per client key: partial indexes keep that
-- count to the queued rows, however many turns a session has run.
CREATE INDEX turn_inputs_queued_session ON turn_inputs (session_id) WHERE begin_result IS NULL AND result IS NULL;
CREATE INDEX turn_inputs_queued_key ON turn_inputs (client_key_id) WHERE begin_result IS NULL AND result IS NULL;
