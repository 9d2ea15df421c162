package store

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// SQLSTATEs bae_check raises (migration 0027), for the checks a batch that
// commits makes on the server instead of in Go.
const (
	// checkNotOpen: an append found its session not open; the message is
	// the session's state.
	checkNotOpen = "BA001"
	// checkNoSession: an append's session does not exist.
	checkNoSession = "BA002"
	// checkRows: a write affected another number of rows than it must.
	checkRows = "BA003"
	// checkSuperseded: a provider attempt's fence found the conversation
	// moved on from its turn (Tx.Fence).
	checkSuperseded = "BA004"
	// checkQueueFull: a message found its session's or its client key's
	// queue at its cap (PutTurnInput); the message is the scope.
	checkQueueFull = "BA005"
)

// checkError is the store's error for a failed bae_check, err otherwise.
func checkError(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	switch pgErr.Code {
	case checkNotOpen:
		return &NotOpenError{State: pgErr.Message}
	case checkSuperseded:
		return fmt.Errorf("%s: %w", pgErr.Message, ErrTurnSuperseded)
	case checkNoSession, checkRows:
		return fmt.Errorf("%s: %w", pgErr.Message, ErrNotFound)
	}
	return err
}
