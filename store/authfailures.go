package store

import (
	"context"
	"fmt"
	"time"
)

// RecordAuthFailure counts a failed authentication of addr on port across
// replicas, in windows of window, and returns the count in the current
// window and how much of it is left. Expired windows are dropped on the
// way: failures are rare, so the table stays small.
func (s *Store) RecordAuthFailure(ctx context.Context, port, addr string, window time.Duration) (int, time.Duration, error) {
	var (
		n    int
		left float64
	)
	err := s.Pool.QueryRow(ctx, `
		WITH gone AS (
			DELETE FROM auth_failures WHERE window_start < now() - 2 * $3::float8 * interval '1 second' AND NOT (port = $1 AND addr = $2)
		)
		INSERT INTO auth_failures AS f (port, addr, window_start, count) VALUES ($1, $2, now(), 1)
		ON CONFLICT (port, addr) DO UPDATE SET
			count = CASE WHEN f.window_start <= now() - $3::float8 * interval '1 second' THEN 1 ELSE f.count + 1 END,
			window_start = CASE WHEN f.window_start <= now() - $3::float8 * interval '1 second' THEN now() ELSE f.window_start END
		RETURNING count, extract(epoch FROM window_start + $3::float8 * interval '1 second' - now())::float8`,
		port, addr, window.Seconds()).Scan(&n, &left)
	if err != nil {
		return 0, 0, fmt.Errorf("record auth failure: %w", err)
	}
	return n, time.Duration(left * float64(time.Second)), nil
}
