package api

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/bae-go/bae-go/internal/lib/ids"
	"github.com/bae-go/bae-go/store"
)

// DefaultStreamCountEvery is how often a replica shares its live-stream
// counts and reads the other replicas'.
const DefaultStreamCountEvery = time.Second

// StreamCounts holds the stream caps across replicas: in the background,
// once per period, it writes this replica's live-stream counts to
// PostgreSQL and reads the others' (one statement), and a stream's
// admission adds the others' counts it read last to this replica's own,
// in memory. Opening a stream costs no round trip; the price is that the
// others' counts are up to a period or two old, so streams opened on
// several replicas within that time may pass a cap together (see
// docs/operations.md). A nil StreamCounts counts this replica only.
type StreamCounts struct {
	st      *store.Store
	log     *slog.Logger
	replica string
	every   time.Duration

	mu     sync.Mutex
	local  func() map[store.StreamSubject]int
	others map[store.StreamSubject]int
}

// NewStreamCounts shares counts through st every period (0:
// DefaultStreamCountEvery) once Run runs.
func NewStreamCounts(st *store.Store, log *slog.Logger, every time.Duration) *StreamCounts {
	if every <= 0 {
		every = DefaultStreamCountEvery
	}
	return &StreamCounts{st: st, log: log, replica: ids.New("rep_"), every: every}
}

// Run shares the counts until ctx ends, then withdraws this replica's.
func (c *StreamCounts) Run(ctx context.Context) {
	if c == nil {
		return
	}
	t := time.NewTicker(c.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			if err := c.st.DropStreamCounts(dctx, c.replica); err != nil {
				c.log.Debug("withdraw stream counts", "err", err)
			}
			return
		case <-t.C:
			c.share(ctx)
		}
	}
}

func (c *StreamCounts) share(ctx context.Context) {
	c.mu.Lock()
	local := c.local
	c.mu.Unlock()
	var counts map[store.StreamSubject]int
	if local != nil {
		counts = local()
	}
	// A replica that missed a few periods (a slow database) is still
	// counted: it stops counting after five.
	others, err := c.st.ShareStreamCounts(ctx, c.replica, counts, 5*c.every)
	if err != nil {
		if ctx.Err() == nil {
			c.log.Debug("share stream counts", "err", err)
		}
		return
	}
	c.mu.Lock()
	c.others = others
	c.mu.Unlock()
}

// Replica is the id this replica's counts are written under.
func (c *StreamCounts) Replica() string {
	if c == nil {
		return ""
	}
	return c.replica
}

// attach names where this replica's counts come from.
func (c *StreamCounts) attach(local func() map[store.StreamSubject]int) {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.local = local
	c.mu.Unlock()
}

// elsewhere is the other replicas' live streams of a subject, as last read.
func (c *StreamCounts) elsewhere(scope, subject string) int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.others[store.StreamSubject{Scope: scope, Subject: subject}]
}
