-- What a turn writes no longer waits on other sessions' turns, nor checks
-- what its statements already check.
--
-- usage_subjects: a key's or profile's day is now summed in up to 16 rows,
-- one per shard of the sessions (hashtext(session_id) & 15), instead of
-- one row that every answer of every session under the key (and under the
-- profile) updated in its transaction: each answer held that row locked
-- until its COMMIT, so answers of different sessions queued behind each
-- other's commits. A budget sums its subject's rows as before (at most 16
-- per day of its period).
ALTER TABLE usage_subjects ADD COLUMN shard smallint NOT NULL DEFAULT 0;
ALTER TABLE usage_subjects DROP CONSTRAINT usage_subjects_pkey;
ALTER TABLE usage_subjects ADD PRIMARY KEY (scope, subject, day, shard);

-- The foreign keys of the rows every turn inserts (events, conversation
-- messages, turn inputs): each inserted row ran a check of the session
-- row (a key-share lock of it). Sessions are never deleted; events and
-- messages are appended by statements that update their session's row
-- (its counters) and fail when it is missing, and a message is stored
-- only for a session whose key authenticated the send: the checks
-- guarded nothing.
ALTER TABLE session_events DROP CONSTRAINT IF EXISTS session_events_session_id_fkey;
ALTER TABLE session_messages DROP CONSTRAINT IF EXISTS session_messages_session_id_fkey;
ALTER TABLE turn_inputs DROP CONSTRAINT IF EXISTS turn_inputs_session_id_fkey;
