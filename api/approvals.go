package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/bae-go/bae-go/api/wire"
	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/internal/approval"
	"github.com/bae-go/bae-go/store"
	"github.com/bae-go/bae-go/workflows"
)

// approvalPolicy reads a profile's "approvals": malformed is 400, a value
// the policy does not allow is 422 invalid_approval_policy, naming the
// rule and field. Absent or null is no policy (BAE's behaviour).
func approvalPolicy(raw json.RawMessage) (json.RawMessage, *Problem) {
	pol, err := approval.Parse(raw)
	var fe *approval.FieldError
	if errors.As(err, &fe) {
		if fe.Malformed {
			return nil, badRequest(fe.Error())
		}
		return nil, unprocessable("invalid_approval_policy", fe.Error())
	}
	if err != nil {
		return nil, badRequest("approvals: " + err.Error())
	}
	return pol.JSON(), nil
}

// approvalPolicyView is a stored policy as the profile shows it.
func approvalPolicyView(raw json.RawMessage) json.RawMessage {
	pol, err := approval.Parse(raw)
	if err != nil {
		return nil
	}
	return pol.JSON()
}

func approvalView(a store.Approval) wire.Approval {
	v := wire.Approval{
		ID: a.ID, SessionID: a.SessionID, TurnID: a.TurnID,
		ToolCall: wire.ToolCall{ID: a.ToolCallID, Kind: string(a.ToolKind), Name: a.ToolName, Server: events.Optional(a.Server), Arguments: a.Arguments},
		Deciders: string(a.Deciders), Deadline: store.FormatTime(a.Deadline), OnTimeout: string(a.OnTimeout),
		State: a.State, RequestedAt: store.FormatTime(a.RequestedAt),
	}
	if !a.Pending() && a.DecidedBy != nil {
		d := &wire.ApprovalDecision{Arguments: a.ApprovedArguments, Message: a.Message, DecidedBy: decidedByView(*a.DecidedBy)}
		if a.DecidedAt != nil {
			d.DecidedAt = store.FormatTime(*a.DecidedAt)
		}
		v.Decision = d
	}
	return v
}

func decidedByView(b events.DecidedBy) wire.DecidedBy {
	return wire.DecidedBy{Kind: string(b.Kind), ClientID: b.ClientID, Operator: b.Operator}
}

// decideApproval checks a decision against the stored request (pending;
// edited arguments fit the tool's input schema) and hands it to the
// session's workflow, which re-checks who may decide and lets exactly one
// of racing decisions win. The caller has checked the decider.
func (d *Deps) decideApproval(ctx context.Context, a store.Approval, dec wire.Decide, by events.DecidedBy) (workflows.ApprovalDecisionResult, error) {
	if !a.Pending() {
		return workflows.ApprovalDecisionResult{}, approval.Refuse(approval.RefuseNotPending, "approval %s is %s", a.ID, a.State)
	}
	if len(dec.Arguments) > 0 {
		if r := approval.ValidateArguments(a.InputSchema, dec.Arguments); r != nil {
			return workflows.ApprovalDecisionResult{}, r
		}
	}
	return d.Engine.DecideApproval(ctx, a.SessionID, workflows.ApprovalDecisionInput{
		ApprovalID: a.ID, Approve: dec.Approve, Arguments: dec.Arguments, Message: dec.Message, By: by,
	})
}

// rpcDecideApproval is session.decideApproval: a driver of the session
// decides one of its held calls, if the request's deciders allow it.
func (c *clientAPI) rpcDecideApproval(call *rpcCall) {
	dec, err := wire.ParseDecide(call.params, true, false)
	if err != nil {
		call.fail(NewRPCError(-32602, "Invalid params: %s", err.Error()))
		return
	}
	ctx := call.r.Context()
	a, err := c.Store.GetApproval(ctx, dec.ApprovalID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && a.SessionID != call.sess.ID) {
		call.fail(approvalRPCError(approval.Refuse(approval.RefuseNotFound, "no approval %s in this session", dec.ApprovalID)))
		return
	}
	if err != nil {
		call.log.Error("read approval", "err", err)
		call.fail(NewRPCError(-32603, "Internal error"))
		return
	}
	if r := approval.MayDecide(a.Deciders, a.TurnDriver, call.clientID, call.decl.Registered); r != nil {
		call.fail(approvalRPCError(r))
		return
	}
	res, err := c.decideApproval(ctx, a, dec, events.DecidedBy{Kind: events.DecidedByDriver, ClientID: call.clientID})
	var refused *approval.RefusedError
	switch {
	case errors.As(err, &refused):
		call.fail(approvalRPCError(refused))
	case err != nil:
		call.log.Error("decide approval", "approval_id", a.ID, "err", err)
		call.fail(NewRPCError(-32603, "Internal error"))
	default:
		call.result(map[string]any{"approval_id": a.ID, "decision": res.Decision, "decided_by": decidedByView(res.By)})
	}
}

func (a *adminAPI) listApprovals(w http.ResponseWriter, r *http.Request) *Problem {
	q := r.URL.Query()
	f := store.ApprovalFilter{State: q.Get("state"), SessionID: q.Get("session_id")}
	switch f.State {
	case "", "pending", "decided":
	default:
		return badRequest("state must be pending or decided")
	}
	if len(f.SessionID) > wire.MaxNameBytes {
		return badRequest(fmt.Sprintf("session_id must be at most %d bytes", wire.MaxNameBytes))
	}
	after, limit, p := pageParams(r)
	if p != nil {
		return p
	}
	page, err := a.Store.ListApprovals(r.Context(), f, after, limit)
	if err != nil {
		return internalError(a.Log, err)
	}
	items := make([]wire.Approval, 0, len(page.Items))
	for _, ap := range page.Items {
		items = append(items, approvalView(ap))
	}
	writeJSON(w, http.StatusOK, pageBody[wire.Approval]{Items: items, NextCursor: page.NextCursor})
	return nil
}

// approvalContextEvents is how many of the session's events, up to the
// request, an approval's detail shows.
const approvalContextEvents = 10

func (a *adminAPI) getApproval(w http.ResponseWriter, r *http.Request) *Problem {
	ap, p := a.approvalByID(r)
	if p != nil {
		return p
	}
	v := approvalView(ap)
	ctx := r.Context()
	req, err := a.Store.EventByIdem(ctx, ap.SessionID, approvalRequestIdem(ap))
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return internalError(a.Log, err)
	}
	v.Context = []json.RawMessage{}
	if err == nil {
		evs, _, err := a.Store.EncodedEventsPage(ctx, ap.SessionID, max(0, req.Seq-approvalContextEvents), approvalContextEvents, wire.MaxEventsPageBytes)
		if err != nil {
			return internalError(a.Log, err)
		}
		for _, e := range evs {
			v.Context = append(v.Context, bytes.Join(e.Parts, nil))
		}
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

// approvalRequestIdem is the idempotency key of an approval's
// approval.request event (activities.RequestApproval stores it).
func approvalRequestIdem(a store.Approval) string {
	return fmt.Sprintf("%s/i%d/t/%s/approval", a.TurnID, a.Iteration, a.ToolCallID)
}

func (a *adminAPI) approvalByID(r *http.Request) (store.Approval, *Problem) {
	id := chi.URLParam(r, "id")
	ap, err := a.Store.GetApproval(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		return ap, notFound("no approval " + id)
	}
	if err != nil {
		return ap, internalError(a.Log, err)
	}
	return ap, nil
}

// decideApprovalAdmin is an operator's decision: operators may decide
// every approval, whatever its deciders.
func (a *adminAPI) decideApprovalAdmin(w http.ResponseWriter, r *http.Request) *Problem {
	c := &clientAPI{Deps: a.Deps}
	body, p := c.readBody(w, r)
	if p != nil {
		return p
	}
	dec, err := wire.ParseDecide(body, false, true)
	if err != nil {
		return badRequest(err.Error())
	}
	ap, p := a.approvalByID(r)
	if p != nil {
		return p
	}
	_, err = a.decideApproval(r.Context(), ap, dec, events.DecidedBy{Kind: events.DecidedByOperator, Operator: dec.Operator})
	var refused *approval.RefusedError
	switch {
	case errors.As(err, &refused):
		return approvalProblem(refused)
	case err != nil:
		return internalError(a.Log, err)
	}
	a.Log.Info("operator decided an approval", "approval_id", ap.ID, "session_id", ap.SessionID, "approve", dec.Approve, "operator", dec.Operator)
	ap, p = a.approvalByID(r)
	if p != nil {
		return p
	}
	writeJSON(w, http.StatusOK, approvalView(ap))
	return nil
}

// approvalNote is the notification an opted-in stream carries for an
// approval event, beside its session.event.
func approvalNote(e store.Event) (map[string]any, bool) {
	switch e.Type {
	case events.ApprovalRequest:
		var p events.ApprovalRequestPayload
		if json.Unmarshal(e.Payload, &p) != nil {
			return nil, false
		}
		return map[string]any{"jsonrpc": "2.0", "method": wire.ApprovalRequestMethod, "params": wire.ApprovalRequestNote{
			ApprovalID: p.ApprovalID, TurnID: p.TurnID, Deciders: string(p.Deciders), Deadline: p.Deadline, OnTimeout: string(p.OnTimeout),
			ToolCall: wire.ToolCall{ID: p.ToolCallID, Kind: string(p.ToolKind), Name: p.ToolName, Server: p.Server, Arguments: p.Arguments},
		}}, true
	case events.ApprovalDecision:
		return map[string]any{"jsonrpc": "2.0", "method": wire.ApprovalDecisionMethod, "params": e.Payload}, true
	}
	return nil, false
}

// replayedApprovalNote writes, after an approval event a subscribe replay
// carries to an opted-in stream, the notification the live stream would
// have carried, for approvals still pending when the replay reads their
// request (and then for their decision): a client that reconnects learns
// what waits for a decision, and is not asked about calls decided while
// it was away. noted holds the approvals whose request it announced.
func (c *clientAPI) replayedApprovalNote(ctx context.Context, call *rpcCall, e store.EncodedEvent, noted map[string]bool) error {
	if !call.approvals || !isApprovalEvent(e.Type) {
		return nil
	}
	var ev struct {
		Payload json.RawMessage `json:"payload"`
	}
	var ref struct {
		ApprovalID string `json:"approval_id"`
	}
	if json.Unmarshal(bytes.Join(e.Parts, nil), &ev) != nil || json.Unmarshal(ev.Payload, &ref) != nil || ref.ApprovalID == "" {
		return nil
	}
	switch e.Type {
	case events.ApprovalRequest:
		var ap store.Approval
		err := waitForStore(ctx, func(ctx context.Context) error {
			var err error
			ap, err = c.Store.GetApproval(ctx, ref.ApprovalID)
			return err
		})
		if errors.Is(err, store.ErrNotFound) || (err == nil && !ap.Pending()) {
			return nil
		}
		if err != nil {
			return err
		}
		noted[ref.ApprovalID] = true
	case events.ApprovalDecision:
		if !noted[ref.ApprovalID] {
			return nil
		}
	}
	note, ok := approvalNote(store.Event{Type: e.Type, Payload: ev.Payload})
	if !ok {
		return nil
	}
	return call.out.write(note)
}

// isApprovalEvent reports the event types a stream carries only when it
// opted in with Bae-Approvals.
func isApprovalEvent(t events.Type) bool {
	return t == events.ApprovalRequest || t == events.ApprovalDecision
}

// approvalsOn reports a stream that opted in with "Bae-Approvals: on"
// (any other value, or none, is off: BAE's stream).
func approvalsOn(r *http.Request) bool {
	on, bad := wire.ParseApprovals(r.Header.Values(wire.ApprovalsHeader))
	return bad == nil && on
}
