-- A session's messages without a recorded result (queued or running): a
-- new message reads them to know whether it finds its session idle (see
-- store.PutTurnInput), as does the reject busy policy (store.TurnGate).
CREATE INDEX turn_inputs_unfinished ON turn_inputs (session_id) WHERE result IS NULL;
