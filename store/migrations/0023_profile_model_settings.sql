-- A profile's model settings: per provider entry name, the settings that
-- override the entry's model_settings for the profile's sessions
-- (provider.Settings as JSON, validated when the profile is written).
-- NULL: the entries' own settings, as before.
ALTER TABLE profiles ADD COLUMN model_settings jsonb;
