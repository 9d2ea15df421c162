package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// TurnsChannel is the LISTEN/NOTIFY channel that announces a recorded turn
// result. The payload is the turn id, a space and the result's JSON, or the
// turn id alone when the result is too long for a notification (waiters
// then read it from the table).
const TurnsChannel = "bae_turns"

// maxNoticeResult keeps a notification under PostgreSQL's 8000-byte limit.
const maxNoticeResult = 7000

// RecordTurnResult stores a finished turn's result and announces it to
// every replica, in one round trip. The first result stays: a turn sent
// again after it ended (a late resubmission after a continue-as-new) is
// refused by its begin, and that refusal must not replace the answer.
func (s *Store) RecordTurnResult(ctx context.Context, turnID string, result any) error {
	b, notice, err := turnResultNotice(turnID, result)
	if err != nil {
		return err
	}
	var stored bool
	err = s.Pool.QueryRow(ctx, recordTurnResultSQL, turnID, string(b), TurnsChannel, notice).Scan(&stored)
	if err != nil {
		return fmt.Errorf("record turn result: %w", err)
	}
	if fn := s.onTurnResult; fn != nil {
		if stored && len(b) <= maxNoticeResult {
			fn(turnID, b)
		} else {
			fn(turnID, nil)
		}
	}
	return nil
}

// recordTurnResultSQL stores a result unless one is stored, and notifies
// TurnsChannel (with the result only when this statement stored it: a late
// refusal of a turn that ran in an earlier run must not be announced as
// its answer). Its row says whether it stored the result.
const recordTurnResultSQL = `WITH upd AS (
		UPDATE turn_inputs SET result = $2 WHERE turn_id = $1 AND result IS NULL RETURNING 1
	), n AS (
		SELECT pg_notify($3, CASE WHEN EXISTS (SELECT 1 FROM upd) THEN $4 ELSE $1 END)
	)
	SELECT EXISTS (SELECT 1 FROM upd) FROM n`

// turnResultNotice encodes a result and the notice that announces it.
func turnResultNotice(turnID string, result any) (b []byte, notice string, err error) {
	b, err = json.Marshal(result)
	if err != nil {
		return nil, "", fmt.Errorf("marshal turn result: %w", err)
	}
	notice = turnID
	if len(b) <= maxNoticeResult {
		notice += " " + string(b)
	}
	return b, notice, nil
}

// RecordTurnResult is Store.RecordTurnResult inside the transaction that
// stores the turn's final answer: held back to go with the commit (no
// round trip of its own), its notice sent by the commit, and this
// process's waiters told once the transaction committed.
func (t *Tx) RecordTurnResult(turnID string, result any) error {
	b, notice, err := turnResultNotice(turnID, result)
	if err != nil {
		return err
	}
	t.db.queue(queuedWrite{what: "record turn result", sql: recordTurnResultSQL, rows: -1, args: []any{turnID, string(b), TurnsChannel, notice}})
	if len(b) > maxNoticeResult {
		b = nil
	}
	t.results = append(t.results, recordedResult{turnID: turnID, result: b})
	return nil
}

// recordedResult is a result a transaction stored, for this process's
// waiters once it committed.
type recordedResult struct {
	turnID string
	result []byte // nil: too long for the notice, read from the table
}

// announceResults tells this process's waiters of the results a committed
// transaction stored.
func (s *Store) announceResults(rs []recordedResult) {
	if fn := s.onTurnResult; fn != nil {
		for _, r := range rs {
			fn(r.turnID, r.result)
		}
	}
}

// TurnNotice reads a TurnsChannel payload: the turn id and, when the
// notice carries it, the result.
func TurnNotice(payload string) (turnID string, result []byte) {
	id, res, ok := strings.Cut(payload, " ")
	if !ok {
		return id, nil
	}
	return id, []byte(res)
}

// TurnState is what the store knows of a turn: whether it began, and its
// result once the workflow recorded one.
type TurnState struct {
	Began  bool
	Result json.RawMessage // nil until recorded
}

// TurnState reads a turn's state; ErrNotFound when no message is stored
// under turnID.
func (s *Store) TurnState(ctx context.Context, turnID string) (TurnState, error) {
	var begin, result []byte
	err := s.Pool.QueryRow(ctx, `SELECT begin_result, result FROM turn_inputs WHERE turn_id = $1`, turnID).Scan(&begin, &result)
	if errors.Is(err, pgx.ErrNoRows) {
		return TurnState{}, ErrNotFound
	}
	if err != nil {
		return TurnState{}, fmt.Errorf("read turn state: %w", err)
	}
	return TurnState{Began: begin != nil, Result: result}, nil
}

// OnTurnResult sets the function called after this process recorded a
// turn's result (set once, before serving), with the result when it is
// the one stored: local waiters need not wait for the notice's round trip.
func (s *Store) OnTurnResult(fn func(turnID string, result []byte)) { s.onTurnResult = fn }

// TurnInputByID reads a stored message, its begin outcome and its result.
func (s *Store) TurnInputByID(ctx context.Context, turnID string) (TurnInput, error) {
	ti := TurnInput{TurnID: turnID}
	var msg, begin, result []byte
	err := s.Pool.QueryRow(ctx, `SELECT session_id, client_key_id, message, begin_result, result, created_at FROM turn_inputs WHERE turn_id = $1`, turnID).
		Scan(&ti.SessionID, &ti.ClientKeyID, &msg, &begin, &result, &ti.Arrived)
	if errors.Is(err, pgx.ErrNoRows) {
		return TurnInput{}, ErrNotFound
	}
	if err != nil {
		return TurnInput{}, fmt.Errorf("read turn input: %w", err)
	}
	ti.Message, ti.BeginResult, ti.Result = msg, begin, result
	return ti, nil
}
