package api

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/bae-go/bae-go/activities"
	"github.com/bae-go/bae-go/api/wire"
	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/internal/lib/ids"
	"github.com/bae-go/bae-go/store"
	"github.com/bae-go/bae-go/workflows"
)

// methodRewind is bae-go's opt-in session.rewind (docs/api.md): BAE has no
// such method and its SDKs never call it.
const methodRewind = "session.rewind"

// rewindView is the result of session.rewind and of the admin route: the
// session.rewind event stored.
type rewindView struct {
	EventID string `json:"event_id"`
	events.RewindPayload
}

// rewindOutcome is a rewind's result or why there is none: refusal is the
// domain's reason, err an internal failure.
type rewindOutcome struct {
	res     workflows.RewindResult
	badID   bool // before_event_id names no event of the session
	refusal workflows.RewindRefusal
}

// runRewind rewinds sessionID as p says on behalf of clientKeyID ("" for
// an operator). The session workflow does it, holding the turn gate; a
// session whose workflow is not running has no turn running or queued,
// and is rewound here.
func (d *Deps) runRewind(ctx context.Context, sessionID string, p wire.RewindParams, clientKeyID string) (rewindOutcome, error) {
	in := workflows.RewindInput{RewindID: ids.New(ids.RewindPrefix), TurnID: p.TurnID, ClientKeyID: clientKeyID, By: clientKeyID}
	if clientKeyID == "" {
		in.By = events.InterruptedBy
	}
	if p.BeforeEventID != "" {
		seq, err := d.Store.SeqOfEvent(ctx, sessionID, p.BeforeEventID)
		if errors.Is(err, store.ErrNotFound) {
			return rewindOutcome{badID: true}, nil
		}
		if err != nil {
			return rewindOutcome{}, err
		}
		in.BeforeSeq = seq
	}
	req := store.RewindRequest{RewindID: in.RewindID, TurnID: in.TurnID, BeforeSeq: in.BeforeSeq, ClientKeyID: clientKeyID, By: in.By}
	// A rewind refused anyway leaves a running turn alone.
	err := d.Store.CheckRewind(ctx, sessionID, req)
	if refusal, ok := activities.RewindRefusal(err); ok {
		return rewindOutcome{refusal: refusal}, nil
	}
	if err != nil {
		return rewindOutcome{}, err
	}
	// A running turn is interrupted first: its provider call stops now
	// rather than when the call ends (see stopCall).
	d.stopCall(ctx, d.Log, sessionID, "")
	res, running, err := d.Engine.Rewind(ctx, sessionID, in)
	if err != nil {
		return rewindOutcome{}, err
	}
	if !running {
		pl, id, err := d.Store.Rewind(ctx, sessionID, req)
		if refusal, ok := activities.RewindRefusal(err); ok {
			return rewindOutcome{refusal: refusal}, nil
		}
		if err != nil {
			return rewindOutcome{}, err
		}
		res = workflows.RewindResult{Rewind: pl, EventID: id}
	}
	return rewindOutcome{res: res, refusal: res.Refusal}, nil
}

// rewind is session.rewind: a registered driver rewinds its open session.
func (c *clientAPI) rewind(call *rpcCall) {
	if _, ok := c.requireDriver(call); !ok {
		return
	}
	if !c.requireOpen(call) {
		return
	}
	p, bad := wire.ParseRewind(call.params)
	if bad != nil {
		call.fail(bad)
		return
	}
	out, err := c.runRewind(call.r.Context(), call.sess.ID, p, call.clientID)
	if err != nil {
		call.log.Error("rewind", "err", err)
		call.fail(NewRPCError(-32603, "Internal error"))
		return
	}
	if out.badID {
		call.fail(NewRPCError(-32602, "Invalid params: no event %q in this session", p.BeforeEventID))
		return
	}
	if out.refusal != "" {
		call.fail(rewindRefusal(out.refusal))
		return
	}
	trace.SpanFromContext(call.r.Context()).SetAttributes(attribute.Int("bae.rewind.turns", len(out.res.Rewind.TurnIDs)),
		attribute.Int("bae.rewind.tool_calls", len(out.res.Rewind.ToolCalls)))
	call.result(rewindView{EventID: out.res.EventID, RewindPayload: out.res.Rewind})
}

// adminRewind is POST /admin/v1/sessions/{id}/rewind: an operator rewinds
// a session; its session.rewind event records "by": "operator".
func (a *adminAPI) adminRewind(w http.ResponseWriter, r *http.Request) *Problem {
	id := chi.URLParam(r, "id")
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64<<10))
	if err != nil {
		return badRequest("could not read request body")
	}
	p, bad := wire.ParseRewind(body)
	if bad != nil {
		return badRequest(strings.TrimPrefix(bad.Message, "Invalid params: "))
	}
	if prob := a.requireOpenSession(r.Context(), id); prob != nil {
		return prob
	}
	out, err := a.runRewind(r.Context(), id, p, "")
	if err != nil {
		return internalError(a.Log, err)
	}
	if out.badID {
		return badRequest("no event " + p.BeforeEventID + " in session " + id)
	}
	if out.refusal != "" {
		return rewindProblem(out.refusal)
	}
	a.Log.Info("admin rewind", "session_id", id, "turns", len(out.res.Rewind.TurnIDs), "tool_calls", len(out.res.Rewind.ToolCalls))
	writeJSON(w, http.StatusOK, rewindView{EventID: out.res.EventID, RewindPayload: out.res.Rewind})
	return nil
}
