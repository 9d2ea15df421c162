-- Where each stored provider response's live deltas end: by the
-- response's idempotency key, the sequence of the last delta published by
-- the run whose answer (or failure) was stored. A stream that relays the
-- response checks it holds every delta up to it first, and sends a reset
-- when it cannot, so a delta lost between replicas never goes unnoticed.
ALTER TABLE turn_inputs ADD COLUMN delta_ends jsonb;
