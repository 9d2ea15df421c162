package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// TurnsChannel is the LISTEN/NOTIFY channel that announces a recorded turn
// result; the payload is the turn id.
const TurnsChannel = "bae_turns"

// RecordTurnResult stores a finished turn's result and announces it to
// every replica, in one round trip. The first result stays: a turn sent
// again after it ended (a late resubmission after a continue-as-new) is
// refused by its begin, and that refusal must not replace the answer.
func (s *Store) RecordTurnResult(ctx context.Context, turnID string, result any) error {
	b, err := json.Marshal(result)
	if err != nil {
		return fmt.Errorf("marshal turn result: %w", err)
	}
	batch := &pgx.Batch{}
	batch.Queue(`UPDATE turn_inputs SET result = $2 WHERE turn_id = $1 AND result IS NULL`, turnID, string(b))
	batch.Queue(`SELECT pg_notify($1, $2)`, TurnsChannel, turnID)
	if err := s.Pool.SendBatch(ctx, batch).Close(); err != nil {
		return fmt.Errorf("record turn result: %w", err)
	}
	if fn := s.onTurnResult; fn != nil {
		fn(turnID)
	}
	return nil
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

// OnTurnResult sets the function called with a turn id after this process
// recorded its result (set once, before serving): local waiters need not
// wait for the notice's round trip.
func (s *Store) OnTurnResult(fn func(turnID string)) { s.onTurnResult = fn }

// TurnInputByID reads a stored message, its begin outcome and its result.
func (s *Store) TurnInputByID(ctx context.Context, turnID string) (TurnInput, error) {
	ti := TurnInput{TurnID: turnID}
	var msg, begin, result []byte
	err := s.Pool.QueryRow(ctx, `SELECT session_id, client_key_id, message, begin_result, result FROM turn_inputs WHERE turn_id = $1`, turnID).
		Scan(&ti.SessionID, &ti.ClientKeyID, &msg, &begin, &result)
	if errors.Is(err, pgx.ErrNoRows) {
		return TurnInput{}, ErrNotFound
	}
	if err != nil {
		return TurnInput{}, fmt.Errorf("read turn input: %w", err)
	}
	ti.Message, ti.BeginResult, ti.Result = msg, begin, result
	return ti, nil
}
