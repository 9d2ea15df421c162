package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// trackedTx is a transaction begun by Store.Tx. It remembers the events
// appended in it, which are handed to the tail once it committed, and it
// holds back writes whose results nobody reads (queue) until the
// transaction's next round trip: they go to the server ahead of that
// statement or batch, or ahead of the commit, in the order they were made,
// and cost no round trip of their own.
type trackedTx struct {
	pgx.Tx
	origin   string
	appended map[string][]Event
	queued   []queuedWrite
	// queueErr is the first queued write that failed; the transaction
	// fails with it.
	queueErr error
}

// queuedWrite is a statement whose only result is whether it succeeded.
type queuedWrite struct {
	what string // for the error: "append message", ...
	sql  string
	args []any
	// rows is the number of rows it must affect, or -1 for any.
	rows int64
}

func (t *trackedTx) record(sessionID string, evs []Event) {
	if t.appended == nil {
		t.appended = map[string][]Event{}
	}
	t.appended[sessionID] = append(t.appended[sessionID], evs...)
}

// queue holds w back until the next round trip.
func (t *trackedTx) queue(w queuedWrite) { t.queued = append(t.queued, w) }

// SendBatch sends the queued writes ahead of b, in one round trip. When one
// of them failed, so does everything after it (the transaction is aborted),
// and the transaction ends with that write's error.
func (t *trackedTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if len(t.queued) == 0 {
		return t.Tx.SendBatch(ctx, b)
	}
	q := t.queued
	t.queued = nil
	all := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, len(q)+b.Len())}
	for _, w := range q {
		all.Queue(w.sql, w.args...)
	}
	all.QueuedQueries = append(all.QueuedQueries, b.QueuedQueries...)
	br := t.Tx.SendBatch(ctx, all)
	for _, w := range q {
		tag, err := br.Exec()
		if err == nil && w.rows >= 0 && tag.RowsAffected() != w.rows {
			err = fmt.Errorf("%d rows affected, want %d: %w", tag.RowsAffected(), w.rows, ErrNotFound)
		}
		if err != nil && t.queueErr == nil {
			t.queueErr = fmt.Errorf("%s: %w", w.what, err)
		}
	}
	return br
}

// flush sends the queued writes on their own, when a statement that is not
// a batch comes next, or the commit.
func (t *trackedTx) flush(ctx context.Context) error {
	if len(t.queued) > 0 {
		if err := t.SendBatch(ctx, &pgx.Batch{}).Close(); err != nil && t.queueErr == nil {
			return err
		}
	}
	return t.queueErr
}

func (t *trackedTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := t.flush(ctx); err != nil {
		return pgconn.CommandTag{}, err
	}
	return t.Tx.Exec(ctx, sql, args...)
}

func (t *trackedTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := t.flush(ctx); err != nil {
		return nil, err
	}
	return t.Tx.Query(ctx, sql, args...)
}

func (t *trackedTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := t.flush(ctx); err != nil {
		return errRow{err}
	}
	return t.Tx.QueryRow(ctx, sql, args...)
}

// errRow is a row that could not be read.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
