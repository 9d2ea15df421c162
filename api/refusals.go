package api

import (
	"fmt"
	"net/http"

	"github.com/bae-go/bae-go/internal/approval"
	"github.com/bae-go/bae-go/internal/sessiontools"
	"github.com/bae-go/bae-go/store"
	"github.com/bae-go/bae-go/workflows"
)

// The domain says why a turn or a session tool call was refused; these map
// each reason to the JSON-RPC error a client sees. Nowhere else in the
// server are JSON-RPC codes chosen for domain outcomes.

// turnRejection is the client's error for a rejected turn.
func turnRejection(res workflows.TurnResult) *RPCError {
	switch res.Rejection {
	case workflows.RejectTurnInputMissing:
		return NewRPCError(-32603, "Internal error: turn input missing")
	case workflows.RejectClientKeyRevoked:
		return NewRPCError(-32000, "unauthorized: the client key was revoked")
	case workflows.RejectSessionNotOpen:
		return NewRPCError(-32000, "session is %s, not open", res.Detail)
	case workflows.RejectInvalidMessage:
		return NewRPCError(-32602, "Invalid params: message is not an object")
	case workflows.RejectNoPausedTurn:
		return NewRPCError(-32602, "Invalid params: tool_result blocks answer a paused tool call, and no turn is paused")
	case workflows.RejectMergeInvalid:
		return NewRPCError(-32000, "tool result merge invalid: %s", res.Detail)
	case workflows.RejectProfileUnavailable:
		return NewRPCError(-32000, "profile_unavailable: the profile bound to this session is no longer available")
	case "":
		if res.ErrorCode != 0 { // a result from a worker that predates Rejection
			return &RPCError{Code: res.ErrorCode, Message: res.ErrorMessage}
		}
	}
	return NewRPCError(-32603, "Internal error: turn rejected (%s)", res.Rejection)
}

// budgetRefusal is the client's error for a sendMessage refused up front
// because a budget its turn would spend is spent: the -32000
// "quota_exceeded: …" shape the caps on sandboxes and streams already use.
func budgetRefusal(b store.BudgetState) *RPCError {
	return quotaRPC(b.Describe())
}

// turnFailure is the client's error for a turn that failed at a step
// (OutcomeFailed): a spent budget as budgetRefusal says it, any other step
// as an internal error, the session open either way.
func turnFailure(res workflows.TurnResult) *RPCError {
	switch res.FailedStep {
	case workflows.StepBudget:
		return quotaRPC(res.Detail)
	case workflows.StepSuperseded:
		// Its messages are where what superseded it left them.
		return NewRPCError(-32603, "Internal error: the turn failed at %s: the session moved on without it (an interrupt, or a later turn); the session is still open", res.FailedStep)
	}
	return NewRPCError(-32603, "Internal error: the turn failed at %s and was left out of the conversation; the session is still open", res.FailedStep)
}

// toolRefusal is the client's error for a refused session tool call.
func toolRefusal(e *sessiontools.RefusedError) *RPCError {
	switch e.Refusal {
	case sessiontools.RefuseUnknownMethod:
		return NewRPCError(-32601, "Method not found: %s", e.Detail)
	case sessiontools.RefuseInvalidParams:
		return NewRPCError(-32602, "Invalid params: %s", e.Detail)
	case sessiontools.RefuseSessionNotOpen:
		return NewRPCError(-32000, "session is %s, not open", e.Detail)
	case sessiontools.RefuseProfileUnavailable:
		return NewRPCError(-32000, "profile_unavailable: the profile bound to this session is no longer available")
	case sessiontools.RefuseImageNotAllowed:
		return NewRPCError(-32011, "sandbox_image_not_allowed: image %q is not in this session profile's available_sandboxes", e.Detail)
	case sessiontools.RefuseSandboxAlreadyRunning:
		return NewRPCError(-32000, "a remote sandbox is already running for this session; call session.stopRemoteSandbox first")
	case sessiontools.RefuseSandboxStartFailed:
		return NewRPCError(-32012, "sandbox_start_failed: %s", e.Detail)
	case sessiontools.RefuseSandboxNotRunning:
		return NewRPCError(-32013, "sandbox_not_running: no remote sandbox is running for this session")
	case sessiontools.RefuseSandboxStopFailed:
		return NewRPCError(-32000, "sandbox stop failed: %s", e.Detail)
	case sessiontools.RefuseSandboxExecFailed:
		return NewRPCError(-32000, "sandbox exec failed: %s", e.Detail)
	case sessiontools.RefuseQuotaExceeded:
		if e.Quota != nil {
			return quotaRPCError(e.Quota)
		}
	case sessiontools.RefuseClientKeyRevoked:
		return NewRPCError(-32000, "unauthorized: the client key was revoked")
	case sessiontools.RefuseSubagentNotFound:
		return NewRPCError(-32014, "subagent_not_found: no remote subagent %q is tracked for this session", e.Detail)
	}
	return NewRPCError(-32603, "Internal error: %s", fmt.Sprint(e))
}

// rewindRefusal is the client's error for a refused session.rewind.
func rewindRefusal(r workflows.RewindRefusal) *RPCError {
	switch r {
	case workflows.RewindSessionNotOpen:
		return NewRPCError(-32000, "session is not open")
	case workflows.RewindNoSuchPoint:
		return NewRPCError(-32602, "Invalid params: no such turn in this session (a queued turn has not begun)")
	case workflows.RewindBeforeFork:
		return NewRPCError(-32000, "rewind_before_fork: the point is in what this fork inherited; fork the source at that point instead")
	case workflows.RewindNothingToDo:
		return NewRPCError(-32000, "nothing_to_rewind: no turn after that point is left in the conversation")
	}
	return NewRPCError(-32603, "Internal error: rewind refused (%s)", r)
}

// rewindProblem is the admin route's problem for a refused rewind.
func rewindProblem(r workflows.RewindRefusal) *Problem {
	switch r {
	case workflows.RewindSessionNotOpen:
		return conflict("session_not_open", "session is not open")
	case workflows.RewindNoSuchPoint:
		return badRequest("no such turn in this session (a queued turn has not begun)")
	case workflows.RewindBeforeFork:
		return conflict("rewind_before_fork", "the point is in what this fork inherited; fork the source at that point instead")
	case workflows.RewindNothingToDo:
		return conflict("nothing_to_rewind", "no turn after that point is left in the conversation")
	}
	return problem(http.StatusInternalServerError, "internal", "rewind refused ("+string(r)+")")
}

// approvalRPCError is the client's error for a refused approval decision.
func approvalRPCError(e *approval.RefusedError) *RPCError {
	switch e.Refusal {
	case approval.RefuseNotAllowed:
		return NewRPCError(-32001, "approval_not_allowed: %s", e.Detail)
	case approval.RefuseNotPending:
		return NewRPCError(-32000, "approval_not_pending: %s", e.Detail)
	case approval.RefuseNotFound:
		return NewRPCError(-32602, "Invalid params: approval_not_found: %s", e.Detail)
	case approval.RefuseArgumentsInvalid:
		return NewRPCError(-32602, "Invalid params: approval_arguments_invalid: %s", e.Detail)
	}
	return NewRPCError(-32603, "Internal error: decision refused (%s)", e.Refusal)
}

// approvalProblem is the admin API's answer for a refused decision.
func approvalProblem(e *approval.RefusedError) *Problem {
	switch e.Refusal {
	case approval.RefuseNotFound:
		return notFound(e.Detail)
	case approval.RefuseNotPending:
		return conflict("approval_not_pending", e.Detail)
	case approval.RefuseArgumentsInvalid:
		return unprocessable("approval_arguments_invalid", e.Detail)
	}
	// approval_not_allowed cannot reach an operator (operators may decide
	// every approval).
	return problem(http.StatusInternalServerError, "internal", "an internal error occurred")
}
