package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// KeptPartial is the text a stopped provider call of a turn had streamed:
// the answer an interrupt keeps, whichever worker closes the turn.
type KeptPartial struct {
	// Content is the text as content blocks (nil: the call had streamed
	// none).
	Content json.RawMessage
	// Run is the stream run the call was (0 when its deltas were not
	// numbered), Iteration its iteration.
	Run, Iteration int
}

// KeepPartial records the text a stopped provider call of turnID had
// streamed, replacing what an earlier call kept.
func (s *Store) KeepPartial(ctx context.Context, turnID string, k KeptPartial) error {
	var content any
	if len(k.Content) > 0 {
		content = string(k.Content)
	}
	if _, err := s.Pool.Exec(ctx, `UPDATE turn_inputs SET kept = $2, kept_run = $3, kept_iteration = $4 WHERE turn_id = $1`,
		turnID, content, k.Run, k.Iteration); err != nil {
		return fmt.Errorf("keep partial answer of %s: %w", turnID, err)
	}
	return nil
}

// KeptPartial reads the text turnID's latest stopped provider call kept
// when it is of iteration and of the turn's latest stream run (a later
// run makes it stale); nil when there is none.
func (t *Tx) KeptPartial(ctx context.Context, turnID string, iteration int) (json.RawMessage, error) {
	var content []byte
	err := t.db.QueryRow(ctx, `SELECT kept FROM turn_inputs
		WHERE turn_id = $1 AND kept_iteration = $2 AND kept_run = stream_runs`, turnID, iteration).Scan(&content)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read kept partial answer of %s: %w", turnID, err)
	}
	return content, nil
}
