package tests

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/bae-go/bae-go/internal/fakeprovider"
	"github.com/bae-go/bae-go/workflows"
)

// TestRecordedHistoryReplays runs a session through a pause, a resume, an
// abandonment and a close, then replays its real history against the
// current workflow code: any nondeterminism fails here. With
// BAE_RECORD_HISTORY=1 it refreshes workflows/testdata, which the fast
// replay test in package workflows checks on every run.
func TestRecordedHistoryReplays(t *testing.T) {
	e := newEnv(t, envOpts{fallbacks: []string{"fallback"}})
	d := e.open("get_time")
	e.fake.Lane("primary").Enqueue(
		fakeprovider.ToolUse("tu_1", "get_time", nil).WithToolUse("tu_2", "unrouted", nil),
		fakeprovider.Error(500, "down"),
		fakeprovider.ToolUse("tu_3", "get_time", nil),
	)
	d.send("what time?")
	d.send([]any{map[string]any{"type": "tool_result", "tool_use_id": "tu_1", "content": "noon"}})
	d.send("and now?")
	d.send("forget it")
	require.Equal(t, http.StatusOK, e.srv.Client(t, http.MethodDelete, "/api/v1/sessions/"+d.sid, d.sk, nil).Status)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run := e.srv.Temporal.GetWorkflow(ctx, d.sid, "")
	require.NoError(t, run.Get(ctx, nil), "the workflow completes after close")
	hist := &historypb.History{}
	it := e.srv.Temporal.GetWorkflowHistory(ctx, d.sid, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		require.NoError(t, err)
		hist.Events = append(hist.Events, ev)
	}
	require.NotEmpty(t, hist.Events)

	replayer := worker.NewWorkflowReplayer()
	replayer.RegisterWorkflowWithOptions(workflows.Session, workflow.RegisterOptions{Name: workflows.SessionWorkflow})
	require.NoError(t, replayer.ReplayWorkflowHistory(nil, hist))

	if os.Getenv("BAE_RECORD_HISTORY") != "" {
		b, err := protojson.MarshalOptions{Indent: "  "}.Marshal(hist)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join("..", "workflows", "testdata", "session_history.json"), b, 0o644))
	}
}
