-- Console logins: the signed cookie names a row here, so logging out (which
-- deletes the row) ends the login even for a copy of the cookie saved before.
-- id_hash is the SHA-256 of the login's random id; password is a fingerprint
-- of the console password the login was made with, so a changed password
-- ends every older login.
CREATE TABLE console_logins (
    id_hash    bytea PRIMARY KEY,
    password   bytea NOT NULL,
    expires_at timestamptz NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX console_logins_expires ON console_logins (expires_at);
