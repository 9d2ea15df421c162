package activities

import (
	"context"
	"errors"

	"github.com/bae-go/bae-go/store"
	"github.com/bae-go/bae-go/workflows"
)

// RewindSession stores a rewind (store.Rewind) while the workflow holds the
// session's turn gate. A refusal is a result, not an error: retrying it
// would refuse again. A retry after the rewind was stored returns what was
// stored.
func (a *Activities) RewindSession(ctx context.Context, in workflows.RewindSessionInput) (workflows.RewindResult, error) {
	req := store.RewindRequest{RewindID: in.In.RewindID, TurnID: in.In.TurnID, BeforeSeq: in.In.BeforeSeq,
		ClientKeyID: in.In.ClientKeyID, By: in.In.By, Interrupted: in.Interrupted}
	var res workflows.RewindResult
	err := a.untilStored(ctx, "rewind", func(ctx context.Context) error {
		p, id, err := a.Store.Rewind(ctx, in.SessionID, req)
		if refusal, ok := RewindRefusal(err); ok {
			res = workflows.RewindResult{Refusal: refusal}
			return nil
		}
		if err != nil {
			return err
		}
		res = workflows.RewindResult{Rewind: p, EventID: id}
		return nil
	})
	if err == nil && res.Refusal == "" {
		a.logger(ctx, "").Info("session rewound", "session_id", in.SessionID, "rewind_id", in.In.RewindID,
			"turns", len(res.Rewind.TurnIDs), "tool_calls", len(res.Rewind.ToolCalls), "interrupted_turn_id", in.Interrupted)
	}
	return res, err
}

// RewindRefusal is the refusal a store.Rewind error stands for (ok false
// for an error that is not one).
func RewindRefusal(err error) (workflows.RewindRefusal, bool) {
	var notOpen *store.NotOpenError
	switch {
	case err == nil:
		return "", false
	case errors.As(err, &notOpen):
		return workflows.RewindSessionNotOpen, true
	case errors.Is(err, store.ErrRewindPoint):
		return workflows.RewindNoSuchPoint, true
	case errors.Is(err, store.ErrRewindBeforeFork):
		return workflows.RewindBeforeFork, true
	case errors.Is(err, store.ErrNothingToRewind):
		return workflows.RewindNothingToDo, true
	}
	return "", false
}
