package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/internal/compaction"
)

// ContextInputs is what a compacting provider attempt reads besides its
// AttemptInputs: where the session's view stands, the profile's policy and
// the live messages after the summary.
type ContextInputs struct {
	State compaction.State
	// Policy is the profile's stored "context" (nil: the default).
	Policy json.RawMessage
	// Messages are the conversation's messages after State.ThroughSeq.
	Messages []compaction.Message
	// Counter is the message counter the messages reflect.
	Counter int64
}

const contextQuery = `SELECT coalesce(c.through_seq, 0), coalesce(c.cleared_seq, 0), coalesce(c.summary, ''), coalesce(c.summary_id, ''),
	coalesce(c.bytes_per_token, 0), p.context
	FROM sessions s LEFT JOIN session_context c ON c.session_id = s.id LEFT JOIN profiles p ON p.id = s.profile_id
	WHERE s.id = $1`

func scanContext(row pgx.Row, in *ContextInputs) error {
	var policy []byte
	st := &in.State
	err := row.Scan(&st.ThroughSeq, &st.ClearedSeq, &st.Summary, &st.SummaryID, &st.BytesPerToken, &policy)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("read context: session: %w", ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("read context: %w", err)
	}
	in.Policy = policy
	return nil
}

// AttemptContext is Tx.Attempt for a compacting attempt: the attempt's
// inputs, the context state and the messages after the summary, in one
// round trip (only the messages this process has not read yet come from
// the database).
func (t *Tx) AttemptContext(ctx context.Context, sessionID, clientKeyID, respIdem string) (AttemptInputs, ContextInputs, error) {
	var ci ContextInputs
	in, err := t.attemptRead(ctx, sessionID, clientKeyID, respIdem,
		func(b *pgx.Batch) { b.Queue(contextQuery, sessionID) },
		func(br pgx.BatchResults) error { return scanContext(br.QueryRow(), &ci) },
		func(e *convEntry) { ci.Messages, ci.Counter = e.liveAfter(ci.State.ThroughSeq), e.last })
	return in, ci, err
}

// ContextOf reads a session's context state, policy and the messages after
// its summary (as AttemptContext, outside an attempt).
func (s *Store) ContextOf(ctx context.Context, sessionID string) (ContextInputs, error) {
	var ci ContextInputs
	if err := scanContext(s.Pool.QueryRow(ctx, contextQuery, sessionID), &ci); err != nil {
		return ci, err
	}
	e := s.conv.entry(sessionID)
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.refresh(ctx, s.Pool, sessionID); err != nil {
		s.conv.forget(sessionID)
		return ci, err
	}
	s.conv.account(sessionID, e)
	ci.Messages, ci.Counter = e.liveAfter(ci.State.ThroughSeq), e.last
	return ci, nil
}

// liveAfter copies the messages in the conversation with seq > after.
func (e *convEntry) liveAfter(after int64) []compaction.Message {
	i, _ := e.find(after + 1)
	out := make([]compaction.Message, 0, len(e.msgs)-i)
	for _, m := range e.msgs[i:] {
		if m.dropped != 0 && m.dropped <= e.last {
			continue
		}
		content := append(json.RawMessage(nil), e.buf[m.cstart:m.end-1]...)
		out = append(out, compaction.Message{Seq: m.seq, Idem: m.idem, Role: m.role, Content: content})
	}
	return out
}

// ClearThrough moves the session's cleared boundary forward to seq (never
// back).
func (t *Tx) ClearThrough(ctx context.Context, sessionID string, seq int64) error {
	_, err := t.db.Exec(ctx, `INSERT INTO session_context (session_id, cleared_seq) VALUES ($1, $2)
		ON CONFLICT (session_id) DO UPDATE SET cleared_seq = greatest(session_context.cleared_seq, excluded.cleared_seq)`, sessionID, seq)
	if err != nil {
		return fmt.Errorf("store cleared boundary: %w", err)
	}
	return nil
}

// Calibrate stores the session's bytes-per-token estimate; it rides with
// the transaction's next round trip.
func (t *Tx) Calibrate(sessionID string, bytesPerToken float64) {
	t.db.queue(queuedWrite{what: "store token calibration", sql: calibrateSQL,
		checked: `WITH w AS (` + calibrateSQL + ` RETURNING 1) SELECT bae_check((SELECT count(*) FROM w) = 1, '` + checkRows + `', 'store token calibration: no row')`,
		args:    []any{sessionID, bytesPerToken}, rows: 1, messageFree: true})
}

const calibrateSQL = `INSERT INTO session_context (session_id, bytes_per_token) VALUES ($1, $2)
		ON CONFLICT (session_id) DO UPDATE SET bytes_per_token = excluded.bytes_per_token`

// Summary is one stored summary.
type Summary struct {
	ID         string
	ThroughSeq int64
	Text       string
}

// SummaryByID returns the summary a compaction stored (ErrNotFound if none).
func (s *Store) SummaryByID(ctx context.Context, sessionID, id string) (Summary, error) {
	sum := Summary{ID: id}
	err := s.Pool.QueryRow(ctx, `SELECT through_seq, summary FROM session_summaries WHERE session_id = $1 AND id = $2`, sessionID, id).Scan(&sum.ThroughSeq, &sum.Text)
	if errors.Is(err, pgx.ErrNoRows) {
		return sum, ErrNotFound
	}
	if err != nil {
		return sum, fmt.Errorf("get summary: %w", err)
	}
	return sum, nil
}

// StoreSummary stores a compaction's summary once: a second call with the
// same id (a retried summarizer) keeps the first and returns it. The
// session's view moves to the summary only forward; clearedSeq moves the
// cleared boundary with it.
func (t *Tx) StoreSummary(ctx context.Context, sessionID string, sum Summary, clearedSeq int64) (Summary, error) {
	var stored Summary
	err := t.db.QueryRow(ctx, `WITH ins AS (
			INSERT INTO session_summaries (session_id, id, through_seq, summary) VALUES ($1, $2, $3, $4)
			ON CONFLICT (session_id, id) DO NOTHING RETURNING id, through_seq, summary
		)
		SELECT id, through_seq, summary FROM ins
		UNION ALL SELECT id, through_seq, summary FROM session_summaries WHERE session_id = $1 AND id = $2
		LIMIT 1`, sessionID, sum.ID, sum.ThroughSeq, sum.Text).Scan(&stored.ID, &stored.ThroughSeq, &stored.Text)
	if errors.Is(err, pgx.ErrNoRows) {
		// A concurrent writer committed the row after this statement's
		// snapshot: the next statement sees it.
		err = t.db.QueryRow(ctx, `SELECT id, through_seq, summary FROM session_summaries WHERE session_id = $1 AND id = $2`,
			sessionID, sum.ID).Scan(&stored.ID, &stored.ThroughSeq, &stored.Text)
	}
	if err != nil {
		return stored, fmt.Errorf("store summary: %w", err)
	}
	_, err = t.db.Exec(ctx, `INSERT INTO session_context (session_id, through_seq, cleared_seq, summary, summary_id) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (session_id) DO UPDATE SET
			through_seq = greatest(session_context.through_seq, excluded.through_seq),
			cleared_seq = greatest(session_context.cleared_seq, excluded.cleared_seq),
			summary = CASE WHEN excluded.through_seq > session_context.through_seq THEN excluded.summary ELSE session_context.summary END,
			summary_id = CASE WHEN excluded.through_seq > session_context.through_seq THEN excluded.summary_id ELSE session_context.summary_id END`,
		sessionID, stored.ThroughSeq, max(clearedSeq, stored.ThroughSeq), stored.Text, stored.ID)
	if err != nil {
		return stored, fmt.Errorf("store context: %w", err)
	}
	return stored, nil
}

// CountSummaries is how many summaries a session has stored.
func (s *Store) CountSummaries(ctx context.Context, sessionID string) (int, error) {
	var n int
	err := s.Pool.QueryRow(ctx, `SELECT count(*) FROM session_summaries WHERE session_id = $1`, sessionID).Scan(&n)
	return n, err
}

// TurnsRange is the range of events from the first of turn first to the
// last of turn last.
func (t *Tx) TurnsRange(ctx context.Context, sessionID, first, last string) (events.SeqRange, error) {
	var r events.SeqRange
	err := t.db.QueryRow(ctx, `SELECT
		coalesce((SELECT min(seq) FROM session_events WHERE session_id = $1 AND turn_id = $2), 0),
		coalesce((SELECT max(seq) FROM session_events WHERE session_id = $1 AND turn_id = $3), 0)`, sessionID, first, last).Scan(&r.From, &r.Through)
	if err != nil {
		return r, fmt.Errorf("events of turns: %w", err)
	}
	return r, nil
}
