-- The bae.session span's ref (see internal/telemetry): allocated when the
-- session opens with tracing on, taken (set back to NULL) by the replica
-- that emits the span when the session ends.
ALTER TABLE sessions ADD COLUMN span text;
