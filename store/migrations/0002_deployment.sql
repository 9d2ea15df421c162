-- A random id naming this database, so sandbox containers started by its
-- servers can be told apart from those of another deployment on one engine.
CREATE TABLE deployment (
    id         text PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO deployment (id) VALUES ('dep_' || md5(random()::text || clock_timestamp()::text));
