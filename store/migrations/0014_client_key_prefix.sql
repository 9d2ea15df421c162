-- An Argon2id client key is found by its eight-character prefix, then
-- verified. Several live keys under one prefix made a request pay one
-- Argon2id per row (an imported file could stack any number), so a prefix
-- now names at most one live Argon2id client key: minting draws a new
-- secret when its prefix is taken, an import refuses the file, and this
-- index holds the rule for every row written from now on.
--
-- Rows stored earlier that already share a prefix are marked instead of
-- refused, so the upgrade cannot fail on them and their keys keep working:
-- a request verifies up to four candidates of one prefix (none when more
-- share it, which only planted rows do); the server logs their ids.
ALTER TABLE keys ADD COLUMN shared_prefix boolean NOT NULL DEFAULT false;

UPDATE keys k SET shared_prefix = true
WHERE k.role = 'client' AND k.deleted_at IS NULL AND k.key_hash LIKE '$argon2id$%'
  AND EXISTS (SELECT 1 FROM keys o
              WHERE o.id <> k.id AND o.role = 'client' AND o.deleted_at IS NULL
                AND o.key_hash LIKE '$argon2id$%' AND o.prefix = k.prefix);

CREATE UNIQUE INDEX keys_client_prefix ON keys (prefix)
    WHERE role = 'client' AND deleted_at IS NULL AND NOT shared_prefix AND key_hash LIKE '$argon2id$%';
