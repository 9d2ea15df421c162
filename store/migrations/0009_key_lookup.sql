-- Argon2id keys (written by default, and carried over from BAE databases)
-- cannot be found by their hash: a client or admin key is found by its
-- display prefix, a session key by its session, then verified.
CREATE INDEX keys_prefix ON keys (prefix) WHERE deleted_at IS NULL;
CREATE INDEX keys_session ON keys (session_id) WHERE role = 'session' AND deleted_at IS NULL;
