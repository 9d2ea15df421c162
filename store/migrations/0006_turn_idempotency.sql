-- A client-chosen Idempotency-Key per sendMessage, unique per session: a
-- resend with the same key finds the stored turn instead of storing the
-- message again. Messages sent without one keep idem_key NULL.
ALTER TABLE turn_inputs ADD COLUMN idem_key text;
CREATE UNIQUE INDEX turn_inputs_idem ON turn_inputs (session_id, idem_key) WHERE idem_key IS NOT NULL;
