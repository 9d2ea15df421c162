package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// trackedTx is a transaction begun by Store.Tx. It remembers the events
// appended in it, which are handed to the tail once it committed, and it
// holds back writes whose results nobody reads (queue), its own BEGIN
// first, until the transaction's next round trip: they go to the server
// ahead of that statement or batch, or with the COMMIT, in the order they
// were made, and cost no round trip of their own.
type trackedTx struct {
	conn     *pgx.Conn
	origin   string
	appended map[string][]Event
	queued   []queuedWrite
	// queueErr is the first queued write that failed; the transaction
	// fails with it.
	queueErr error
	// committed: COMMIT went with the transaction's last batch
	// (commitWith); nothing may be sent after it.
	committed bool
	// local and committing: the sessions whose events the COMMIT carries
	// are marked in flight in local from just before it is sent until the
	// transaction settled (see localCommits).
	local      *localCommits
	committing []string
}

// queuedWrite is a statement whose only result is whether it succeeded.
type queuedWrite struct {
	what string // for the error: "append message", ...
	sql  string
	args []any
	// rows is the number of rows it must affect, or -1 for any.
	rows int64
	// checked is sql made to fail on the server unless it affects rows
	// rows (bae_check), for a batch that ends with COMMIT (commitWith);
	// "" when it has no such form: it is then checked before the commit.
	checked string
	// mismatch, when set, is the error of a write that affected another
	// number of rows (a check that did not hold), instead of ErrNotFound.
	mismatch error
	// beginResultOf names the turn whose begin result this write stores
	// (Tx.SetBeginResult), for a run numbering to take it along.
	beginResultOf string
	// message, when set, is the conversation message this write appends
	// (Tx.AppendMessage: session, key, role, content), for an event append
	// to store it with its own update of the session row.
	message []any
	// messageFree says the write neither reads nor writes the conversation
	// or its counter: a message queued before it may be stored after it.
	messageFree bool
}

// runTx runs fn in a transaction on a connection of pool: BEGIN goes with
// fn's first round trip, COMMIT with its queued writes, if any are left.
// The connection of a transaction that did not end cleanly is closed when
// released, never reused mid-transaction.
func runTx(ctx context.Context, pool *pgxpool.Pool, t *trackedTx, fn func(t *trackedTx) error) error {
	c, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	defer c.Release()
	t.conn = c.Conn()
	t.queue(queuedWrite{what: "begin transaction", sql: beginSQL, rows: -1})
	t.queue(queuedWrite{what: "use generic plans", sql: genericPlansSQL, rows: -1})
	err = fn(t)
	if t.queueErr != nil {
		// A queued write failed: whatever fn saw after it was the aborted
		// transaction; this is the cause.
		err = t.queueErr
	}
	if err == nil {
		if err = t.commit(ctx); err == nil {
			return nil
		}
	}
	if t.begun() && !t.committed {
		// End the transaction. Should that fail too, Release sees the
		// connection still in a transaction and closes it.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_, _ = t.conn.Exec(rctx, "rollback")
	}
	return err
}

// beginSQL opens every tracked transaction, as its first queued write.
const beginSQL = "begin"

// genericPlansSQL follows beginSQL: the transaction's statements run on
// their generic plans. PostgreSQL otherwise plans several of a turn's
// statements afresh on every call (their custom plans, which see the
// parameters, look cheaper than the generic ones), and that planning cost
// more CPU than the statement itself skipped: a tracked transaction's
// statements are probes by key, where the generic plan is the custom one.
// The setting ends with the transaction; it costs a statement, no round
// trip (it goes with BEGIN).
const genericPlansSQL = "SELECT set_config('plan_cache_mode', 'force_generic_plan', true)"

// openingWrites are the writes runTx queues before fn runs: beginSQL and
// genericPlansSQL.
const openingWrites = 2

// begun reports whether BEGIN reached the server (it left the queue).
func (t *trackedTx) begun() bool { return len(t.queued) == 0 || t.queued[0].sql != beginSQL }

// commit sends the queued writes and COMMIT, in one round trip unless a
// queued write's result must be checked first. A transaction that never
// reached the server has nothing to commit.
func (t *trackedTx) commit(ctx context.Context) error {
	if t.committed {
		return nil
	}
	if !t.begun() && len(t.queued) == openingWrites {
		t.queued = nil
		return nil
	}
	for _, w := range t.queued {
		if w.rows >= 0 {
			// Its check is made here, not by the server: the server would
			// commit right after a write that changed too few rows.
			if err := t.flush(ctx); err != nil {
				return err
			}
			break
		}
	}
	t.inFlight("")
	b := &pgx.Batch{}
	b.Queue("commit")
	br := t.sendBatch(ctx, b, true)
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	switch {
	case t.queueErr != nil:
		return t.queueErr
	case err != nil:
		return fmt.Errorf("commit: %w", err)
	case tag.String() == "ROLLBACK":
		// The server had aborted the transaction.
		return fmt.Errorf("commit: %w", pgx.ErrTxCommitRollback)
	}
	return nil
}

func (t *trackedTx) record(sessionID string, evs []Event) {
	if t.appended == nil {
		t.appended = map[string][]Event{}
	}
	t.appended[sessionID] = append(t.appended[sessionID], evs...)
}

// queue holds w back until the next round trip.
func (t *trackedTx) queue(w queuedWrite) { t.queued = append(t.queued, w) }

// takeMessage takes the one conversation message queued for sessionID out
// of the queue and returns its arguments, when nothing queued after it
// depends on the conversation (false: none, several, or not movable).
func (t *trackedTx) takeMessage(sessionID string) ([]any, bool) {
	at := -1
	for i, w := range t.queued {
		switch {
		case w.message != nil && w.message[0] == sessionID:
			if at >= 0 {
				return nil, false
			}
			at = i
		case at >= 0 && !w.messageFree:
			return nil, false
		}
	}
	if at < 0 {
		return nil, false
	}
	m := t.queued[at].message
	t.queued = append(t.queued[:at:at], t.queued[at+1:]...)
	return m, true
}

// splitHeld splits queued writes into those to send now and those held
// (a begin result, see sendBatch), each in its order.
func splitHeld(q []queuedWrite) (send, held []queuedWrite) {
	for i, w := range q {
		if w.beginResultOf != "" && holdBeginResult {
			if held == nil {
				send = append(make([]queuedWrite, 0, len(q)), q[:i]...)
			}
			held = append(held, w)
		} else if held != nil {
			send = append(send, w)
		}
	}
	if held == nil {
		return q, nil
	}
	return send, held
}

// holdBeginResult is off only in tests that count the turn row's versions
// without the hold.
var holdBeginResult = true

// takeBeginResult takes the queued begin result of turnID out of the
// queue and returns its JSON, for a statement that writes the turn's row
// anyway to store it (false: none queued).
func (t *trackedTx) takeBeginResult(turnID string) (string, bool) {
	for i := len(t.queued) - 1; i >= 0; i-- {
		if w := t.queued[i]; w.beginResultOf == turnID && turnID != "" {
			t.queued = append(t.queued[:i:i], t.queued[i+1:]...)
			return w.args[1].(string), true
		}
	}
	return "", false
}

// SendBatch sends the queued writes ahead of b, in one round trip. A write
// the server refused aborts the transaction, so what follows it in the
// batch fails too; one that affected the wrong number of rows does not, and
// b runs. Either way runTx ends the transaction with that write's error.
func (t *trackedTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return t.sendBatch(ctx, b, false)
}

// sendBatch is SendBatch; unless whole, a queued begin result stays queued
// (held): nothing in its transaction reads it back, and held until the
// commit it can ride in the update that numbers the turn's run.
func (t *trackedTx) sendBatch(ctx context.Context, b *pgx.Batch, whole bool) pgx.BatchResults {
	if t.committed {
		return errBatch{err: errCommitted}
	}
	q := t.queued
	t.queued = nil
	if !whole {
		q, t.queued = splitHeld(q)
	}
	if len(q) == 0 {
		return t.conn.SendBatch(ctx, b)
	}
	all := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, len(q)+b.Len())}
	for _, w := range q {
		all.Queue(w.sql, w.args...)
	}
	all.QueuedQueries = append(all.QueuedQueries, b.QueuedQueries...)
	br := t.conn.SendBatch(ctx, all)
	for _, w := range q {
		tag, err := br.Exec()
		if err == nil && w.rows >= 0 && tag.RowsAffected() != w.rows {
			err = fmt.Errorf("%d rows affected, want %d: %w", tag.RowsAffected(), w.rows, ErrNotFound)
			if w.mismatch != nil {
				err = w.mismatch
			}
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
	if t.committed {
		return errCommitted
	}
	if q, _ := splitHeld(t.queued); len(q) > 0 {
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
	return t.conn.Exec(ctx, sql, args...)
}

func (t *trackedTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := t.flush(ctx); err != nil {
		return nil, err
	}
	return t.conn.Query(ctx, sql, args...)
}

func (t *trackedTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := t.flush(ctx); err != nil {
		return errRow{err}
	}
	return t.conn.QueryRow(ctx, sql, args...)
}

// errRow is a row that could not be read.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// canCommitWith reports whether the queued writes can go in a batch that
// ends with COMMIT: the server checks every row count (queuedWrite.checked).
func (t *trackedTx) canCommitWith() bool {
	for _, w := range t.queued {
		if w.rows >= 0 && w.checked == "" {
			return false
		}
	}
	return true
}

// commitWith sends the queued writes, b (which appends events of
// sessionID) and COMMIT in one round trip; read
// reads b's results (and only them). A statement that fails (a bae_check
// included) aborts the transaction, so the COMMIT that follows it in the
// batch does not commit and runTx rolls back. Only when every statement
// succeeded did it commit; an error read returns after that (a result it
// could not decode) comes after the commit. The caller must have asked
// canCommitWith.
func (t *trackedTx) commitWith(ctx context.Context, sessionID string, b *pgx.Batch, read func(br pgx.BatchResults) error) error {
	if t.committed {
		return errCommitted
	}
	t.inFlight(sessionID)
	q := t.queued
	t.queued = nil
	all := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, len(q)+b.Len()+1)}
	for _, w := range q {
		sql := w.sql
		if w.rows >= 0 {
			sql = w.checked
		}
		all.Queue(sql, w.args...)
	}
	all.QueuedQueries = append(all.QueuedQueries, b.QueuedQueries...)
	all.Queue("commit")
	br := t.conn.SendBatch(ctx, all)
	var err error
	for _, w := range q {
		if _, werr := br.Exec(); werr != nil && err == nil {
			err = fmt.Errorf("%s: %w", w.what, checkError(werr))
		}
	}
	if err == nil {
		err = read(br)
	}
	// Close reads whatever read left, through the batch's end; then the
	// connection's transaction status says whether the COMMIT ran (idle:
	// it did; a failed statement leaves the transaction aborted).
	cerr := br.Close()
	pc := t.conn.PgConn()
	if !pc.IsClosed() && pc.TxStatus() == 'I' {
		t.committed = true
		return err
	}
	switch {
	case err != nil:
		return err
	case cerr != nil:
		return fmt.Errorf("commit: %w", checkError(cerr))
	}
	return fmt.Errorf("commit: %w", pgx.ErrTxCommitRollback)
}

// inFlight marks the sessions whose events the COMMIT about to be sent
// carries (those appended before, and sessionID unless "") as committing.
func (t *trackedTx) inFlight(sessionID string) {
	if t.local == nil || t.committing != nil {
		return
	}
	ids := make([]string, 0, len(t.appended)+1)
	for id := range t.appended {
		if id != sessionID {
			ids = append(ids, id)
		}
	}
	if sessionID != "" {
		ids = append(ids, sessionID)
	}
	if len(ids) > 0 {
		t.committing = ids
		t.local.begin(ids)
	}
}

// landed ends the flight inFlight began, once the transaction settled.
func (t *trackedTx) landed() {
	if t.committing != nil {
		t.local.end(t.committing)
		t.committing = nil
	}
}

var errCommitted = errors.New("transaction already committed with its last batch")

// errBatch is a batch that could not be sent. (It embeds the interface
// for methods it does not use; they are never called.)
type errBatch struct {
	pgx.BatchResults
	err error
}

func (b errBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, b.err }
func (b errBatch) Query() (pgx.Rows, error)         { return nil, b.err }
func (b errBatch) QueryRow() pgx.Row                { return errRow{b.err} }
func (b errBatch) Close() error                     { return b.err }
