-- Context compaction. The conversation stays whole in session_messages; a
-- provider request carries a view of it. session_context is where the view
-- stands (messages up to through_seq replaced by the summary, tool results
-- up to cleared_seq cleared; both only move forward) and the session's
-- calibrated bytes-per-token estimate. session_summaries keeps every summary
-- written, keyed by the compaction that wrote it, so a summarizer retried
-- after a crash stores one summary, not two.
ALTER TABLE profiles ADD COLUMN context jsonb;
CREATE TABLE session_context (
    session_id      text PRIMARY KEY,
    through_seq     bigint NOT NULL DEFAULT 0,
    cleared_seq     bigint NOT NULL DEFAULT 0,
    summary         text NOT NULL DEFAULT '',
    summary_id      text NOT NULL DEFAULT '',
    bytes_per_token double precision NOT NULL DEFAULT 0
);
CREATE TABLE session_summaries (
    session_id  text NOT NULL,
    id          text NOT NULL,
    through_seq bigint NOT NULL,
    summary     text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, id)
);
