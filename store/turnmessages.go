package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// KeyedMessage is a conversation message with its idempotency key, which
// names the turn and step that appended it.
type KeyedMessage struct {
	Message
	IdemKey string
}

// TurnMessages returns the messages turnID appended to the conversation
// and that are still in it, in order (an interrupted turn is closed from
// where it stopped).
func (r reads) TurnMessages(ctx context.Context, sessionID, turnID string) ([]KeyedMessage, error) {
	rows, err := r.q.Query(ctx, `SELECT seq, idem_key, role, content FROM session_messages
		WHERE session_id = $1 AND starts_with(idem_key, $2) AND dropped_seq IS NULL ORDER BY seq`, sessionID, turnID+"/")
	if err != nil {
		return nil, fmt.Errorf("read turn messages: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (KeyedMessage, error) {
		var m KeyedMessage
		var c []byte
		err := row.Scan(&m.Seq, &m.IdemKey, &m.Role, &c)
		m.Content = c
		return m, err
	})
	if err != nil {
		return nil, fmt.Errorf("read turn messages: %w", err)
	}
	return list, nil
}

// MessageAfter reports whether a message still in the conversation
// follows the one at seq: a later turn's, when seq is a turn's last.
func (r reads) MessageAfter(ctx context.Context, sessionID string, seq int64) (bool, error) {
	var after bool
	if err := r.q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM session_messages
		WHERE session_id = $1 AND seq > $2 AND dropped_seq IS NULL)`, sessionID, seq).Scan(&after); err != nil {
		return false, fmt.Errorf("read messages after %d: %w", seq, err)
	}
	return after, nil
}

// EventWithKey returns a stored event by its idempotency key
// (ErrNotFound when none), inside a caller's transaction too.
func (r reads) EventWithKey(ctx context.Context, sessionID, idemKey string) (Event, error) {
	e, err := scanEvent(r.q.QueryRow(ctx, `SELECT `+eventCols+` FROM session_events WHERE session_id = $1 AND idem_key = $2`, sessionID, idemKey))
	if errors.Is(err, pgx.ErrNoRows) {
		return Event{}, ErrNotFound
	}
	if err != nil {
		return Event{}, fmt.Errorf("get event: %w", err)
	}
	return e, nil
}
