package api

import (
	"context"
	"time"

	"github.com/bae-go/bae-go/internal/lib/live"
	"github.com/bae-go/bae-go/store"
)

// DefaultRecheckInterval is how often long-lived streams re-read their
// authorization from PostgreSQL when no notification prompted it (once per
// session for subscribe streams, see streamWatch). Revocations and session
// ends are announced over LISTEN/NOTIFY, which prompts an immediate
// re-check on every replica, and a reconnected listener re-checks
// everything; the interval is the slow fallback for a lost notification.
const DefaultRecheckInterval = 5 * time.Second

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
	g.c.accessReads.Add(1)
	a, err := g.c.Store.StreamAccess(ctx, g.call.keyID, g.turnID)
	if err != nil {
		// A database blip is not a revocation; the next check decides.
		if ctx.Err() == nil {
			g.call.log.Warn("stream authorization re-check failed", "err", err)
		}
		return nil
	}
	return accessVerdict(a.KeyLive, a.ProfileLive, a.State, a.EndedByTurn)
}

// accessVerdict is why a stream with these access facts must end, nil when
// it may go on. endedByTurn: the session ended with the relayed turn's own
// error, which the relay still delivers.
func accessVerdict(keyLive, profileLive bool, state string, endedByTurn bool) *RPCError {
	switch {
	case !keyLive:
		return NewRPCError(-32000, "unauthorized: the session key was revoked")
	case !profileLive:
		return NewRPCError(-32000, "profile_unavailable: the profile bound to this session is no longer available")
	case state != store.StateOpen && !endedByTurn:
		// A turn that itself ended the session is still relayed to its
		// own terminal result.
		return NewRPCError(-32000, "session is %s, not open", state)
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
