package activities

import (
	"context"
	"fmt"
	"time"

	"github.com/bae-go/bae-go/store"
)

// DefaultDBRetryBudget is how long an activity waits out a database outage
// when Activities.DBRetryBudget is unset.
const DefaultDBRetryBudget = 5 * time.Minute

// untilStored runs fn, repeating it while the database is unavailable, for
// up to the retry budget. It is what lets a turn ride out a database outage
// inside one activity attempt: the attempt's provider answer or tool output
// is kept in memory and stored once the database is back, instead of the
// attempt failing and Temporal re-running the side effect. fn must be
// idempotent (every store write here is keyed).
func (a *Activities) untilStored(ctx context.Context, what string, fn func(context.Context) error) error {
	budget := a.DBRetryBudget
	if budget <= 0 {
		budget = DefaultDBRetryBudget
	}
	// Heartbeats go on for the whole wait, not just between retries: the
	// retry backoff and a hanging connection attempt can each outlast a
	// short heartbeat timeout, and a worker Temporal thinks lost gets its
	// attempt (and the side effect already done) run again.
	stop := heartbeatEvery(ctx, time.Second)
	defer stop()
	warned := false
	err := store.WaitOut(ctx, time.Now().Add(budget), 2*time.Second, func(err error) {
		if !warned {
			a.logger(ctx, "").Warn("database unavailable; waiting", "step", what, "budget", budget, "err", err)
			warned = true
		}
	}, fn)
	switch {
	case err == nil:
		if warned {
			a.logger(ctx, "").Info("database is back", "step", what)
		}
		return nil
	case !store.Unavailable(err):
		return err
	case ctx.Err() != nil:
		return fmt.Errorf("%s: %w", what, ctx.Err())
	default:
		return fmt.Errorf("%s: database unavailable for %s: %w", what, budget, err)
	}
}
