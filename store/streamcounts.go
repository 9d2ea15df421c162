package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// StreamSubject is what a live-stream cap counts: a session or a client
// key (Scope ScopeSession or ScopeClientKey).
type StreamSubject struct {
	Scope, Subject string
}

// ShareStreamCounts replaces replica's live-stream counts with counts (a
// subject left out has none) and returns the other replicas' counts, from
// those that wrote theirs within fresh: a replica gone quiet (stopped,
// killed) stops counting. Rows of replicas quiet for ten times fresh are
// dropped on the way. One statement.
func (s *Store) ShareStreamCounts(ctx context.Context, replica string, counts map[StreamSubject]int, fresh time.Duration) (map[StreamSubject]int, error) {
	scopes := make([]string, 0, len(counts))
	subjects := make([]string, 0, len(counts))
	ns := make([]int32, 0, len(counts))
	for k, n := range counts {
		scopes, subjects, ns = append(scopes, k.Scope), append(subjects, k.Subject), append(ns, int32(n))
	}
	rows, err := s.Pool.Query(ctx, `
		WITH mine AS (
			SELECT * FROM unnest($2::text[], $3::text[], $4::int[]) AS m (scope, subject, n)
		), gone AS (
			DELETE FROM stream_counts c
			WHERE (c.replica = $1 AND NOT EXISTS (SELECT 1 FROM mine WHERE mine.scope = c.scope AND mine.subject = c.subject))
			   OR c.seen_at < now() - 10 * $5::float8 * interval '1 second'
		), up AS (
			INSERT INTO stream_counts (replica, scope, subject, n, seen_at)
			SELECT $1, scope, subject, n, now() FROM mine
			ON CONFLICT (replica, scope, subject) DO UPDATE SET n = EXCLUDED.n, seen_at = now()
		)
		SELECT scope, subject, sum(n)::int FROM stream_counts
		WHERE replica <> $1 AND seen_at > now() - $5::float8 * interval '1 second'
		GROUP BY scope, subject`,
		replica, scopes, subjects, ns, fresh.Seconds())
	if err != nil {
		return nil, fmt.Errorf("share stream counts: %w", err)
	}
	others := map[StreamSubject]int{}
	var (
		k StreamSubject
		n int
	)
	if _, err := pgx.ForEachRow(rows, []any{&k.Scope, &k.Subject, &n}, func() error {
		others[k] = n
		return nil
	}); err != nil {
		return nil, fmt.Errorf("share stream counts: %w", err)
	}
	return others, nil
}

// DropStreamCounts removes replica's live-stream counts (it is stopping).
func (s *Store) DropStreamCounts(ctx context.Context, replica string) error {
	if _, err := s.Pool.Exec(ctx, `DELETE FROM stream_counts WHERE replica = $1`, replica); err != nil {
		return fmt.Errorf("drop stream counts: %w", err)
	}
	return nil
}
