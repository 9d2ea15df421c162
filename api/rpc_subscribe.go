package api

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/bae-go/bae-go/api/wire"
	"github.com/bae-go/bae-go/internal/lib/live"
	"github.com/bae-go/bae-go/store"
)

// lagLimit is how far (in events) a live subscriber may fall behind the log
// before it is told to reconnect with since_event_id.
const lagLimit = 256

func (c *clientAPI) subscribe(call *rpcCall) {
	ctx := call.r.Context()
	var params struct {
		Since *string `json:"since_event_id"`
	}
	if err := json.Unmarshal(call.params, &params); err != nil {
		call.fail(NewRPCError(-32602, "Invalid params: since_event_id must be a string"))
		return
	}
	ticket, quota := c.streams.join(call, "")
	if quota != nil {
		call.fail(quotaRPCError(quota))
		return
	}
	defer ticket.leave()
	deltas, opt, ok := c.openDeltas(call, "")
	if !ok {
		return
	}
	defer deltas.close()
	waiter := c.Hub.Watch(call.sess.ID)
	defer waiter.Close()

	var cursor int64
	if params.Since != nil {
		seq, err := c.Store.SeqOfEvent(ctx, call.sess.ID, *params.Since)
		switch {
		case err == nil:
			cursor = seq
		case errors.Is(err, store.ErrNotFound):
			cursor = 0 // unknown id: replay everything
		default:
			_ = call.out.write(map[string]any{"jsonrpc": "2.0", "error": RPCError{Code: -32000, Message: "replay failed"}})
			return
		}
		// Replay the backlog without the lag rule. Events are written as
		// encoded pieces (a provider.request's conversation is not copied)
		// and flushed once per page.
		noted := map[string]bool{}
		for {
			var evs []store.EncodedEvent
			var next *string
			err := waitForStore(ctx, func(ctx context.Context) error {
				var err error
				evs, next, err = c.Store.EncodedEventsPage(ctx, call.sess.ID, cursor, wire.MaxLimit, wire.MaxEventsPageBytes)
				return err
			})
			if err != nil {
				return
			}
			for _, e := range evs {
				if call.encodedEvent(e) != nil || c.replayedApprovalNote(ctx, call, e, noted) != nil {
					return
				}
				cursor = e.Seq
			}
			call.out.flush()
			if next == nil {
				break
			}
		}
	} else {
		head, err := c.Store.LastEventSeq(ctx, call.sess.ID)
		if err != nil {
			return
		}
		cursor = head
	}
	// A session that already ended gets its backlog, then the reason.
	if c.guard(call).ended(ctx) {
		return
	}
	// Open only now: a subscriber that sees its stream open gets every
	// event stored from then on, and the stream's own first check is done.
	call.out.open()
	// A resuming client gets the rest of its turn's deltas, or a reset.
	if deltas.resume(c, opt.TurnID, opt.After) != nil {
		return
	}
	for {
		// Deltas first: a turn's deltas precede its events.
		if deltas.drain() != nil {
			return
		}
		evs, err := c.followEvents(ctx, call.sess.ID, cursor, lagLimit+1)
		if err != nil {
			return
		}
		if len(evs) > lagLimit {
			_ = call.out.write(map[string]any{"jsonrpc": "2.0", "error": RPCError{Code: -32000, Message: "lagged; reconnect with since_event_id"}})
			return
		}
		for _, e := range evs {
			// A provider response's deltas go first, or a reset.
			if deltas.settle(ctx, c, e) != nil || call.event(e) != nil {
				return
			}
			cursor = e.Seq
		}
		if !c.awaitSubscribeWake(ctx, call, waiter, deltas, ticket) {
			return
		}
	}
}

// awaitSubscribeWake waits for news for a subscribe stream: new events, or
// a re-check by the session's shared checker. Deltas are written by the
// session's writer, without waking the stream. It reports false when the stream ends.
func (c *clientAPI) awaitSubscribeWake(ctx context.Context, call *rpcCall, waiter *live.Waiter, deltas *deltaStream, ticket *streamTicket) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case <-waiter.Unsubscribed():
			return false
		case <-waiter.Wake():
			return true
		case <-ticket.checked():
			// The session's shared checker re-read the authorization.
			if e := ticket.verdict(); e != nil {
				call.endStream(e)
				return false
			}
			return true
		}
	}
}

func (c *clientAPI) unsubscribe(call *rpcCall) {
	if err := live.Publish(call.r.Context(), c.Store.Pool, "unsubscribe:"+call.sess.ID); err != nil {
		call.fail(NewRPCError(-32603, "Internal error"))
		return
	}
	call.result(map[string]any{"unsubscribed": true})
}

// followEvents reads the log after a sequence for the live part of a
// stream, which reads again on every wake-up (this process's own appends
// come from memory), waiting out a database outage so the stream resumes
// where it was instead of ending.
func (c *clientAPI) followEvents(ctx context.Context, sessionID string, after int64, limit int) ([]store.Event, error) {
	var evs []store.Event
	err := waitForStore(ctx, func(ctx context.Context) error {
		var err error
		evs, err = c.Store.FollowEvents(ctx, sessionID, after, limit)
		return err
	})
	return evs, err
}
