package api

import (
	"context"
	"time"

	"github.com/bae-go/bae-go/internal/lib/live"
	"github.com/bae-go/bae-go/store"
)

// DefaultRecheckInterval is how often a long-lived stream re-reads its
// authorization from PostgreSQL when no notification prompted it.
// Revocations and session ends are also announced over LISTEN/NOTIFY, which
// prompts an immediate re-check on every replica; the interval covers a
// missed notification.
const DefaultRecheckInterval = time.Second

func (d *Deps) recheckInterval() time.Duration {
	if d.RecheckInterval > 0 {
		return d.RecheckInterval
	}
	return DefaultRecheckInterval
}

// streamGuard re-checks, for a stream that outlives the request that
// authorized it, that the session key and its client key are unrevoked,
// the profile exists and the session is open.
type streamGuard struct {
	c      *clientAPI
	call   *rpcCall
	turnID string // set for a sendMessage relay
}

func (c *clientAPI) guard(call *rpcCall, turnID string) *streamGuard {
	return &streamGuard{c: c, call: call, turnID: turnID}
}

// revoked is why a stream ends, as the JSON-RPC error that is its last line.
func (g *streamGuard) revoked(ctx context.Context) *RPCError {
	a, err := g.c.Store.StreamAccess(ctx, g.call.keyID, g.turnID)
	if err != nil {
		// A database blip is not a revocation; the next check decides.
		if ctx.Err() == nil {
			g.call.log.Warn("stream authorization re-check failed", "err", err)
		}
		return nil
	}
	switch {
	case !a.KeyLive:
		return NewRPCError(-32000, "unauthorized: the session key was revoked")
	case !a.ProfileLive:
		return NewRPCError(-32000, "profile_unavailable: the profile bound to this session is no longer available")
	case a.State != store.StateOpen && !a.EndedByTurn:
		// A turn that itself ended the session is still relayed to its
		// own terminal result.
		return NewRPCError(-32000, "session is %s, not open", a.State)
	}
	return nil
}

// ended re-checks and, when the stream must end, writes the error as its
// last line and reports true.
func (g *streamGuard) ended(ctx context.Context) bool {
	e := g.revoked(ctx)
	if e == nil {
		return false
	}
	g.call.endStream(e)
	return true
}

// wake is what a stream's wait ended on.
type wake int

const (
	// wakeNews: new events may exist, and the stream is still authorized.
	wakeNews wake = iota
	// wakeStop: the caller's stop channel fired.
	wakeStop
	// wakeOver: the request ended, or a re-check ended the stream.
	wakeOver
	// wakeDelta: live deltas are pending (only for a stream that asked).
	wakeDelta
)

// wait blocks until the session has news for the stream: a wake-up, or a
// re-check (announced, or the poll's) that finds the stream still
// authorized. stop (nil for none) ends the wait with wakeStop; deltas (nil
// for none) with wakeDelta.
func (g *streamGuard) wait(ctx context.Context, w *live.Waiter, poll <-chan time.Time, stop, deltas <-chan struct{}) wake {
	select {
	case <-ctx.Done():
		return wakeOver
	case <-stop:
		return wakeStop
	case <-w.Wake():
		return wakeNews
	case <-deltas:
		return wakeDelta
	case <-poll:
	case <-w.Recheck():
	}
	if g.ended(ctx) {
		return wakeOver
	}
	return wakeNews
}

// endStream writes e as a stream's last line: the response to the request,
// or, for a notification, an error notification without an id.
func (c *rpcCall) endStream(e *RPCError) {
	if c.notify() {
		_ = c.out.write(map[string]any{"jsonrpc": "2.0", "error": e})
		return
	}
	c.fail(e)
}
