package api

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/bae-go/bae-go/internal/sessiontools"
	"github.com/bae-go/bae-go/workflows"
)

// The contract's codes for each domain reason; a reason without a mapping
// would reach the client as an internal error.
func TestTurnRejectionCodes(t *testing.T) {
	cases := map[workflows.Rejection]int{
		workflows.RejectTurnInputMissing:   -32603,
		workflows.RejectClientKeyRevoked:   -32000,
		workflows.RejectSessionNotOpen:     -32000,
		workflows.RejectInvalidMessage:     -32602,
		workflows.RejectNoPausedTurn:       -32602,
		workflows.RejectMergeInvalid:       -32000,
		workflows.RejectProfileUnavailable: -32000,
	}
	for r, code := range cases {
		e := turnRejection(workflows.TurnResult{Outcome: workflows.OutcomeRejected, Rejection: r, Detail: "closed"})
		assert.Equal(t, code, e.Code, "%s", r)
		assert.NotContains(t, e.Message, "turn rejected (", "%s has no mapping", r)
	}
	assert.Equal(t, "session is closed, not open",
		turnRejection(workflows.TurnResult{Rejection: workflows.RejectSessionNotOpen, Detail: "closed"}).Message)
	old := turnRejection(workflows.TurnResult{ErrorCode: -32602, ErrorMessage: "Invalid params: x"})
	assert.Equal(t, &RPCError{Code: -32602, Message: "Invalid params: x"}, old, "a result from an older worker keeps its error")
}

func TestToolRefusalCodes(t *testing.T) {
	cases := map[sessiontools.Refusal]int{
		sessiontools.RefuseUnknownMethod:         -32601,
		sessiontools.RefuseInvalidParams:         -32602,
		sessiontools.RefuseSessionNotOpen:        -32000,
		sessiontools.RefuseProfileUnavailable:    -32000,
		sessiontools.RefuseImageNotAllowed:       -32011,
		sessiontools.RefuseSandboxAlreadyRunning: -32000,
		sessiontools.RefuseSandboxStartFailed:    -32012,
		sessiontools.RefuseSandboxNotRunning:     -32013,
		sessiontools.RefuseSandboxStopFailed:     -32000,
		sessiontools.RefuseSandboxExecFailed:     -32000,
		sessiontools.RefuseSubagentNotFound:      -32014,
	}
	for r, code := range cases {
		e := toolRefusal(&sessiontools.RefusedError{Refusal: r, Detail: "d"})
		assert.Equal(t, code, e.Code, "%s", r)
		assert.NotContains(t, e.Message, "Internal error", "%s has no mapping", r)
	}
}
