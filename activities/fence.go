package activities

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/sdk/temporal"

	"github.com/bae-go/bae-go/store"
	"github.com/bae-go/bae-go/workflows"
)

// tailFence fences a turn step that appends no message before it while
// the conversation ends with the message tailKey: it stores only while
// that message is still the conversation's end (store.AttemptFence, At 0).
func tailFence(sessionID, tailKey string) store.AttemptFence {
	return store.AttemptFence{SessionID: sessionID, TailKey: tailKey}
}

// toolFence fences a server-side tool call of iteration in.Iteration: the
// conversation ends with that iteration's assistant message until the
// iteration's results are appended, so a run of the call after an
// interrupt, a rewind or a later turn stores nothing.
func toolFence(in workflows.ToolCallInput) store.AttemptFence {
	return tailFence(in.SessionID, idem(in.TurnID, fmt.Sprintf("i%d/asst", in.Iteration)))
}

// checkFence reports store.ErrTurnSuperseded when f no longer holds, for a
// step about to start a side effect (a summarizer call): a stale run
// calls nothing.
func (a *Activities) checkFence(ctx context.Context, f store.AttemptFence) error {
	return a.untilStored(ctx, "check turn fence", func(ctx context.Context) error {
		return a.Store.Tx(ctx, func(tx *store.Tx) error {
			tx.Fence(f)
			return nil
		})
	})
}

// turnSuperseded turns a fence that did not hold into the step's final,
// non-retryable failure (workflows.ErrTurnSuperseded), which the workflow
// handles as it does a provider attempt's: nothing was stored, and no
// retry could store anything either. Any other error is returned as it is.
func (a *Activities) turnSuperseded(ctx context.Context, turnID, step string, err error, attrs ...any) error {
	if !errors.Is(err, store.ErrTurnSuperseded) {
		return err
	}
	a.logger(ctx, turnID).Warn(step+" stored nothing: the turn was superseded", attrs...)
	return temporal.NewNonRetryableApplicationError(err.Error(), workflows.ErrTurnSuperseded, nil)
}

// isSuperseded reports a step's superseded failure (turnSuperseded).
func isSuperseded(err error) bool {
	var ae *temporal.ApplicationError
	return errors.As(err, &ae) && ae.Type() == workflows.ErrTurnSuperseded
}

// toolFenced answers a tool call whose store failed with err. When its
// fence did not hold because another run of the call stored its result
// first (a retry, or the interrupt that closed the call), that result
// stands (done); otherwise the turn was superseded (the call's final
// failure). Any other error is returned as it is.
func (a *Activities) toolFenced(ctx context.Context, in workflows.ToolCallInput, err error) (bool, error) {
	if !errors.Is(err, store.ErrTurnSuperseded) {
		return false, err
	}
	if done, rerr := a.recorded(ctx, in); rerr != nil || done {
		return done, rerr
	}
	return false, a.turnSuperseded(ctx, in.TurnID, "tool call", err, "tool_use_id", in.Call.ID, "tool", in.Call.Name, "iteration", in.Iteration)
}
