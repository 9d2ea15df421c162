-- Core schema: profiles, keys, sessions, per-client declarations, the
-- append-only event log and the provider-facing conversation.

CREATE TABLE profiles (
    id                  text PRIMARY KEY,
    seq                 bigserial UNIQUE,
    name                text NOT NULL,
    primary_provider    text NOT NULL,
    fallback_providers  jsonb NOT NULL DEFAULT '[]',
    mcp_servers         jsonb NOT NULL DEFAULT '[]',
    allowed_tools       jsonb NOT NULL DEFAULT '[]',
    available_sandboxes jsonb NOT NULL DEFAULT '[]',
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    deleted_at          timestamptz
);
-- Names are unique among live profiles only; a soft-deleted name may be reused.
CREATE UNIQUE INDEX profiles_live_name ON profiles (name) WHERE deleted_at IS NULL;

CREATE TABLE keys (
    id            text PRIMARY KEY,
    seq           bigserial UNIQUE,
    role          text NOT NULL CHECK (role IN ('admin', 'client', 'session')),
    name          text NOT NULL DEFAULT '',
    prefix        text NOT NULL,
    key_hash      text NOT NULL,
    profile_id    text,
    session_id    text,
    -- For session keys: the client key (creator or joiner) it was minted for.
    client_key_id text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    last_used_at  timestamptz,
    deleted_at    timestamptz
);
CREATE INDEX keys_hash ON keys (key_hash) WHERE deleted_at IS NULL;
CREATE INDEX keys_client ON keys (client_key_id) WHERE role = 'session';
CREATE INDEX keys_profile ON keys (profile_id) WHERE role = 'client' AND deleted_at IS NULL;

CREATE TABLE sessions (
    id              text PRIMARY KEY,
    seq             bigserial UNIQUE,
    profile_id      text NOT NULL,
    client_key_id   text NOT NULL,
    state           text NOT NULL CHECK (state IN ('open', 'closed', 'error')),
    client_version  text,
    -- Tool definitions discovered from the profile's MCP servers at open,
    -- each tagged with its server, so any replica can advertise them.
    mcp_tools       jsonb NOT NULL DEFAULT '[]',
    -- Allocator for the per-session event sequence (see AppendEvents).
    last_event_seq  bigint NOT NULL DEFAULT 0,
    last_message_seq bigint NOT NULL DEFAULT 0,
    -- The paused turn's server-side state (tool uses, stashed results).
    pending_turn    jsonb,
    -- The one remote sandbox, when running: {"id","image"}.
    sandbox         jsonb,
    created_at      timestamptz NOT NULL DEFAULT now(),
    closed_at       timestamptz
);
CREATE INDEX sessions_state ON sessions (state, seq);
CREATE INDEX sessions_client ON sessions (client_key_id) WHERE state = 'open';

-- One row per client key attached to a session (creator and joiners).
CREATE TABLE session_clients (
    session_id     text NOT NULL REFERENCES sessions (id),
    client_key_id  text NOT NULL,
    client_version text,
    tools          jsonb NOT NULL DEFAULT '[]',
    sandbox_tools  jsonb NOT NULL DEFAULT '[]',
    subagent_tools jsonb NOT NULL DEFAULT '[]',
    registered_at  timestamptz,
    joined_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, client_key_id)
);

-- The append-only event log. (session_id, seq) is the order; idem_key makes
-- appends from retried activities no-ops.
CREATE TABLE session_events (
    session_id    text NOT NULL REFERENCES sessions (id),
    seq           bigint NOT NULL,
    id            text NOT NULL UNIQUE,
    idem_key      text,
    turn_id       text,
    client_key_id text,
    event_type    text NOT NULL,
    payload       json NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, seq)
);
CREATE UNIQUE INDEX session_events_idem ON session_events (session_id, idem_key) WHERE idem_key IS NOT NULL;
CREATE INDEX session_events_turn ON session_events (session_id, turn_id) WHERE turn_id IS NOT NULL;

-- The conversation as sent upstream: one row per message, in order.
CREATE TABLE session_messages (
    session_id text NOT NULL REFERENCES sessions (id),
    seq        bigint NOT NULL,
    idem_key   text NOT NULL,
    role       text NOT NULL,
    content    json NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, seq),
    UNIQUE (session_id, idem_key)
);

-- The message a driver sent, stored before the SendMessage update so the body
-- never enters workflow history; begin_result makes BeginTurn idempotent.
CREATE TABLE turn_inputs (
    turn_id       text PRIMARY KEY,
    session_id    text NOT NULL REFERENCES sessions (id),
    client_key_id text NOT NULL,
    message       json NOT NULL,
    begin_result  json,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX turn_inputs_session ON turn_inputs (session_id);
