package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/bae-go/bae-go/api/wire"
	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/internal/lib/ids"
	"github.com/bae-go/bae-go/store"
	"github.com/bae-go/bae-go/workflows"
)

// providerUnavailable is the assistant turn returned when no provider answered.
var providerUnavailable = json.RawMessage(`{"role":"assistant","content":[{"type":"text","text":"The provider is currently unavailable."}]}`)

// sendMessage validates the request, stores the message under a new turn
// id, enqueues the turn and relays the turn's events from the log until its
// result is recorded. While the turn is queued nothing is
// written: the first event tagged with this turn id marks its start.
//
// With an Idempotency-Key header a message already stored under that key is
// not stored again: the call relays that turn instead (resendTurn).
func (c *clientAPI) sendMessage(call *rpcCall) {
	if _, ok := c.requireDriver(call); !ok {
		return
	}
	key, bad := wire.ParseIdempotencyKey(call.r.Header.Values(wire.IdempotencyHeader))
	if bad == nil {
		// Checked before anything is stored, like the key.
		_, bad = wire.ParseDeltas(call.r.Header.Values(wire.DeltasHeader))
	}
	var policy wire.WhenBusy
	if bad == nil {
		policy, bad = wire.ParseWhenBusy(call.r.Header.Values(wire.WhenBusyHeader))
	}
	if bad != nil {
		call.fail(bad)
		return
	}
	ctx := call.r.Context()
	if key != "" {
		// Echoed so a client knows a resend under this key is safe.
		call.out.w.Header().Set(wire.IdempotencyHeader, key)
		// Looked up before the state gate: a turn that ended the session
		// still answers its resend with its own result.
		ti, err := c.Store.TurnInputByKey(ctx, call.sess.ID, key)
		switch {
		case err == nil:
			c.resendTurn(call, ti, nil)
			return
		case !errors.Is(err, store.ErrNotFound):
			call.log.Error("look up idempotency key", "err", err)
			call.fail(NewRPCError(-32603, "Internal error"))
			return
		}
	}
	if !c.requireOpen(call) {
		return
	}
	stored, bad := wire.ParseSendMessage(call.params)
	if bad != nil {
		call.fail(bad)
		return
	}
	// The relay counts against the stream caps, checked before anything
	// is stored or interrupted.
	turnID := ids.New(ids.TurnPrefix)
	ticket, quota := c.streams.join(call, turnID)
	if quota != nil {
		call.fail(quotaRPCError(quota))
		return
	}
	defer ticket.leave()
	// A spent budget is refused before anything is stored or interrupted; one spent
	// after this check stops the turn before its first provider call.
	budgets, err := c.budgets(ctx, call)
	if err != nil {
		call.log.Error("read budgets", "err", err)
		call.fail(NewRPCError(-32603, "Internal error"))
		return
	}
	if b := store.SpentBudget(budgets); b != nil {
		call.fail(budgetRefusal(*b))
		return
	}
	if policy == wire.BusyInterrupt {
		// A send the queue would refuse interrupts nothing.
		var queued *store.QuotaError
		if err := c.Store.QueueRoom(ctx, c.Caps, call.sess.ID, call.clientID); errors.As(err, &queued) {
			call.fail(quotaRPCError(queued))
			return
		} else if err != nil {
			call.log.Error("count queued turns", "err", err)
			call.fail(NewRPCError(-32603, "Internal error"))
			return
		}
	}
	if !c.whenBusy(ctx, call, policy) {
		return
	}

	put, err := c.Store.PutTurnInput(ctx, call.sess.ID, turnID, call.clientID, stored, key, c.Caps)
	var queued *store.QuotaError
	switch {
	case errors.As(err, &queued):
		call.fail(quotaRPCError(queued))
		return
	case err != nil:
		call.log.Error("store turn input", "turn_id", turnID, "err", err)
		call.fail(NewRPCError(-32603, "Internal error"))
		return
	}
	if put.Prior != nil {
		// A concurrent request with the same key stored it first.
		ticket.relay(put.Prior.TurnID)
		c.resendTurn(call, *put.Prior, ticket)
		return
	}
	in := workflows.SendMessageInput{TurnID: turnID, ClientKeyID: call.clientID, Span: c.Spans.ChildRef(ctx), SessionSpan: call.sess.Span,
		// It replaces the turn it interrupted: ahead of the queue.
		Front: policy == wire.BusyInterrupt, Arrived: put.Arrived.UnixMicro(), Ahead: aheadTurns(put.Ahead)}
	c.relayTurn(call, ticket, turnID, true, func(ctx context.Context, gone <-chan struct{}) (workflows.TurnResult, error) {
		return c.runTurn(ctx, gone, sessionRef(call.sess), in, put.Idle)
	})
}

// budgets reads the budgets the call's turn would run under, or takes
// those read with its authentication.
func (c *clientAPI) budgets(ctx context.Context, call *rpcCall) ([]store.BudgetState, error) {
	if r := call.sendReads; r != nil {
		return r.Budgets, r.BudgetsErr
	}
	return c.Store.BudgetsFor(ctx, call.sess.ID, call.clientID)
}

// resendTurn answers a sendMessage whose Idempotency-Key names a stored
// turn: nothing is stored; the turn's events are relayed from its start and
// its result is the one the first call got (or would have got). ticket is
// the relay's place in the stream caps, taken here when nil.
func (c *clientAPI) resendTurn(call *rpcCall, ti store.TurnInput, ticket *streamTicket) {
	stored, bad := wire.ParseSendMessage(call.params)
	if bad != nil {
		call.fail(bad)
		return
	}
	if ti.ClientKeyID != call.clientID || !sameJSON(ti.Message, stored) {
		call.fail(wire.Errorf(-32602, "Invalid params: this %s was already used for a different message", wire.IdempotencyHeader))
		return
	}
	begun := len(ti.BeginResult) > 0
	if !begun && !c.requireOpen(call) {
		return
	}
	if ticket == nil {
		var quota *store.QuotaError
		if ticket, quota = c.streams.join(call, ti.TurnID); quota != nil {
			call.fail(storedQuotaRPCError(quota))
			return
		}
		defer ticket.leave()
	}
	ref := sessionRef(call.sess)
	in := workflows.SendMessageInput{TurnID: ti.TurnID, ClientKeyID: ti.ClientKeyID, Span: c.Spans.ChildRef(call.r.Context()), SessionSpan: call.sess.Span, Arrived: ti.Arrived.UnixMicro()}
	c.relayTurn(call, ticket, ti.TurnID, false, func(ctx context.Context, gone <-chan struct{}) (workflows.TurnResult, error) {
		if !begun {
			// Queued, or its submission was lost with a server: the
			// workflow drops a turn id it holds, so a live submission is
			// joined, a lost one made again, naming what is ahead of it
			// as the first one did.
			in, err := c.withAhead(ctx, ref.ID, in)
			if err != nil {
				return workflows.TurnResult{}, err
			}
			return c.runTurn(ctx, gone, ref, in, false)
		}
		// A turn that began is never submitted again: that could run it a
		// second time after a continue-as-new.
		return c.awaitBegunTurn(ctx, gone, ref, ti)
	})
}

// loggedOutcome rebuilds the result of a turn that finished in an earlier
// workflow run from what it stored: BeginTurn's recorded rejection, the
// turn's failure event, or its reply.
func (c *clientAPI) loggedOutcome(ctx context.Context, sessionID string, ti store.TurnInput) (workflows.TurnResult, error) {
	var begin workflows.BeginTurnResult
	if err := json.Unmarshal(ti.BeginResult, &begin); err != nil {
		return workflows.TurnResult{}, fmt.Errorf("decode begin result of %s: %w", ti.TurnID, err)
	}
	if begin.Outcome != "" {
		return workflows.TurnResult{Outcome: begin.Outcome, Rejection: begin.Rejection, Detail: begin.Detail, ErrorCode: begin.ErrorCode, ErrorMessage: begin.ErrorMessage}, nil
	}
	var turnEvs []store.Event
	if err := waitForStore(ctx, func(ctx context.Context) error {
		var err error
		turnEvs, err = c.Store.TurnEvents(ctx, sessionID, ti.TurnID)
		return err
	}); err != nil {
		return workflows.TurnResult{}, err
	}
	replied := false
	for _, e := range turnEvs {
		switch e.Type {
		case events.SessionError:
			var p struct {
				Reason events.Reason `json:"reason"`
				Step   string        `json:"step"`
				Detail string        `json:"detail"`
			}
			_ = json.Unmarshal(e.Payload, &p)
			switch p.Reason {
			case events.ReasonTurnFailed:
				return workflows.TurnResult{Outcome: workflows.OutcomeFailed, FailedStep: p.Step, Reason: p.Reason, Detail: p.Detail}, nil
			case events.ReasonAllProvidersFailed, events.ReasonLoopLimit:
				return workflows.TurnResult{Outcome: workflows.OutcomeProvidersFailed, Reason: p.Reason}, nil
			}
		case events.ServerMessageSend:
			replied = true
		case events.ServerMessageInterrupted:
			return workflows.TurnResult{Outcome: workflows.OutcomeInterrupted}, nil
		}
	}
	if replied {
		return workflows.TurnResult{Outcome: workflows.OutcomeCompleted}, nil
	}
	return workflows.TurnResult{}, fmt.Errorf("turn %s: %w", ti.TurnID, errNoOutcome)
}

// errNoOutcome: a turn began and its log holds no outcome (it has not
// ended).
var errNoOutcome = errors.New("began but left no outcome in the log")

// relayTurn opens the stream (the turn is stored), runs submit in the
// background and relays the turn's events until it returns, then the
// terminal response. count records the turn in the metrics (not for a
// resend, whose first call counted it). The relay's authorization is
// re-checked by its session's shared checker (ticket). submit's wait ends
// (errClientGone) once gone, the request's end, closes and the workflow
// has the turn.
func (c *clientAPI) relayTurn(call *rpcCall, ticket *streamTicket, turnID string, count bool, submit func(ctx context.Context, gone <-chan struct{}) (workflows.TurnResult, error)) {
	ctx := call.r.Context()
	deltas, opt, ok := c.openDeltas(call, turnID)
	if !ok {
		return
	}
	defer deltas.close()
	// Stored: the turn will run even if this server dies now (the orphan
	// sweep resubmits it), so the stream may open.
	call.out.open()
	waiter := c.Hub.Watch(call.sess.ID)
	defer waiter.Close()
	// The turn's recorded result, as this process or another replica
	// announces it: the relay answers from it at once, rather than after
	// the submission (woken by the same announcement) returns it.
	announced, unwatch := c.Hub.WatchTurn(turnID)
	defer unwatch()

	type outcome struct {
		res workflows.TurnResult
		err error
	}
	var turn outcome // set before finished closes
	finished := make(chan struct{})
	// The turn belongs to the workflow once submitted: a client that goes
	// away does not cancel it, and its result stays in the event log and
	// turn_inputs.result. Its submission outlives the request; the wait
	// for its result does not (a turn held on an approval may wait days).
	go func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 24*time.Hour)
		defer cancel()
		res, err := submit(uctx, ctx.Done())
		// Counted here, not in the relay, so a turn whose caller went away
		// while it was submitted still counts; one left waiting
		// (errClientGone) is not. A rejected turn never ran.
		if count && err == nil && res.Outcome != workflows.OutcomeRejected {
			c.Metrics.TurnCompleted(uctx, res.Outcome)
		}
		turn = outcome{res, err}
		close(finished)
	}()

	relay, err := c.newRelay(ctx, call, turnID, !count)
	if err != nil {
		call.fail(NewRPCError(-32603, "Internal error"))
		return
	}
	relay.deltas = deltas
	if !count && opt.TurnID == turnID {
		// A resend resuming its turn's deltas.
		if deltas.resume(c, turnID, opt.After) != nil {
			return
		}
	}
	// From here the session's writer sends the turn's deltas.
	if deltas.drain() != nil {
		return
	}
	// finish relays the rest and the terminal response (deltas first: a
	// turn's deltas precede its events), to a stream still authorized: a
	// result, announced or returned, can be at hand together with the
	// check that withdrew the stream's authorization, and is then not
	// sent (the latest check's verdict, no read of its own).
	finish := func(res workflows.TurnResult, err error) {
		if e := ticket.verdict(); e != nil {
			call.endStream(e)
			return
		}
		if deltas.drain() != nil {
			return
		}
		c.finishTurn(call, relay, res, err)
	}
	// answered finishes with an announced result; b nil (read it from the
	// store) is the submission's to read.
	answered := func(b []byte) bool {
		var res workflows.TurnResult
		if b == nil || json.Unmarshal(b, &res) != nil {
			return false
		}
		finish(res, nil)
		// The submission returns the same result at once; the request
		// ends after it, or it would see its caller gone and look for
		// the turn's start in the store.
		select {
		case <-finished:
		case <-ctx.Done():
		}
		return true
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-finished:
			finish(turn.res, turn.err)
			return
		case b := <-announced:
			if answered(b) {
				return
			}
		case <-ticket.checked():
			// The session's shared checker re-read the authorization.
			if e := ticket.verdict(); e != nil {
				call.endStream(e)
				return
			}
		case <-waiter.Wake():
			// Woken by the turn's last append, its result already known:
			// the events go out with the terminal response, in one write.
			select {
			case <-finished:
				finish(turn.res, turn.err)
				return
			case b := <-announced:
				if answered(b) {
					return
				}
			default:
			}
		}
		if deltas.drain() != nil {
			return
		}
		if err := relay.pump(ctx); err != nil {
			return
		}
	}
}

func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// turnRelay forwards a turn's events as notifications, oldest first, and
// keeps the turn's own events for the terminal result.
type turnRelay struct {
	c       *clientAPI
	call    *rpcCall
	turnID  string
	started bool
	last    int64
	events  []store.Event // every event tagged with the turn id
	// deltas: the stream's opt-in (nil without); a provider response's
	// deltas go before it (deltaStream.settle).
	deltas *deltaStream
	// held: events written and not yet sent (see relay).
	held bool
}

// newRelay starts a turn's relay. A new turn has no event before the head
// read with the authentication, so the relay starts there and writes
// nothing until the turn's first event; a resent turn may have begun
// earlier, and is relayed from its first event.
func (c *clientAPI) newRelay(ctx context.Context, call *rpcCall, turnID string, resent bool) (*turnRelay, error) {
	t := &turnRelay{c: c, call: call, turnID: turnID, last: call.head}
	if !resent {
		return t, nil
	}
	var first int64
	err := waitForStore(ctx, func(ctx context.Context) error {
		var err error
		first, err = c.Store.FirstTurnEventSeq(ctx, call.sess.ID, turnID)
		return err
	})
	if first > 0 {
		t.last = first - 1
	}
	return t, err
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

const relayPage = 256

// pump writes every event appended since the turn started, reading as a
// follower (this process's own appends come from memory), and sends them
// with one flush per page.
func (t *turnRelay) pump(ctx context.Context) error {
	for {
		evs, err := t.c.Store.FollowEvents(ctx, t.call.sess.ID, t.last, relayPage)
		if err != nil {
			return nil
		}
		err = t.relay(ctx, evs)
		t.flush()
		if err != nil || len(evs) < relayPage {
			return err
		}
	}
}

// relay writes events read after t.last. Until the turn's first event the
// log belongs to earlier turns, still running while this one was queued.
func (t *turnRelay) relay(ctx context.Context, evs []store.Event) error {
	for _, e := range evs {
		t.last = e.Seq
		if !t.started {
			if e.TurnID != t.turnID {
				continue
			}
			t.started = true
		}
		if e.TurnID == t.turnID && (t.call.approvals || !isApprovalEvent(e.Type)) {
			t.events = append(t.events, e)
		}
		if t.selfEvent(e) {
			continue
		}
		if t.deltas != nil && e.Type == events.ProviderResponse {
			// settle may wait for the response's deltas: what came
			// before is sent first.
			t.flush()
		}
		if err := t.deltas.settle(ctx, t.c, e); err != nil {
			return err
		}
		// Sent by the caller's next flush: pump's, or the terminal
		// response's after catchUp.
		if err := t.call.heldEvent(e); err != nil {
			return err
		}
		t.held = true
	}
	return nil
}

// catchUp relays up to the turn's last event, lastSeq, once the update
// returned. When the turn did not say (lastSeq 0), or memory does not reach
// it (appended by another replica whose notice is still on its way), the
// table is read: every event of the turn committed before the update
// returned. A commit of this process that the result's notice overtook is
// waited for, not read from the table (Store.FollowEventsThrough).
func (t *turnRelay) catchUp(ctx context.Context, lastSeq int64) error {
	fromTable := lastSeq == 0
	for {
		var evs []store.Event
		err := waitForStore(ctx, func(ctx context.Context) error {
			var err error
			if fromTable {
				evs, err = t.c.Store.EventsAfter(ctx, t.call.sess.ID, t.last, relayPage)
			} else {
				evs, err = t.c.Store.FollowEventsThrough(ctx, t.call.sess.ID, t.last, lastSeq, relayPage)
			}
			return err
		})
		if err != nil {
			return err
		}
		if err := t.relay(ctx, evs); err != nil {
			return err
		}
		switch {
		case len(evs) == relayPage:
			t.flush()
		case fromTable || t.last >= lastSeq:
			// What it relayed goes out with the terminal response.
			return nil
		default:
			// Sent before the table is read.
			t.flush()
			fromTable = true
		}
	}
}

// flush sends the events relay wrote and held.
func (t *turnRelay) flush() {
	if t.held {
		t.held = false
		t.call.out.flush()
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
	if err := relay.catchUp(ctx, res.LastSeq); err != nil {
		if ctx.Err() == nil {
			call.fail(NewRPCError(-32603, "Internal error"))
		}
		return
	}
	switch res.Outcome {
	case workflows.OutcomeRejected:
		call.fail(turnRejection(res))
		return
	case workflows.OutcomeFailed:
		call.fail(turnFailure(res))
		return
	}
	turnEvs := relay.events
	message := providerUnavailable
	interrupted := false
	if res.Outcome == workflows.OutcomeInterrupted {
		// The kept partial answer, and "interrupted": true beside it.
		message, interrupted = interruptedMessage(turnEvs)
		if !interrupted {
			message = providerUnavailable
		}
	} else if res.Outcome != workflows.OutcomeProvidersFailed {
		for i := len(turnEvs) - 1; i >= 0; i-- {
			if turnEvs[i].Type == events.ServerMessageSend {
				message = turnEvs[i].Payload
				break
			}
		}
	}
	// {"events":[...],"message":...}, encoded by hand like the stream.
	size := len(message) + 32
	for _, e := range turnEvs {
		size += len(e.Payload) + 256
	}
	b := make([]byte, 0, size)
	b = append(b, `{"events":[`...)
	for i, e := range turnEvs {
		if i > 0 {
			b = append(b, ',')
		}
		b = e.AppendJSON(b)
	}
	b = append(b, `],"message":`...)
	b = append(b, message...)
	if interrupted {
		b = append(b, `,"interrupted":true`...)
	}
	call.resultRaw(append(b, '}'))
}

// engineError maps a failed enqueue or wait: a finished workflow means the
// session is no longer open.
func (c *clientAPI) engineError(ctx context.Context, call *rpcCall, turnID string, err error) *RPCError {
	sess, serr := c.Store.GetSession(ctx, call.sess.ID)
	if serr == nil && sess.State != store.StateOpen {
		return NewRPCError(-32000, "session is %s, not open", sess.State)
	}
	call.log.Error("send message failed", "turn_id", turnID, "err", err)
	return NewRPCError(-32000, "session loop failed")
}
