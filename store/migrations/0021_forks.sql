-- Forks. A fork is a session whose history starts as another session's
-- (its source) up to an event, shared rather than copied: the fork's row
-- names the source, the last inherited event (forked_event_seq) and the
-- source's message counter at that point (forked_message_seq). The fork's
-- own counters start there, so its events and messages continue the
-- inherited sequences; readers walk the chain (store/fork.go).
ALTER TABLE sessions ADD COLUMN forked_from text REFERENCES sessions (id);
ALTER TABLE sessions ADD COLUMN forked_event_seq bigint;
ALTER TABLE sessions ADD COLUMN forked_message_seq bigint;
CREATE INDEX sessions_forked_from ON sessions (forked_from) WHERE forked_from IS NOT NULL;
