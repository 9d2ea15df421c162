package console_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
	temporalclient "go.temporal.io/sdk/client"

	"github.com/bae-go/bae-go/internal/sessionclient"
	"github.com/bae-go/bae-go/internal/testing/devstack"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/testenv"
)

// TestTemporalUIShowsRunningStep opens the Temporal Web UI that `baesrv
// dev` embeds on a session whose turn is held in its provider call, and
// finds the turn's current step there: the provider, its model, the
// attempt and since when. The call runs inside a workflow task, so the
// workflow answers no query (current details included) until it ends;
// the memo's current_step, upserted once the call outlasts its task
// (turn-step-lazy) and sent with the task's next heartbeat, is what the
// UI can show.
func TestTemporalUIShowsRunningStep(t *testing.T) {
	chromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dev, err := devstack.Start(ctx, devstack.Options{FrontendPort: freePort(t), UIPort: freePort(t), Namespace: "default",
		Logger: slog.New(slog.DiscardHandler), SearchAttributes: sessionclient.SearchAttributes})
	require.NoError(t, err)
	t.Cleanup(func() { _ = dev.Stop() })
	tc, err := temporalclient.Dial(temporalclient.Options{HostPort: dev.FrontendAddr(), Namespace: "default"})
	require.NoError(t, err)
	t.Cleanup(tc.Close)

	fake := fakeprovider.New(t)
	srv := testenv.Start(t, testenv.Options{Temporal: tc, ConfigTOML: testenv.PrimaryProviderTOML(fake.Lane("primary").URL())})
	pid := srv.Profile(t, map[string]any{"name": "support-bot", "primary_provider": "primary"})
	_, key := srv.Key(t, pid)
	sid, sk := srv.Open(t, key, map[string]any{"client_version": "ui-test"})

	// A first turn teaches the workflow the profile's walk; the second is
	// held in its provider call until released.
	fake.Lane("primary").Enqueue(fakeprovider.Text("Hello."), fakeprovider.Text("Still here.").UntilReleased())
	srv.Call(t, sid, sk, "session.registerDriver", nil)
	first := srv.RPC(t, sid, sk, send(1, "Hi"))
	require.NotNil(t, testenv.Terminal(t, first)["result"], "%v", first)
	held := srv.RPCStream(t, ctx, sid, sk, send(2, "Are you there?"))
	defer held.Close()
	select {
	case <-fake.Started():
	case <-ctx.Done():
		t.Fatal("the provider never got the second request")
	}
	desc, err := tc.DescribeWorkflowExecution(ctx, sid, "")
	require.NoError(t, err)
	runID := desc.GetWorkflowExecutionInfo().GetExecution().GetRunId()

	// The step reaches Temporal with the workflow task's second heartbeat
	// (16 s into the call with the default 10 s task timeout: the first
	// one's task finds the call still running and upserts it): the page
	// is reloaded until it shows it, as an operator would.
	b := newBrowser(t, "http://"+dev.UIAddr())
	page := fmt.Sprintf("%s/namespaces/default/workflows/%s/%s/memo", b.url, sid, runID)
	want := "provider call to primary (claude-fake): iteration 1, attempt 1"
	deadline := time.Now().Add(60 * time.Second)
	var shown string
	for {
		b.do(chromedp.Navigate(page))
		b.waitFor(`document.body && document.body.innerText.includes('` + sid + `')`)
		shown = waitText(b, want, 3*time.Second)
		if strings.Contains(shown, want) || time.Now().After(deadline) {
			break
		}
	}
	require.Contains(t, shown, want, "the Temporal UI does not show the running turn's step")
	b.screenshot("temporal-ui-running-turn")

	fake.Release()
	for range held.Lines() {
	}
}

// waitText polls the page's text for want, up to d, and returns the text
// it saw last.
func waitText(b *browser, want string, d time.Duration) string {
	ctx, cancel := context.WithTimeout(b.ctx, d)
	defer cancel()
	_, _ = chromedp.Run(ctx, chromedp.Poll[bool](`document.body.innerText.includes(`+fmt.Sprintf("%q", want)+`)`, chromedp.WithPollingInterval(100*time.Millisecond)))
	ctx2, cancel2 := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel2()
	text, _ := chromedp.Run(ctx2, chromedp.Evaluate[string]("document.body ? document.body.innerText : ''"))
	return text
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
