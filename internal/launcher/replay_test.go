package launcher_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/bae-go/bae-go/internal/launcher"
)

// TestReplayRecordedHistories replays Launch histories recorded from real
// runs (the trigger package's tests with BAE_RECORD_HISTORY=1) against the
// current code, so a change that would break runs already in flight when a
// launcher is upgraded fails here.
func TestReplayRecordedHistories(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "no recorded histories in testdata")
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			r := worker.NewWorkflowReplayer()
			r.RegisterWorkflowWithOptions(launcher.Launch, workflow.RegisterOptions{Name: launcher.WorkflowName})
			require.NoError(t, r.ReplayWorkflowHistoryFromJSONFile(nil, f))
		})
	}
}
