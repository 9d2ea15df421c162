package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// PutTurnInput stores a driver's message under its turn id. idemKey is the
// client's Idempotency-Key ("" for none), unique per session: when a message
// is already stored under it, nothing is stored and that turn input is
// returned instead (nil when this call stored the message).
func (s *Store) PutTurnInput(ctx context.Context, sessionID, turnID, clientKeyID string, message json.RawMessage, idemKey string) (*TurnInput, error) {
	tag, err := s.Pool.Exec(ctx, `INSERT INTO turn_inputs (turn_id, session_id, client_key_id, message, idem_key) VALUES ($1, $2, $3, $4, NULLIF($5, ''))
		ON CONFLICT DO NOTHING`, turnID, sessionID, clientKeyID, string(message), idemKey)
	if err != nil {
		return nil, fmt.Errorf("store turn input: %w", err)
	}
	if tag.RowsAffected() == 1 || idemKey == "" {
		return nil, nil
	}
	// Another request stored a message under this key first.
	ti, err := s.TurnInputByKey(ctx, sessionID, idemKey)
	if errors.Is(err, ErrNotFound) {
		return nil, nil // the conflict was this very turn id, stored before
	}
	if err != nil {
		return nil, err
	}
	return &ti, nil
}

// TurnInputByKey finds the message a session stored under an idempotency
// key.
func (s *Store) TurnInputByKey(ctx context.Context, sessionID, idemKey string) (TurnInput, error) {
	ti := TurnInput{SessionID: sessionID}
	var msg, begin []byte
	err := s.Pool.QueryRow(ctx, `SELECT turn_id, client_key_id, message, begin_result FROM turn_inputs WHERE session_id = $1 AND idem_key = $2`, sessionID, idemKey).
		Scan(&ti.TurnID, &ti.ClientKeyID, &msg, &begin)
	if errors.Is(err, pgx.ErrNoRows) {
		return TurnInput{}, ErrNotFound
	}
	if err != nil {
		return TurnInput{}, fmt.Errorf("read turn input by key: %w", err)
	}
	ti.Message, ti.BeginResult = msg, begin
	return ti, nil
}

// TurnInput is a stored driver message and, once the turn began, the
// recorded outcome of BeginTurn.
type TurnInput struct {
	TurnID      string
	SessionID   string
	ClientKeyID string
	Message     json.RawMessage
	BeginResult json.RawMessage
}

// TurnInputTx reads and locks a turn input.
func TurnInputTx(ctx context.Context, tx pgx.Tx, turnID string) (TurnInput, error) {
	var ti TurnInput
	var msg, begin []byte
	err := tx.QueryRow(ctx, `SELECT session_id, client_key_id, message, begin_result FROM turn_inputs WHERE turn_id = $1 FOR UPDATE`, turnID).
		Scan(&ti.SessionID, &ti.ClientKeyID, &msg, &begin)
	ti.TurnID = turnID
	if errors.Is(err, pgx.ErrNoRows) {
		return TurnInput{}, ErrNotFound
	}
	if err != nil {
		return TurnInput{}, fmt.Errorf("read turn input: %w", err)
	}
	ti.Message, ti.BeginResult = msg, begin
	return ti, nil
}

// SetBeginResultTx records BeginTurn's outcome for idempotent re-runs.
func SetBeginResultTx(ctx context.Context, tx pgx.Tx, turnID string, result any) error {
	b, err := json.Marshal(result)
	if err != nil {
		return fmt.Errorf("marshal begin result: %w", err)
	}
	if _, err := tx.Exec(ctx, `UPDATE turn_inputs SET begin_result = $2 WHERE turn_id = $1`, turnID, string(b)); err != nil {
		return fmt.Errorf("store begin result: %w", err)
	}
	return nil
}

// EventByIdem returns a stored event by its idempotency key.
func (s *Store) EventByIdem(ctx context.Context, sessionID, idemKey string) (Event, error) {
	e, err := scanEvent(s.Pool.QueryRow(ctx, `SELECT `+eventCols+` FROM session_events WHERE session_id = $1 AND idem_key = $2`, sessionID, idemKey))
	if errors.Is(err, pgx.ErrNoRows) {
		return Event{}, ErrNotFound
	}
	if err != nil {
		return Event{}, fmt.Errorf("get event: %w", err)
	}
	return e, nil
}

// OrphanTurn is a stored driver message whose turn never began.
type OrphanTurn struct {
	TurnID      string
	SessionID   string
	ProfileID   string
	ClientKeyID string
}

// OrphanTurns lists messages of open sessions stored more than olderThan ago
// whose BeginTurn never ran, oldest first: their submission to the workflow
// was lost (the server died between storing and the update's acceptance).
func (s *Store) OrphanTurns(ctx context.Context, olderThan time.Duration, limit int) ([]OrphanTurn, error) {
	rows, err := s.Pool.Query(ctx, `SELECT t.turn_id, t.session_id, s.profile_id, t.client_key_id FROM turn_inputs t
		JOIN sessions s ON s.id = t.session_id
		WHERE t.begin_result IS NULL AND s.state = 'open' AND t.created_at < now() - make_interval(secs => $1)
		ORDER BY t.created_at LIMIT $2`, olderThan.Seconds(), limit)
	if err != nil {
		return nil, fmt.Errorf("list orphan turns: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (OrphanTurn, error) {
		var o OrphanTurn
		err := r.Scan(&o.TurnID, &o.SessionID, &o.ProfileID, &o.ClientKeyID)
		return o, err
	})
}
