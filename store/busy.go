package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// TurnGate is a session's busy state as PostgreSQL holds it, read without
// asking the session's workflow (which answers no query while a workflow
// task runs a provider call).
type TurnGate struct {
	// Open is the session's state being open.
	Open bool
	// Unfinished says a message of the session is stored and has no
	// recorded result: its turn is queued (or its submission is on its
	// way) or running. It counts until the workflow records its result.
	Unfinished bool
	// PausedOwner is the client key whose paused turn waits for its tool
	// results ("" when no turn is paused). Whether that pause has expired
	// is the workflow's to say.
	PausedOwner string
}

// turnResultsMigration is the migration from which every turn records its
// result: messages stored before it have none, and are not counted.
const turnResultsMigration = 13

// TurnGate reads the session's busy state in one round trip, on any
// replica: every replica stores messages and turn results in the same
// rows.
func (s *Store) TurnGate(ctx context.Context, sessionID string) (TurnGate, error) {
	return scanTurnGate(s.Pool.QueryRow(ctx, turnGateSQL, sessionID, turnResultsMigration))
}

const turnGateSQL = `SELECT s.state = 'open', s.pending_turn->>'owner',
		EXISTS (SELECT 1 FROM turn_inputs t WHERE t.session_id = s.id AND t.result IS NULL
			AND t.created_at >= COALESCE((SELECT applied_at FROM schema_migrations WHERE version = $2), '-infinity'))
	FROM sessions s WHERE s.id = $1`

func scanTurnGate(row pgx.Row) (TurnGate, error) {
	var g TurnGate
	var owner *string
	err := row.Scan(&g.Open, &owner, &g.Unfinished)
	if errors.Is(err, pgx.ErrNoRows) {
		return TurnGate{}, ErrNotFound
	}
	if err != nil {
		return TurnGate{}, fmt.Errorf("read turn gate: %w", err)
	}
	if owner != nil {
		g.PausedOwner = *owner
	}
	return g, nil
}
