package api

import (
	"context"
	"encoding/json"
	"github.com/bae-go/bae-go/events"
	"time"

	"github.com/bae-go/bae-go/api/wire"
	"github.com/bae-go/bae-go/internal/ids"
	"github.com/bae-go/bae-go/store"
	"github.com/bae-go/bae-go/workflows"
)

// providerUnavailable is the assistant turn returned when no provider answered.
var providerUnavailable = json.RawMessage(`{"role":"assistant","content":[{"type":"text","text":"The provider is currently unavailable."}]}`)

// sendMessage validates the request, stores the message under a new turn
// id, submits the SendMessage update and relays the turn's events from the
// log until the update returns. While the turn is queued nothing is
// written: the first event tagged with this turn id marks its start.
func (c *clientAPI) sendMessage(call *rpcCall) {
	if _, ok := c.requireDriver(call); !ok {
		return
	}
	if !c.requireOpen(call) {
		return
	}
	stored, bad := wire.ParseSendMessage(call.params)
	if bad != nil {
		call.fail(bad)
		return
	}

	ctx := call.r.Context()
	turnID := ids.New(ids.TurnPrefix)
	if err := c.Store.PutTurnInput(ctx, call.sess.ID, turnID, call.clientID, stored); err != nil {
		call.log.Error("store turn input", "turn_id", turnID, "err", err)
		call.fail(NewRPCError(-32603, "Internal error"))
		return
	}
	// Stored: the turn will run even if this server dies now (the orphan
	// sweep resubmits it), so the stream may open.
	call.out.open()
	waiter := c.Hub.Watch(call.sess.ID)
	defer waiter.Close()
	in := workflows.SendMessageInput{TurnID: turnID, ClientKeyID: call.clientID, Span: c.Spans.ChildRef(ctx), SessionSpan: call.sess.Span}

	type outcome struct {
		res workflows.TurnResult
		err error
	}
	done := make(chan outcome, 1)
	// The turn belongs to the workflow once submitted: a client that goes
	// away does not cancel it, and its result stays in the event log.
	go func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 24*time.Hour)
		defer cancel()
		res, err := c.Engine.SendMessage(uctx, sessionRef(call.sess), in)
		// Counted here, not in the relay, so a turn whose caller went away
		// still counts. A rejected turn never ran.
		if err == nil && res.Outcome != workflows.OutcomeRejected {
			c.Metrics.TurnCompleted(uctx, res.Outcome)
		}
		done <- outcome{res, err}
	}()

	relay := &turnRelay{c: c, call: call, turnID: turnID}
	guard := c.guard(call, turnID)
	poll := time.NewTicker(c.recheckInterval())
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case o := <-done:
			c.finishTurn(call, relay, o.res, o.err)
			return
		case <-waiter.Wake():
		case <-poll.C:
			if guard.ended(ctx) {
				return
			}
		case <-waiter.Recheck():
			if guard.ended(ctx) {
				return
			}
		}
		if err := relay.pump(ctx); err != nil {
			return
		}
	}
}

// turnRelay forwards a turn's events as notifications, oldest first.
type turnRelay struct {
	c       *clientAPI
	call    *rpcCall
	turnID  string
	started bool
	last    int64
}

// selfEvent reports events the caller itself sent in this request, which
// are not echoed back to it (observers still see them).
func (t *turnRelay) selfEvent(e store.Event) bool {
	if e.TurnID != t.turnID || e.ClientKeyID != t.call.clientID {
		return false
	}
	if e.Type == events.ClientMessageSend {
		return true
	}
	if e.Type == events.ToolResult {
		var p struct {
			Dispatch string `json:"dispatch"`
		}
		_ = json.Unmarshal(e.Payload, &p)
		return p.Dispatch == "client"
	}
	return false
}

// pump writes every event appended since the turn started.
func (t *turnRelay) pump(ctx context.Context) error {
	if !t.started {
		first, err := t.c.Store.FirstTurnEventSeq(ctx, t.call.sess.ID, t.turnID)
		if err != nil || first == 0 {
			return nil
		}
		t.started, t.last = true, first-1
	}
	for {
		evs, err := t.c.Store.EventsAfter(ctx, t.call.sess.ID, t.last, 256)
		if err != nil {
			return nil
		}
		for _, e := range evs {
			t.last = e.Seq
			if t.selfEvent(e) {
				continue
			}
			if err := t.call.event(e); err != nil {
				return err
			}
		}
		if len(evs) < 256 {
			return nil
		}
	}
}

// finishTurn relays the turn's remaining events, then the terminal response.
func (c *clientAPI) finishTurn(call *rpcCall, relay *turnRelay, res workflows.TurnResult, err error) {
	ctx := call.r.Context()
	if err != nil {
		if rpcErr := c.engineError(ctx, call, relay.turnID, err); rpcErr != nil {
			call.fail(rpcErr)
			return
		}
	}
	var turnEvs []store.Event
	lerr := waitForStore(ctx, func(ctx context.Context) error {
		var err error
		turnEvs, err = c.Store.TurnEvents(ctx, call.sess.ID, relay.turnID)
		return err
	})
	if lerr != nil {
		call.fail(NewRPCError(-32603, "Internal error"))
		return
	}
	if len(turnEvs) > 0 {
		if !relay.started {
			relay.started, relay.last = true, turnEvs[0].Seq-1
		}
		// Relay up to the turn's last event.
		endSeq := turnEvs[len(turnEvs)-1].Seq
		for relay.last < endSeq {
			before := relay.last
			if err := relay.pump(ctx); err != nil {
				return
			}
			if relay.last == before {
				break
			}
		}
	}
	switch res.Outcome {
	case workflows.OutcomeRejected:
		call.fail(turnRejection(res))
		return
	case workflows.OutcomeFailed:
		call.fail(NewRPCError(-32603, "Internal error: the turn failed at %s and was left out of the conversation; the session is still open", res.FailedStep))
		return
	}
	message := providerUnavailable
	if res.Outcome != workflows.OutcomeProvidersFailed {
		for i := len(turnEvs) - 1; i >= 0; i-- {
			if turnEvs[i].Type == events.ServerMessageSend {
				message = turnEvs[i].Payload
				break
			}
		}
	}
	if turnEvs == nil {
		turnEvs = []store.Event{}
	}
	call.result(map[string]any{"message": message, "events": turnEvs})
}

// engineError maps a failed update call: a finished workflow means the
// session is no longer open.
func (c *clientAPI) engineError(ctx context.Context, call *rpcCall, turnID string, err error) *RPCError {
	sess, serr := c.Store.GetSession(ctx, call.sess.ID)
	if serr == nil && sess.State != store.StateOpen {
		return NewRPCError(-32000, "session is %s, not open", sess.State)
	}
	call.log.Error("send message update failed", "turn_id", turnID, "err", err)
	return NewRPCError(-32000, "session loop failed")
}
