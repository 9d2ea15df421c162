package api

import (
	"context"
	"time"

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

// streamGuard checks, for a request that waited or a stream about to
// open, that the session key and its client key are unrevoked, the profile
// exists and the session is open. Open streams are re-checked by their
// session's shared checker (streamWatch).
type streamGuard struct {
	c    *clientAPI
	call *rpcCall
}

func (c *clientAPI) guard(call *rpcCall) *streamGuard {
	return &streamGuard{c: c, call: call}
}

// revoked is why a stream ends, as the JSON-RPC error that is its last line.
func (g *streamGuard) revoked(ctx context.Context) *RPCError {
	g.c.accessReads.Add(1)
	a, err := g.c.Store.StreamAccess(ctx, g.call.keyID, "")
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

// endStream writes e as a stream's last line: the response to the request,
// or, for a notification, an error notification without an id.
func (c *rpcCall) endStream(e *RPCError) {
	if c.notify() {
		_ = c.out.write(map[string]any{"jsonrpc": "2.0", "error": e})
		return
	}
	c.fail(e)
}
