-- Linear storage of the conversation. A provider.request event names the
-- conversation it sent by the message counter it was built at
-- (messages_upto) instead of carrying every message again; readers
-- materialize it. For that the messages a reference names must never
-- change: a failed turn's messages leave the conversation by being marked
-- with the counter value of their removal (dropped_seq), not deleted.
ALTER TABLE session_messages ADD COLUMN dropped_seq bigint;
CREATE INDEX session_messages_dropped ON session_messages (session_id, dropped_seq) WHERE dropped_seq IS NOT NULL;
ALTER TABLE session_events ADD COLUMN messages_upto bigint;
