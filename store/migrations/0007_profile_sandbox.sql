-- A profile's overrides of the [sandbox] bounds of bae-config.toml
-- (memory_mib, cpus, pids, cap_add, no_new_privileges, user, network,
-- exec_timeout_secs); {} inherits every one.
ALTER TABLE profiles ADD COLUMN sandbox jsonb NOT NULL DEFAULT '{}';
