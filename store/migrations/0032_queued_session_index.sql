-- turn_inputs_queued_session (session_id) WHERE begin_result IS NULL AND
-- result IS NULL indexed a subset of the rows of turn_inputs_unfinished
-- (session_id) WHERE result IS NULL, under the same key. Its one query,
-- the per-session queue cap at send (store.checkQueueCaps and the capped
-- insert), now counts the queued rows among the session's unfinished ones
-- read from turn_inputs_unfinished: the queued rows, plus at most the one
-- turn running. Every send wrote an entry in it, and PostgreSQL kept it
-- on every turn_inputs write; the other five indexes serve every query.
DROP INDEX IF EXISTS turn_inputs_queued_session;
