package activities

import (
	"context"

	"github.com/bae-go/bae-go/workflows"
)

// RecordTurnResult stores a signalled turn's result, which the server
// relaying the turn to its driver is waiting for.
func (a *Activities) RecordTurnResult(ctx context.Context, in workflows.RecordTurnResultInput) error {
	return a.Store.RecordTurnResult(ctx, in.TurnID, in.Result)
}
