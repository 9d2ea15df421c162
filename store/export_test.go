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

// SetMergeDeltaEnd switches the delta end's ride in the result's update
// (off: its own update, the row version it saves).
func SetMergeDeltaEnd(on bool) { mergeDeltaEnd = on }

// SetMergeBeginResult switches the begin result's ride in the run
// numbering's update (off: its own update).
func SetMergeBeginResult(on bool) { mergeBeginResult = on }

// SetMergeMessage switches the queued message's ride in the answer's
// event append (off: its own update of the session row).
func SetMergeMessage(on bool) { mergeMessage = on }

// SetHoldBeginResult switches holding a queued begin result past reads
// (off: it goes with the transaction's next round trip).
func SetHoldBeginResult(on bool) { holdBeginResult = on }

// RecordUsageSQL is the statement Tx.RecordUsage queues, for tests that
// hold its row locks in a transaction of their own.
const RecordUsageSQL = recordUsageSQL
