-- Remote subagents: CLI runs launched by the server inside a session's
-- remote sandbox. Rows are the status tool's source; a terminal row is
-- evicted (evicted_at) once the status tool reported it.
CREATE TABLE subagents (
    id            text PRIMARY KEY,
    seq           bigserial UNIQUE,
    session_id    text NOT NULL REFERENCES sessions (id),
    client_key_id text NOT NULL,
    harness       text NOT NULL,
    model         text NOT NULL,
    status        text NOT NULL CHECK (status IN ('running', 'completed', 'failed', 'timed_out', 'cancelled')),
    sandbox_id    text NOT NULL,
    command       text NOT NULL,
    stdin         text,
    timeout_secs  integer NOT NULL,
    exit_code     integer,
    stdout        text,
    stderr        text,
    truncated     boolean NOT NULL DEFAULT false,
    reason        text,
    detail        text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    finished_at   timestamptz,
    evicted_at    timestamptz
);
CREATE INDEX subagents_session ON subagents (session_id, seq) WHERE evicted_at IS NULL;
