-- Live deltas number each provider call of a turn (a run: an attempt, or
-- that attempt again after a crash) so a turn's delta sequence only grows;
-- stream_step is the attempt the last run was, which tells a new run whether
-- it supersedes a run of the same iteration.
ALTER TABLE turn_inputs ADD COLUMN stream_runs integer NOT NULL DEFAULT 0;
ALTER TABLE turn_inputs ADD COLUMN stream_step text;
