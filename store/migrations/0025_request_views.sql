-- Storage by reference for compacted provider requests. A request whose
-- conversation was compacted carried a view of it (the messages after the
-- summary, tool results up to a boundary cleared) and was stored whole,
-- bounded by the window but the same size again on every turn. It now
-- stores what the view adds to the conversation it names (messages_upto):
-- the summary merged into its first message (the compaction that wrote it,
-- whose text session_summaries keeps), the last message the summary stands
-- for (view_through) and the cleared boundary (view_cleared). Readers
-- render the view again, byte for byte what the provider was sent. Rows
-- stored before keep their messages in the payload and read as before.
ALTER TABLE session_events ADD COLUMN view_through bigint;
ALTER TABLE session_events ADD COLUMN view_cleared bigint;
ALTER TABLE session_events ADD COLUMN view_summary text;
