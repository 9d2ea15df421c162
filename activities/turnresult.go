package activities

import (
	"context"

	"github.com/bae-go/bae-go/internal/telemetry"

	"github.com/bae-go/bae-go/workflows"
)

// RecordTurnResult stores a signalled turn's result, which the server
// relaying the turn to its driver is waiting for, then reports the turn
// (its log line and bae.turn span). It runs once per turn outside replay.
// It returns the result so that the turn's outcome shows in the workflow's
// history (the local activity's marker), where an operator looks.
func (a *Activities) RecordTurnResult(ctx context.Context, in workflows.RecordTurnResultInput) (workflows.TurnResult, error) {
	if err := a.Store.RecordTurnResult(ctx, in.TurnID, in.Result); err != nil {
		return workflows.TurnResult{}, err
	}
	if in.In.TurnID != "" {
		telemetry.TurnEnded(a.Spans, a.Log, in.SessionID, in.In, in.Started, in.Result, nil)
	}
	return in.Result, nil
}
