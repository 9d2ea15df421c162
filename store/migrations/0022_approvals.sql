-- Approvals. A profile's policy (profiles.approvals, NULL = none) holds
-- matching server-side tool calls for a person's decision. Each request is
-- a row here as well as an approval.request event: the row is what the
-- admin list, the deciders' checks and the tool's approved arguments are
-- read from; the events are the session's record. The wait itself is in
-- the session's workflow (docs/design.md).
ALTER TABLE profiles ADD COLUMN approvals jsonb;

CREATE TABLE approvals (
    seq bigserial UNIQUE,
    id text PRIMARY KEY,
    session_id text NOT NULL REFERENCES sessions (id),
    turn_id text NOT NULL,
    iteration int NOT NULL,
    tool_call_id text NOT NULL,
    tool_kind text NOT NULL,
    tool_name text NOT NULL,
    server text,
    arguments jsonb NOT NULL,
    -- The tool's input schema when requested: edited arguments must fit it.
    input_schema jsonb,
    deciders text NOT NULL,
    -- The driver whose message started the turn.
    turn_driver text NOT NULL,
    deadline timestamptz NOT NULL,
    on_timeout text NOT NULL,
    state text NOT NULL DEFAULT 'pending',
    approved_arguments jsonb,
    message text,
    decided_by jsonb,
    decided_at timestamptz,
    requested_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (session_id, turn_id, iteration, tool_call_id)
);
CREATE INDEX approvals_pending ON approvals (seq) WHERE state = 'pending';
CREATE INDEX approvals_session ON approvals (session_id, seq);
