package tests

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
)

// TestIdleSessionCostsTemporalNothing: opening a session starts no
// workflow (so a burst of opens queues no workflow tasks in front of other
// sessions' turns); its first message starts it, and closing a session that
// never had a turn still runs the workflow's cleanup.
func TestIdleSessionCostsTemporalNothing(t *testing.T) {
	e := newEnv(t, envOpts{})
	ctx := context.Background()
	busy := e.open()
	_, err := e.srv.Temporal.DescribeWorkflowExecution(ctx, busy.sid, "")
	var nf *serviceerror.NotFound
	require.ErrorAs(t, err, &nf, "an open session with no turn has no workflow")

	_, term := busy.send("hello")
	require.Contains(t, term, "result", "the first message starts the workflow: %v", term)
	desc, err := e.srv.Temporal.DescribeWorkflowExecution(ctx, busy.sid, "")
	require.NoError(t, err)
	assert.Equal(t, enums.WORKFLOW_EXECUTION_STATUS_RUNNING, desc.GetWorkflowExecutionInfo().GetStatus())

	idle := e.open()
	r := e.srv.Client(t, http.MethodDelete, "/api/v1/sessions/"+idle.sid, idle.sk, nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	desc, err = e.srv.Temporal.DescribeWorkflowExecution(ctx, idle.sid, "")
	require.NoError(t, err, "closing runs the cleanup in a workflow")
	assert.Equal(t, enums.WORKFLOW_EXECUTION_STATUS_COMPLETED, desc.GetWorkflowExecutionInfo().GetStatus())
}
