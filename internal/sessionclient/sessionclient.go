// Package sessionclient is the API's handle on Session workflows: it starts them,
// enqueues their turns and closes them, over a Temporal client.
package sessionclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/bae-go/bae-go/internal/approval"
	"github.com/bae-go/bae-go/workflows"
)

// Client implements api.Engine: the session workflows over a Temporal client.
type Client struct {
	Client      client.Client
	TaskQueue   string
	TurnTimeout time.Duration
	// HeartbeatTimeout is passed to new sessions (0 = workflow default).
	HeartbeatTimeout time.Duration
	// DBRetryBudget is passed to new sessions (0 = workflow default).
	DBRetryBudget time.Duration
	// TurnsPerRun is passed to new sessions (0 = workflow default); tests
	// set it low to see continue-as-new.
	TurnsPerRun int
	Log         *slog.Logger // required
	// UseSearchAttributes is set by EnsureSearchAttributes when the
	// namespace has (or accepted) the custom attributes.
	UseSearchAttributes bool
}

// SearchAttributes are the custom attributes sessions carry.
var SearchAttributes = map[string]enumspb.IndexedValueType{
	workflows.SearchAttrProfileID: enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	workflows.SearchAttrState:     enumspb.INDEXED_VALUE_TYPE_KEYWORD,
}

// EnsureSearchAttributes registers the custom search attributes on the
// namespace and waits (bounded) until the frontend accepts them (see
// awaitSearchAttributes). Clusters that refuse (for example without operator
// access) still work; sessions then carry only a memo.
func (e *Client) EnsureSearchAttributes(ctx context.Context, namespace string) {
	missing := map[string]enumspb.IndexedValueType{}
	resp, err := e.Client.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	for name, typ := range SearchAttributes {
		if err != nil {
			missing[name] = typ
			continue
		}
		if _, ok := resp.GetCustomAttributes()[name]; !ok {
			missing[name] = typ
		}
	}
	if len(missing) > 0 {
		_, err = e.Client.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
			Namespace: namespace, SearchAttributes: missing,
		})
		var exists *serviceerror.AlreadyExists
		if err != nil && !errors.As(err, &exists) {
			e.Log.Warn("custom search attributes unavailable; sessions will carry a memo only", "err", err)
			return
		}
	}
	e.UseSearchAttributes = e.awaitSearchAttributes(ctx, namespace, searchAttributesWait)
}

// startOptions and startParams start a session's workflow on the first
// call that needs it (its first message, or its close), so an open session
// with no turn yet costs Temporal nothing, and a burst of opens adds no
// workflow tasks in front of other sessions' turns. A run that is gone
// while the session is still open (its history lost, or terminated by an
// operator) is started again the same way.
func (e *Client) startOptions(ref workflows.SessionRef) client.StartWorkflowOptions {
	memo := map[string]any{"profile_id": ref.ProfileID}
	if ref.ClientVersion != nil {
		memo["client_version"] = *ref.ClientVersion
	}
	opts := client.StartWorkflowOptions{
		ID:                       ref.ID,
		TaskQueue:                e.TaskQueue,
		Memo:                     memo,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
	}
	if e.UseSearchAttributes {
		opts.TypedSearchAttributes = temporal.NewSearchAttributes(
			temporal.NewSearchAttributeKeyKeyword(workflows.SearchAttrProfileID).ValueSet(ref.ProfileID),
			temporal.NewSearchAttributeKeyKeyword(workflows.SearchAttrState).ValueSet("open"),
		)
	}
	return opts
}

func (e *Client) startParams(ref workflows.SessionRef) workflows.SessionParams {
	return workflows.SessionParams{
		SessionID: ref.ID, ProfileID: ref.ProfileID, TurnTimeout: e.TurnTimeout, UseSearchAttributes: e.UseSearchAttributes,
		HeartbeatTimeout: e.HeartbeatTimeout, DBRetryBudget: e.DBRetryBudget, TurnsPerRun: e.TurnsPerRun,
	}
}

// startOperation is the start half of every update-with-start call.
func (e *Client) startOperation(ref workflows.SessionRef) client.WithStartWorkflowOperation {
	return e.Client.NewWithStartWorkflowOperation(e.startOptions(ref), workflows.SessionWorkflow, e.startParams(ref))
}

// updateWithStart submits an update to the session's workflow, starting
// the workflow first when it is not running, and waits for stage.
func (e *Client) updateWithStart(ctx context.Context, ref workflows.SessionRef, updateID, name string, arg any, stage client.WorkflowUpdateStage) (client.WorkflowUpdateHandle, error) {
	return e.Client.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: e.startOperation(ref),
		UpdateOptions: client.UpdateWorkflowOptions{
			WorkflowID:   ref.ID,
			UpdateID:     updateID,
			UpdateName:   name,
			Args:         []any{arg},
			WaitForStage: stage,
		},
	})
}

// Ready reports whether the Temporal frontend answers.
func (e *Client) Ready(ctx context.Context) error {
	if _, err := e.Client.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
		return fmt.Errorf("temporal health check: %w", err)
	}
	return nil
}

// Enqueue puts a stored message's turn in the session's FIFO queue with an
// Enqueue signal, starting the workflow first when it is not running, and
// returns once the signal is in the workflow's history. Signals have no
// in-flight cap (a waiting Update counts against the cluster's per-execution
// limit), and the workflow drops a turn id it already has, so a repeated
// submission does not run the turn twice. The turn's result is recorded in
// PostgreSQL (store.RecordTurnResult).
func (e *Client) Enqueue(ctx context.Context, ref workflows.SessionRef, in workflows.SendMessageInput) error {
	if _, err := e.Client.SignalWithStartWorkflow(ctx, ref.ID, workflows.SignalEnqueue, in, e.startOptions(ref), workflows.SessionWorkflow, e.startParams(ref)); err != nil {
		return fmt.Errorf("enqueue turn %s: %w", in.TurnID, err)
	}
	return nil
}

// AwaitTurn waits for the outcome of a SendMessage update already submitted
// by a server from before the Enqueue signal (an idempotent resend of such
// a turn relays it) without submitting anything. found is
// false when the session's current workflow run has no update with that
// turn id: it was never accepted, or it finished in an earlier run (before a
// continue-as-new).
func (e *Client) AwaitTurn(ctx context.Context, sessionID, turnID string) (res workflows.TurnResult, found bool, err error) {
	h := e.Client.GetWorkflowUpdateHandle(client.GetWorkflowUpdateHandleOptions{WorkflowID: sessionID, UpdateID: turnID})
	if err := h.Get(ctx, &res); err != nil {
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			return workflows.TurnResult{}, false, nil
		}
		return workflows.TurnResult{}, true, fmt.Errorf("await turn %s: %w", turnID, err)
	}
	return res, true, nil
}

// CloseSession tells the workflow its session ended and waits for cleanup.
// A session that never had a turn gets a workflow for this alone, so its
// server resources (a sandbox started over RPC, MCP connections) are
// released by the same cleanup as any other.
func (e *Client) CloseSession(ctx context.Context, ref workflows.SessionRef, in workflows.CloseInput) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	h, err := e.updateWithStart(ctx, ref, "", workflows.UpdateClose, in, client.WorkflowUpdateStageCompleted)
	if err == nil {
		err = h.Get(ctx, nil)
	}
	if err != nil {
		return fmt.Errorf("close session update: %w", err)
	}
	return nil
}

// CancelSubagent stops a remote subagent's background run.
func (e *Client) CancelSubagent(ctx context.Context, sessionID, subagentID string) error {
	if err := e.updateUnlessGone(ctx, sessionID, workflows.UpdateCancelSubagent, subagentID); err != nil {
		return fmt.Errorf("cancel subagent update: %w", err)
	}
	return nil
}

// updateUnlessGone runs an update to completion; a workflow that no longer
// exists has nothing left to do, so that is not an error.
func (e *Client) updateUnlessGone(ctx context.Context, sessionID, name string, arg any) error {
	h, err := e.Client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   sessionID,
		UpdateName:   name,
		Args:         []any{arg},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err != nil {
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			return nil
		}
		return err
	}
	return h.Get(ctx, nil)
}

// Interrupt submits an Interrupt update and waits until the turn it
// reached has ended (its last event stored). A session whose workflow is
// not running has no turn to interrupt.
func (e *Client) Interrupt(ctx context.Context, sessionID string, in workflows.InterruptInput) (workflows.InterruptResult, error) {
	h, err := e.Client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   sessionID,
		UpdateName:   workflows.UpdateInterrupt,
		Args:         []any{in},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	var res workflows.InterruptResult
	if err == nil {
		err = h.Get(ctx, &res)
	}
	if err != nil {
		if notRunning(err) {
			return workflows.InterruptResult{}, nil
		}
		return workflows.InterruptResult{}, fmt.Errorf("interrupt update: %w", err)
	}
	return res, nil
}

// DecideApproval submits a decision on a held tool call and waits until it
// is stored. The workflow's refusals come back as *approval.RefusedError;
// a session whose workflow is not running holds no pending approval.
func (e *Client) DecideApproval(ctx context.Context, sessionID string, in workflows.ApprovalDecisionInput) (workflows.ApprovalDecisionResult, error) {
	h, err := e.Client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   sessionID,
		UpdateName:   workflows.UpdateDecideApproval,
		Args:         []any{in},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	var res workflows.ApprovalDecisionResult
	if err == nil {
		err = h.Get(ctx, &res)
	}
	if err == nil {
		return res, nil
	}
	var ae *temporal.ApplicationError
	switch {
	case notRunning(err):
		return res, approval.Refuse(approval.RefuseNotPending, "the approval is no longer pending")
	case errors.As(err, &ae) && ae.Type() == workflows.ErrApprovalNotPending:
		return res, approval.Refuse(approval.RefuseNotPending, "the approval was already decided, expired or cancelled")
	case errors.As(err, &ae) && ae.Type() == workflows.ErrApprovalNotAllowed:
		return res, approval.Refuse(approval.RefuseNotAllowed, "%s", ae.Message())
	}
	return res, fmt.Errorf("approval update: %w", err)
}

// Control reads the session's turn gate (the Control query). A session
// whose workflow is not running is idle.
func (e *Client) Control(ctx context.Context, sessionID string) (workflows.ControlView, error) {
	v, err := e.Client.QueryWorkflow(ctx, sessionID, "", workflows.QueryControl)
	var view workflows.ControlView
	if err == nil {
		err = v.Get(&view)
	}
	if err != nil {
		if notRunning(err) {
			return workflows.ControlView{}, nil
		}
		return workflows.ControlView{}, fmt.Errorf("control query: %w", err)
	}
	return view, nil
}

// notRunning reports a workflow that does not exist or has completed.
func notRunning(err error) bool {
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return true
	}
	var fp *serviceerror.FailedPrecondition
	return errors.As(err, &fp) && strings.Contains(fp.Error(), "completed")
}
