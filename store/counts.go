package store

import (
	"context"
	"fmt"
)

// ActivityCounts are deployment-wide totals, reported by the telemetry
// gauges.
type ActivityCounts struct {
	OpenSessions    int64
	TotalSessions   int64
	Events          int64
	Profiles        int64
	ClientKeys      int64
	PendingTurns    int64
	LiveSandboxes   int64
	ActiveSubagents int64
	Drivers         int64
	// PendingApprovals are held tool calls waiting for a decision.
	PendingApprovals int64
}

// ActivityCounts reads every total in one statement. The event total sums
// the per-session sequence allocators instead of counting the log, so its
// cost follows the number of sessions, not of events.
func (s *Store) ActivityCounts(ctx context.Context) (ActivityCounts, error) {
	var c ActivityCounts
	err := s.Pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM sessions WHERE state = 'open'),
		(SELECT count(*) FROM sessions),
		(SELECT coalesce(sum(last_event_seq), 0)::bigint FROM sessions),
		(SELECT count(*) FROM profiles WHERE deleted_at IS NULL),
		(SELECT count(*) FROM keys WHERE role = 'client' AND deleted_at IS NULL),
		(SELECT count(*) FROM sessions WHERE state = 'open' AND pending_turn IS NOT NULL),
		(SELECT count(*) FROM sessions WHERE state = 'open' AND sandbox IS NOT NULL),
		(SELECT count(*) FROM subagents WHERE status = 'running'),
		(SELECT count(*) FROM session_clients c JOIN sessions s ON s.id = c.session_id
			WHERE s.state = 'open' AND c.registered_at IS NOT NULL),
		(SELECT count(*) FROM approvals WHERE state = 'pending')`).
		Scan(&c.OpenSessions, &c.TotalSessions, &c.Events, &c.Profiles, &c.ClientKeys,
			&c.PendingTurns, &c.LiveSandboxes, &c.ActiveSubagents, &c.Drivers, &c.PendingApprovals)
	if err != nil {
		return ActivityCounts{}, fmt.Errorf("activity counts: %w", err)
	}
	return c, nil
}
