package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/bae-go/bae-go/api/wire"
	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/internal/lib/live"
	"github.com/bae-go/bae-go/store"
	"github.com/bae-go/bae-go/workflows"
)

// controlWait bounds the reject policy's question about a paused turn.
const controlWait = 2 * time.Second

// methodInterrupt stops a running (or paused) turn (a bae-go extension).
const methodInterrupt = "session.interrupt"

// interruptView is the result of session.interrupt and of the admin route.
type interruptView struct {
	Interrupted bool    `json:"interrupted"`
	TurnID      *string `json:"turnId"`
	// Outcome: the turn ended on its own before the interrupt reached it.
	Outcome string `json:"outcome,omitempty"`
}

func viewOf(res workflows.InterruptResult) interruptView {
	v := interruptView{Interrupted: res.Interrupted, Outcome: res.Outcome}
	if res.TurnID != "" {
		v.TurnID = &res.TurnID
	}
	return v
}

// errTurnNotRunning is a named turn that is neither running nor paused.
func errTurnNotRunning(turnID string) *RPCError {
	return NewRPCError(-32000, "turn_not_running: turn %s is neither running nor paused", turnID)
}

// interrupt is session.interrupt: drivers only, on an open session.
func (c *clientAPI) interrupt(call *rpcCall) {
	if _, ok := c.requireDriver(call); !ok {
		return
	}
	if !c.requireOpen(call) {
		return
	}
	p, bad := wire.ParseInterrupt(call.params)
	if bad != nil {
		call.fail(bad)
		return
	}
	c.stopCall(call.r.Context(), call.log, call.sess.ID, p.TurnID)
	res, err := c.Engine.Interrupt(call.r.Context(), call.sess.ID, workflows.InterruptInput{TurnID: p.TurnID, By: call.clientID})
	if err != nil {
		call.log.Error("interrupt", "err", err)
		call.fail(NewRPCError(-32603, "Internal error"))
		return
	}
	if p.TurnID != "" && res.TurnID == "" {
		call.fail(errTurnNotRunning(p.TurnID))
		return
	}
	call.result(viewOf(res))
}

// whenBusy applies a sendMessage's busy policy before its message is
// stored: reject refuses while a turn runs, is queued or is another
// driver's live pause; interrupt stops the running turn first (the new
// message then queues behind any message queued before it).
func (c *clientAPI) whenBusy(ctx context.Context, call *rpcCall, policy wire.WhenBusy) bool {
	switch policy {
	case wire.BusyReject:
		if c.busy(ctx, call) {
			call.fail(NewRPCError(-32000, "session_busy: a turn is running or queued (%s: reject)", wire.WhenBusyHeader))
			return false
		}
	case wire.BusyInterrupt:
		c.stopCall(ctx, call.log, call.sess.ID, "")
		if _, err := c.Engine.Interrupt(ctx, call.sess.ID, workflows.InterruptInput{By: call.clientID, RunningOnly: true}); err != nil {
			call.log.Error("interrupt before send", "err", err)
			call.fail(NewRPCError(-32603, "Internal error"))
			return false
		}
	}
	return true
}

// gateFresh is how old a turn gate read with the request's authentication
// may be when the reject policy weighs it: the body arrives in between, and
// a body slower than this (a large message, a slow client) has the gate
// read again, so a turn that began meanwhile is not missed.
const gateFresh = time.Second

// busy answers the reject policy from PostgreSQL: a message stored without
// a recorded result is a queued or running turn. The workflow is not asked
// (it answers no query while a workflow task runs a provider call, about a
// second), except about another driver's paused turn, whose expiry only the
// workflow knows; a workflow holding a paused turn runs no task. A
// message that arrives as a turn ends falls on the side of the result's
// commit: refused before it, accepted after. The read and the store that
// follows are not one transaction, so two rejects racing on an idle
// session may both be accepted: the second queues behind the first.
func (c *clientAPI) busy(ctx context.Context, call *rpcCall) bool {
	var g store.TurnGate
	var err error
	if r := call.sendReads; r != nil && r.HasGate && time.Since(r.At) <= gateFresh {
		g, err = r.Gate, r.GateErr
	} else {
		g, err = c.Store.TurnGate(ctx, call.sess.ID)
	}
	if err != nil {
		// Unknown is busy: reject promises not to queue.
		call.log.Warn("read the turn gate", "err", err)
		return true
	}
	switch {
	case !g.Open:
		return false // the send is refused as the session is not open
	case g.Unfinished:
		return true
	case g.PausedOwner == "" || g.PausedOwner == call.clientID:
		return false
	}
	qctx, cancel := context.WithTimeout(ctx, controlWait)
	v, err := c.Engine.Control(qctx, call.sess.ID)
	cancel()
	if err != nil {
		call.log.Debug("read the paused turn", "err", err)
		return true
	}
	return !v.Closed && v.Paused != nil && v.Paused.Owner != call.clientID && !v.Paused.Expired
}

// stopCall is an interrupt's fast path, sent before its Interrupt update:
// a turn's provider call runs inside a workflow task, which receives the
// update only when it ends, so the replica running the call (turnID's, or
// else the turn that called a provider last) is asked to stop it now. The
// update still decides: a stop that reaches no running call, or names a
// turn that already ended, changes nothing (see workflows.runAttempt).
// Callers have checked the interrupter's authority over sessionID, not
// over turnID: a turn id reaches every observer of its session, so one
// that is not sessionID's sends no stop (the update then finds no such
// turn running).
func (d *Deps) stopCall(ctx context.Context, log *slog.Logger, sessionID, turnID string) {
	if d.SlowInterrupt.Load() {
		return
	}
	if turnID == "" {
		id, err := d.Store.LastCallingTurn(ctx, sessionID)
		if err != nil {
			if !errors.Is(err, store.ErrNotFound) {
				log.Warn("interrupt: find the calling turn", "session_id", sessionID, "err", err)
			}
			return
		}
		turnID = id
	} else {
		ours, err := d.Store.TurnOfSession(ctx, sessionID, turnID)
		if err != nil {
			log.Warn("interrupt: check the turn's session", "session_id", sessionID, "turn_id", turnID, "err", err)
			return
		}
		if !ours {
			return
		}
	}
	if err := live.Publish(ctx, d.Store.Pool, live.StopTurn(sessionID, turnID)); err != nil {
		log.Warn("interrupt: send the stop message", "session_id", sessionID, "turn_id", turnID, "err", err)
	}
}

// interruptedMessage is an interrupted turn's terminal "message": the
// assistant message its server.message.interrupted event kept.
func interruptedMessage(turnEvs []store.Event) (json.RawMessage, bool) {
	for i := len(turnEvs) - 1; i >= 0; i-- {
		if turnEvs[i].Type != events.ServerMessageInterrupted {
			continue
		}
		var p struct {
			Content json.RawMessage `json:"content"`
		}
		if json.Unmarshal(turnEvs[i].Payload, &p) != nil {
			return nil, false
		}
		b, _ := json.Marshal(events.ServerMessage{Content: p.Content})
		return b, true
	}
	return nil, false
}

// adminInterrupt is POST /admin/v1/sessions/{id}/interrupt: an operator
// stops the session's running (or paused) turn, or only body.turnId.
// The turn's server.message.interrupted event records "by": "operator".
func (a *adminAPI) adminInterrupt(w http.ResponseWriter, r *http.Request) *Problem {
	id := chi.URLParam(r, "id")
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64<<10))
	if err != nil {
		return badRequest("could not read request body")
	}
	if strings.TrimSpace(string(body)) == "" {
		body = []byte("{}")
	}
	p, bad := wire.ParseInterrupt(body)
	if bad != nil {
		return badRequest(strings.TrimPrefix(bad.Message, "Invalid params: "))
	}
	if prob := a.requireOpenSession(r.Context(), id); prob != nil {
		return prob
	}
	a.stopCall(r.Context(), a.Log, id, p.TurnID)
	res, err := a.Engine.Interrupt(r.Context(), id, workflows.InterruptInput{TurnID: p.TurnID, By: events.InterruptedBy})
	if err != nil {
		return internalError(a.Log, err)
	}
	a.Log.Info("admin interrupt", "session_id", id, "turn_id", res.TurnID, "requested_turn_id", p.TurnID, "interrupted", res.Interrupted)
	if p.TurnID != "" && res.TurnID == "" {
		return conflict("turn_not_running", "turn "+p.TurnID+" is neither running nor paused")
	}
	writeJSON(w, http.StatusOK, viewOf(res))
	return nil
}

// requireOpenSession is the problem an operator's action on a session gets
// when the session is unknown (404) or not open (409 session_not_open);
// nil when it is open.
func (a *adminAPI) requireOpenSession(ctx context.Context, id string) *Problem {
	sess, err := a.Store.GetSession(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return notFound("no session " + id)
	}
	if err != nil {
		return internalError(a.Log, err)
	}
	if sess.State != store.StateOpen {
		return conflict("session_not_open", "session is "+sess.State+", not open")
	}
	return nil
}
