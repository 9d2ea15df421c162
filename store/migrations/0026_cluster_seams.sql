-- An interrupted turn's kept text: the partial answer a stopped provider
-- call had streamed, stored as the call ends so that whichever worker
-- closes the interrupted turn keeps what the user saw. kept_run is the
-- stream run (stream_runs) the text is of and kept_iteration its
-- iteration: a later run or iteration makes it stale.
ALTER TABLE turn_inputs ADD COLUMN kept json;
ALTER TABLE turn_inputs ADD COLUMN kept_run integer;
ALTER TABLE turn_inputs ADD COLUMN kept_iteration integer;
