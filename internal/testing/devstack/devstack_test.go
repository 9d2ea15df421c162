package devstack

import (
	"context"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/bae-go/bae-go/internal/testing/testlog"
)

var testAttrs = map[string]enumspb.IndexedValueType{
	"BaeProfileId":    enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	"BaeSessionState": enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	"BaeClientKeyId":  enumspb.INDEXED_VALUE_TYPE_KEYWORD,
}

// greet upserts a custom search attribute, proving it is usable by workflows.
func greet(ctx workflow.Context, name string) (string, error) {
	key := temporal.NewSearchAttributeKeyKeyword("BaeProfileId")
	if err := workflow.UpsertTypedSearchAttributes(ctx, key.ValueSet("profile-1")); err != nil {
		return "", err
	}
	return "hello " + name, nil
}

func TestPersistsAcrossRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()

	// First run: UI enabled, workflow executed end to end. One attribute is
	// held back so the second run must add it to the existing namespace.
	firstAttrs := maps.Clone(testAttrs)
	delete(firstAttrs, "BaeClientKeyId")
	ports := testPorts(t, 2)
	s, err := Start(ctx, Options{
		DataDir: dir, FrontendPort: ports[0], UIPort: ports[1],
		Namespace: "bae-dev", Logger: testLogger(t), SearchAttributes: firstAttrs,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Stop() })
	assert.Equal(t, net.JoinHostPort("127.0.0.1", itoa(ports[0])), s.FrontendAddr())
	assert.Equal(t, "bae-dev", s.Namespace())
	require.Equal(t, net.JoinHostPort("127.0.0.1", itoa(ports[1])), s.UIAddr())

	resp, err := http.Get("http://" + s.UIAddr() + "/")
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	c := dial(t, s)
	assertAttrs(ctx, t, c, s.Namespace(), firstAttrs)

	w := worker.New(c, "devstack-test", worker.Options{})
	w.RegisterWorkflow(greet)
	require.NoError(t, w.Start())
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "greet-1", TaskQueue: "devstack-test"}, greet, "bae")
	require.NoError(t, err)
	var got string
	require.NoError(t, run.Get(ctx, &got))
	assert.Equal(t, "hello bae", got)
	w.Stop()
	c.Close()

	require.NoError(t, s.Stop())
	require.NoError(t, s.Stop(), "Stop is idempotent")

	// Second run on the same data dir, on new ports, with the UI port taken:
	// the namespace and the workflow survive and the busy UI is only a warning.
	ports = testPorts(t, 2)
	busy, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", itoa(ports[1])))
	require.NoError(t, err)
	defer busy.Close()

	s2, err := Start(ctx, Options{
		DataDir: dir, FrontendPort: ports[0], UIPort: ports[1],
		Namespace: "bae-dev", Logger: testLogger(t), SearchAttributes: testAttrs,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s2.Stop() })
	assert.Empty(t, s2.UIAddr())

	c2 := dial(t, s2)
	defer c2.Close()
	assertAttrs(ctx, t, c2, s2.Namespace(), testAttrs)
	desc, err := c2.DescribeWorkflowExecution(ctx, "greet-1", run.GetRunID())
	require.NoError(t, err)
	info := desc.GetWorkflowExecutionInfo()
	assert.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, info.GetStatus())
	assert.Contains(t, info.GetSearchAttributes().GetIndexedFields(), "BaeProfileId")
	require.NoError(t, s2.Stop())
}

func TestInMemoryWithoutUI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ports := testPorts(t, 1)
	s, err := Start(ctx, Options{FrontendPort: ports[0], UIPort: -1, Logger: testLogger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Stop() })
	assert.Empty(t, s.UIAddr())
	assert.Equal(t, DefaultNamespace, s.Namespace())

	c := dial(t, s)
	defer c.Close()
	_, err = c.CheckHealth(ctx, &client.CheckHealthRequest{})
	require.NoError(t, err)
	require.NoError(t, s.Stop())
}

func TestFrontendPortInUse(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	port := busy.Addr().(*net.TCPAddr).Port

	_, err = Start(context.Background(), Options{FrontendPort: port, UIPort: -1, Logger: testLogger(t)})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "frontend port")
	assert.Contains(t, err.Error(), "already in use")
}

func TestOptionValidation(t *testing.T) {
	_, err := Start(context.Background(), Options{IP: "not-an-ip"})
	assert.ErrorContains(t, err, "invalid IP")
	_, err = Start(context.Background(), Options{FrontendPort: 9000, UIPort: 9000})
	assert.ErrorContains(t, err, "both 9000")
}

func assertAttrs(ctx context.Context, t *testing.T, c client.Client, ns string, want map[string]enumspb.IndexedValueType) {
	t.Helper()
	list, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: ns})
	require.NoError(t, err)
	for name, typ := range want {
		assert.Equal(t, typ, list.GetCustomAttributes()[name], name)
	}
}

func dial(t *testing.T, s *Server) client.Client {
	t.Helper()
	c, err := client.Dial(client.Options{HostPort: s.FrontendAddr(), Namespace: s.Namespace()})
	require.NoError(t, err)
	return c
}

func testPorts(t *testing.T, n int) []int {
	t.Helper()
	ports, err := freePorts("127.0.0.1", n)
	require.NoError(t, err)
	return ports
}

// testLogger routes warnings through t.Log so they show for failing tests.
func testLogger(t *testing.T) *slog.Logger {
	w := &tWriter{t: t}
	// Registered before any Stop cleanup, so it runs last; server goroutines
	// that log after the test ends must not call t.Log.
	t.Cleanup(func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.done = true
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tWriter struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
}

func (w *tWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimSpace(string(p)))
	}
	return len(p), nil
}

func itoa(n int) string { return strconv.Itoa(n) }

// The Web UI asks for history pages larger than the frontend's threshold,
// and the frontend warns each time: that is routine in a dev server, so it
// stays below the warnings an operator sees. Other warnings still show.
func TestHistoryPageSizeWarningIsBelowWarn(t *testing.T) {
	out := &testlog.Buffer{}
	log := slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	level := new(slog.LevelVar)
	level.Set(slog.LevelWarn)
	sl := newServerLogger(log, level)
	sl.Warn("GetHistory page size is larger than threshold")
	sl.Warn("something else")
	assert.NotContains(t, out.String(), "GetHistory")
	assert.Contains(t, out.String(), "level=WARN msg=\"something else\"")

	// The same through a real frontend, with the UI's request.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	served := &testlog.Buffer{}
	s, err := Start(ctx, Options{FrontendPort: testPorts(t, 1)[0], UIPort: -1,
		Logger: slog.New(slog.NewTextHandler(served, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Stop() })
	c := dial(t, s)
	defer c.Close()
	for range 2 {
		_, _ = c.WorkflowService().GetWorkflowExecutionHistory(ctx, &workflowservice.GetWorkflowExecutionHistoryRequest{
			Namespace: s.Namespace(), Execution: &commonpb.WorkflowExecution{WorkflowId: "ui-page"}, MaximumPageSize: 1 << 20,
		})
	}
	require.NoError(t, s.Stop())
	assert.NotContains(t, served.String(), "GetHistory page size")
}
