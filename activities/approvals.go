package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/internal/approval"
	"github.com/bae-go/bae-go/internal/telemetry"
	"github.com/bae-go/bae-go/store"
	"github.com/bae-go/bae-go/tooldecl"
	"github.com/bae-go/bae-go/workflows"
)

// RequestApproval matches a server-side call against its session's
// profile's approval policy and, when a rule holds it, stores the request
// (the approvals row and its approval.request event) once. The deadline
// is fixed here, on the first run: a retry returns the stored request.
func (a *Activities) RequestApproval(ctx context.Context, in workflows.RequestApprovalInput) (workflows.RequestApprovalResult, error) {
	ctx, done := a.work.track(ctx, in.TurnID)
	defer done()
	call := workflows.ToolCallInput{TurnRef: in.TurnRef, Iteration: in.Iteration, Call: in.Call}
	var res workflows.RequestApprovalResult
	if in.Call.Name == tooldecl.StatusTool {
		// Reading subagents' status launches nothing: never held.
		return res, nil
	}
	err := a.untilStored(ctx, "request approval", func(ctx context.Context) error {
		sess, err := a.Store.GetSession(ctx, in.SessionID)
		if err != nil {
			return err
		}
		profile, err := a.Store.GetProfile(ctx, sess.ProfileID)
		if err != nil {
			return err
		}
		pol, err := approval.Parse(profile.Approvals)
		if err != nil || pol.Empty() {
			return err
		}
		args, err := a.inputOrFence(ctx, call)
		if err != nil {
			return err
		}
		rule := pol.Match(approval.Call{Kind: approval.KindOf(in.Call.Dispatch), Server: in.Call.Server, Tool: in.Call.Name, Arguments: args})
		if rule == nil {
			return nil
		}
		schema, err := a.inputSchema(ctx, in.TurnRef, in.Call)
		if err != nil {
			return err
		}
		// Fenced: a run of a superseded turn leaves no request pending.
		return a.toolTx(ctx, call, func(tx *store.Tx) error {
			ap, err := tx.RequestApproval(ctx, store.NewApproval{
				SessionID: in.SessionID, TurnID: in.TurnID, Iteration: in.Iteration, ToolCallID: in.Call.ID, ToolKind: in.Call.Dispatch,
				ToolName: in.Call.Name, Server: in.Call.Server, Arguments: args, InputSchema: schema, Deciders: rule.Deciders,
				TurnDriver: in.ClientKeyID, Deadline: time.Now().UTC().Add(time.Duration(rule.Timeout)), OnTimeout: rule.OnTimeout,
			}, idem(in.TurnID, toolStep(in.Iteration, in.Call.ID)+"/approval"), in.ClientKeyID)
			if err != nil {
				return err
			}
			res = workflows.RequestApprovalResult{Needed: true, ApprovalID: ap.ID, Deciders: ap.Deciders, Deadline: ap.Deadline, OnTimeout: ap.OnTimeout}
			if !ap.Pending() {
				res.State = ap.State
			}
			return nil
		})
	})
	if errors.Is(err, store.ErrTurnSuperseded) {
		return workflows.RequestApprovalResult{}, a.turnSuperseded(ctx, in.TurnID, "approval request", err, "tool_use_id", in.Call.ID, "tool", in.Call.Name)
	}
	if err != nil {
		return workflows.RequestApprovalResult{}, fmt.Errorf("request approval: %w", err)
	}
	if res.Needed {
		a.logger(ctx, in.TurnID).Info("tool call held for approval", "approval_id", res.ApprovalID, "tool", in.Call.Name, "deadline", res.Deadline)
	}
	return res, nil
}

// inputSchema is the input schema the turn advertised for the call's tool
// (an MCP server's, or the driver's declaration of a sandbox or subagent
// tool): edited arguments must fit it.
func (a *Activities) inputSchema(ctx context.Context, ref workflows.TurnRef, call workflows.ToolCall) (json.RawMessage, error) {
	ts, err := a.toolsFor(ctx, ref.SessionID, ref.ClientKeyID)
	if err != nil {
		return nil, err
	}
	for _, d := range ts.advertised {
		if d.Name == call.Name {
			return d.InputSchema, nil
		}
	}
	return nil, nil
}

// SettleApproval stores an approval's decision: the row, the
// approval.decision event and, for a call that does not run, its error
// tool.result, which the model then receives as the call's result. Only
// the first settlement counts (a retry finds it stored). It is not fenced
// by the turn: it closes a request that was stored while the turn was
// live, and a superseded turn's request left pending would wait forever;
// a second run of it stores nothing.
func (a *Activities) SettleApproval(ctx context.Context, in workflows.SettleApprovalInput) error {
	ctx, done := a.work.track(ctx, in.TurnID)
	defer done()
	step := toolStep(in.Iteration, in.Call.ID)
	var ap store.Approval
	var now bool
	err := a.Store.Tx(ctx, func(tx *store.Tx) error {
		var err error
		ap, now, err = tx.SettleApproval(ctx, in.ApprovalID, store.Settlement{Decision: in.Decision, Arguments: in.Arguments, Message: in.Message, By: in.By})
		if err != nil || !now {
			return err
		}
		evs := []store.NewEvent{{IdemKey: idem(in.TurnID, step+"/decision"), TurnID: in.TurnID, ClientKeyID: in.ClientKeyID, Payload: events.ApprovalDecisionPayload{
			ApprovalID: in.ApprovalID, Decision: in.Decision, Arguments: in.Arguments, Message: in.Message, DecidedBy: in.By,
		}}}
		if in.Rejected {
			text := events.RejectedText(in.Message)
			if in.Decision == events.DecisionExpired {
				text = events.ExpiredRejection
			}
			evs = append(evs, store.NewEvent{IdemKey: idem(in.TurnID, step+"/result"), TurnID: in.TurnID, ClientKeyID: in.ClientKeyID, Payload: events.ToolResultPayload{
				ToolUseID: in.Call.ID, Dispatch: in.Call.Dispatch, ServerName: events.Optional(in.Call.Server), IsError: true, Content: textContent(text),
			}})
		}
		_, err = tx.AppendEvents(ctx, in.SessionID, evs...)
		return err
	})
	if err != nil {
		return fmt.Errorf("settle approval %s: %w", in.ApprovalID, err)
	}
	if now {
		a.waitSpan(ctx, in, ap)
		a.Metrics.ApprovalWait(ctx, in.Decision, time.Since(ap.RequestedAt))
		a.logger(ctx, in.TurnID).Info("approval decided", "approval_id", in.ApprovalID, "decision", in.Decision, "by", in.By.Kind)
	}
	return nil
}

// waitSpan records the wait as one bae.approval.wait span under the turn,
// from the request to the decision (the wait itself runs no code to hold a
// span open).
func (a *Activities) waitSpan(ctx context.Context, in workflows.SettleApprovalInput, ap store.Approval) {
	_, span := a.Spans.StartUnder(ctx, in.Span, telemetry.SpanApprovalWait, trace.WithTimestamp(ap.RequestedAt), trace.WithAttributes(
		attribute.String(telemetry.AttrToolName, in.Call.Name),
		attribute.String(telemetry.AttrToolDispatch, string(in.Call.Dispatch)),
		attribute.String(telemetry.AttrApprovalDecision, string(in.Decision)),
	))
	span.End()
}

// approvedInput is a held call's input: the arguments its approval
// approved when a decider edited them, else the model's.
func (a *Activities) approvedInput(ctx context.Context, in workflows.ToolCallInput) (json.RawMessage, bool, error) {
	if in.ApprovalID == "" {
		return nil, false, nil
	}
	args, err := a.Store.ApprovedArguments(ctx, in.ApprovalID)
	if err != nil {
		return nil, false, err
	}
	return args, len(args) > 0, nil
}
