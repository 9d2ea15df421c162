package api

import (
	"context"
	"time"

	"github.com/bae-go/bae-go/store"
)

// waitForStore runs fn, repeating it while the database is unavailable,
// until it succeeds, fails otherwise, or ctx ends. Streams use it to ride out
// a database outage instead of ending: their turn goes on in the workflow
// meanwhile, and nothing is lost because reads resume from a sequence.
func waitForStore(ctx context.Context, fn func(context.Context) error) error {
	return store.WaitOut(ctx, time.Time{}, time.Second, nil, fn)
}
