-- An interrupted turn's kept text: the partial answer a stopped provider
-- call had streamed, stored as the call ends so that whichever worker
-- closes the interrupted turn keeps what the user saw. kept_run is the
-- stream run (stream_runs) the text is of and kept_iteration its
-- iteration: a later run or iteration makes it stale.
ALTER TABLE turn_inputs ADD COLUMN kept json;
ALTER TABLE turn_inputs ADD COLUMN kept_run integer;
ALTER TABLE turn_inputs ADD COLUMN kept_iteration integer;

-- Failed authentications per client address and port, counted across
-- replicas (the limiter behind 429 rate_limited): one row per address in
-- its current window, written only when an authentication fails.
CREATE TABLE auth_failures (
    port         text NOT NULL,
    addr         text NOT NULL,
    window_start timestamptz NOT NULL,
    count        integer NOT NULL,
    PRIMARY KEY (port, addr)
);
CREATE INDEX auth_failures_window ON auth_failures (window_start);

-- Live streams per replica, by scope (session or client key) and subject:
-- each replica writes its own counts in the background and reads the
-- others', so the stream caps hold across replicas. seen_at is the
-- replica's last write; a replica gone quiet stops counting.
CREATE TABLE stream_counts (
    replica text NOT NULL,
    scope   text NOT NULL,
    subject text NOT NULL,
    n       integer NOT NULL,
    seen_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (replica, scope, subject)
);
