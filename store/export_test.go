package store

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// SetAnswerInOneTrip switches Tx.AppendAndCommit's single round trip (off:
// the two round trips whose rows it must reproduce).
func SetAnswerInOneTrip(on bool) { answerInOneTrip = on }

// OnSettleWait sets a function called when a reader starts waiting for a
// local commit to settle (FollowEventsThrough).
func (s *Store) OnSettleWait(fn func()) { s.local.waiting = fn }

// QueryRow runs a statement in the transaction, for tests that read its
// settings.
func (t *Tx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return t.db.QueryRow(ctx, sql, args...)
}
