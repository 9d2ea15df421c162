package api

// AccessReads is how many authorization re-reads (database queries) the
// long-lived streams served with d have made.
func AccessReads(d *Deps) int64 { return d.accessReads.Load() }
