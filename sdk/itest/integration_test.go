// Package itest runs the Go SDK against a real baesrv (PostgreSQL and an
// embedded Temporal) with a scripted fake LLM provider.
package itest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/testenv"
	"github.com/bae-go/bae-go/sdk"
	"github.com/bae-go/bae-go/sdk/tools"
)

// lanes get one provider entry each, so every subtest scripts its own.
var lanes = []string{"tools", "fifo", "observe", "pages", "down", "subagent", "misc"}

type env struct {
	srv      *testenv.Server
	fake     *fakeprovider.Server
	profiles atomic.Int32 // profile names must be unique
}

func start(t *testing.T) *env {
	if testing.Short() {
		t.Skip("integration test: needs PostgreSQL and starts baesrv")
	}
	fake := fakeprovider.New(t)
	var toml strings.Builder
	for _, l := range lanes {
		fmt.Fprintf(&toml, "[[providers.entries]]\nname = %q\nprovider = \"anthropic\"\nbase_url = %q\nmodel = \"fake-model\"\nauth_token = \"test\"\n\n", l, fake.Lane(l).URL())
	}
	return &env{srv: testenv.Start(t, testenv.Options{ConfigTOML: toml.String()}), fake: fake}
}

// profile makes a profile whose primary provider is lane.
func (e *env) profile(t *testing.T, lane string, allowed ...string) string {
	if allowed == nil {
		allowed = []string{}
	}
	name := fmt.Sprintf("p-%s-%d", lane, e.profiles.Add(1))
	return e.srv.Profile(t, map[string]any{"name": name, "primary_provider": lane, "allowed_tools": allowed})
}

func (e *env) config(t *testing.T, profileID string) (sdk.Config, string) {
	keyID, key := e.srv.Key(t, profileID)
	return sdk.Config{ServerURL: e.srv.ClientURL, ClientKey: key, ClientVersion: "sdk-itest/1"}, keyID
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func closeSession(t *testing.T, s *sdk.Session) {
	t.Cleanup(func() {
		if err := s.Close(context.Background()); err != nil && !sdk.IsSessionClosed(err) {
			t.Errorf("close: %v", err)
		}
	})
}

func allEvents(t *testing.T, ctx context.Context, s *sdk.Session, limit int) []sdk.Event {
	t.Helper()
	var out []sdk.Event
	for e, err := range s.Events(ctx, sdk.EventsQuery{Limit: limit}) {
		require.NoError(t, err)
		out = append(out, e)
	}
	return out
}

func types(evs []sdk.Event) []sdk.EventType {
	var out []sdk.EventType
	for _, e := range evs {
		out = append(out, e.Type)
	}
	return out
}

// lastBlocks is the content of the last message of a provider request.
func lastMessage(r fakeprovider.Recorded) map[string]any {
	msgs := r.Messages()
	if len(msgs) == 0 {
		return nil
	}
	return msgs[len(msgs)-1]
}

func TestIntegration(t *testing.T) {
	e := start(t)
	t.Run("ToolRoundTripMultiTurn", e.toolRoundTrip)
	t.Run("JoinFIFO", e.joinFIFO)
	t.Run("ObserverSubscribe", e.observerSubscribe)
	t.Run("EventsPagination", e.eventsPagination)
	t.Run("ProvidersFailed", e.providersFailed)
	t.Run("LocalSubagent", e.localSubagent)
	t.Run("ErrorsAndDeclarations", e.errorsAndDeclarations)
	t.Run("SandboxDeclarationsAndReports", e.sandboxDeclarations)
	t.Run("Deltas", e.deltas)
	t.Run("ForkAndRewind", e.forkAndRewind)
}

// deltas: an OnDelta hook sees the answer as it is written; the text
// deltas joined are the returned message's text.
func (e *env) deltas(t *testing.T) {
	ctx := ctxT(t)
	cfg, _ := e.config(t, e.profile(t, "misc"))
	var text strings.Builder
	var seqs []int64
	s, err := sdk.Connect(ctx, cfg, sdk.WithHooks(sdk.Hooks{OnDelta: func(_ context.Context, d sdk.Delta) error {
		assert.NotEmpty(t, d.TurnID)
		seqs = append(seqs, d.Seq)
		switch d.Type {
		case sdk.DeltaSuperseded:
			text.Reset()
		case sdk.DeltaText:
			text.WriteString(d.Text)
		}
		return nil
	}}))
	require.NoError(t, err)
	closeSession(t, s)
	e.fake.Lane("misc").Enqueue(fakeprovider.Text("streamed to the hook, piece by piece").Streamed(6, 0))
	msg, err := s.Send(ctx, "go")
	require.NoError(t, err)
	assert.Equal(t, "streamed to the hook, piece by piece", msg.Text())
	assert.Equal(t, msg.Text(), text.String())
	assert.Len(t, seqs, 7, "a block start and six text pieces")
	assert.True(t, slices.IsSorted(seqs))
}

func (e *env) toolRoundTrip(t *testing.T) {
	ctx := ctxT(t)
	lane := e.fake.Lane("tools")
	cfg, keyID := e.config(t, e.profile(t, "tools", "get_time", "flaky"))
	var inputs []string
	var seen []sdk.EventType
	s, err := sdk.Connect(ctx, cfg,
		sdk.WithTool(sdk.Tool{
			Name: "get_time", Description: "Current time.",
			InputSchema: map[string]any{"type": "object", "properties": map[string]any{"tz": map[string]any{"type": "string"}}},
			Handler: func(_ context.Context, in json.RawMessage) (any, error) {
				inputs = append(inputs, string(in))
				return "12:00 UTC", nil
			},
		}),
		sdk.WithTool(sdk.Tool{Name: "flaky", Handler: func(context.Context, json.RawMessage) (any, error) {
			return nil, errors.New("backend down")
		}}),
		sdk.WithHooks(sdk.Hooks{OnEvent: func(_ context.Context, ev sdk.Event) error {
			seen = append(seen, ev.Type)
			return nil
		}}),
	)
	require.NoError(t, err)
	closeSession(t, s)
	assert.True(t, strings.HasPrefix(s.Profile.Name, "p-tools-"), s.Profile.Name)
	assert.Equal(t, "fake-model", s.Profile.Provider.Model)

	lane.Enqueue(
		fakeprovider.ToolUse("tu_time", "get_time", map[string]any{"tz": "UTC"}).WithText("Let me check."),
		fakeprovider.Text("It is noon."),
	)
	before := e.fake.RequestCount()
	reply, err := s.Send(ctx, "What time is it?")
	require.NoError(t, err)
	assert.Equal(t, "It is noon.", reply.Text())
	assert.Equal(t, []string{`{"tz":"UTC"}`}, inputs)
	assert.Contains(t, seen, sdk.EventProviderRequest)
	assert.Contains(t, seen, sdk.EventToolCall)
	assert.NotContains(t, seen, sdk.EventClientMessageSend, "own user turns are not echoed")

	reqs := e.fake.Requests()[before:]
	require.Len(t, reqs, 2)
	assert.ElementsMatch(t, []string{"get_time", "flaky"}, reqs[0].ToolNames())
	resume := lastMessage(reqs[1])
	assert.Equal(t, "user", resume["role"])
	blocks := resume["content"].([]any)
	require.Len(t, blocks, 1)
	tr := blocks[0].(map[string]any)
	assert.Equal(t, "tool_result", tr["type"])
	assert.Equal(t, "tu_time", tr["tool_use_id"])
	assert.Contains(t, fmt.Sprint(tr["content"]), "12:00 UTC")

	// Second turn, and a failing handler reaches the model as is_error.
	lane.Enqueue(fakeprovider.ToolUse("tu_flaky", "flaky", nil), fakeprovider.Text("The backend is down."))
	before = e.fake.RequestCount()
	reply, err = s.Send(ctx, "Try the flaky tool.")
	require.NoError(t, err)
	assert.Equal(t, "The backend is down.", reply.Text())
	reqs = e.fake.Requests()[before:]
	require.Len(t, reqs, 2)
	tr = lastMessage(reqs[1])["content"].([]any)[0].(map[string]any)
	assert.Equal(t, true, tr["is_error"])
	assert.Contains(t, fmt.Sprint(tr["content"]), "backend down")
	assert.Len(t, reqs[1].Messages(), 7, "history carries both turns")

	evs := allEvents(t, ctx, s, 200)
	var toolCalls, clientResults int
	for _, ev := range evs {
		assert.Equal(t, keyID, ev.ClientKeyID, "%s", ev.Type)
		switch ev.Type {
		case sdk.EventToolCall:
			var p sdk.ToolCallPayload
			require.NoError(t, ev.Decode(&p))
			assert.Equal(t, sdk.DispatchClient, p.Dispatch)
			toolCalls++
		case sdk.EventToolResult:
			var p sdk.ToolResultPayload
			require.NoError(t, ev.Decode(&p))
			if p.Dispatch == sdk.DispatchClient {
				clientResults++
			}
		}
	}
	assert.Equal(t, 2, toolCalls)
	assert.Equal(t, 2, clientResults)
	assert.Equal(t, evs[len(evs)-1].ID, s.LastEventID())
}

// signalTransport reports when a request's response headers arrived: the
// server has accepted the call (a queued sendMessage writes nothing more).
type signalTransport struct {
	base    http.RoundTripper
	arrived chan string
}

func (s signalTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := s.base.RoundTrip(r)
	if err == nil && strings.HasSuffix(r.URL.Path, "/rpc") {
		select {
		case s.arrived <- r.URL.Path:
		default:
		}
	}
	return resp, err
}

func (e *env) joinFIFO(t *testing.T) {
	ctx := ctxT(t)
	pid := e.profile(t, "fifo")
	cfgA, keyA := e.config(t, pid)
	cfgB, keyB := e.config(t, pid)
	a, err := sdk.Connect(ctx, cfgA)
	require.NoError(t, err)
	closeSession(t, a)

	arrived := make(chan string, 16)
	cfgB.HTTPClient = &http.Client{Transport: signalTransport{base: http.DefaultTransport, arrived: arrived}}
	b, err := sdk.Join(ctx, cfgB, a.ID)
	require.NoError(t, err)
	assert.NotEqual(t, a.Key(), b.Key(), "a join mints its own session key")
	for len(arrived) > 0 {
		<-arrived // registerDriver
	}
	drivers, err := a.Participants(ctx)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{keyA, keyB}, drivers)

	aInFlight := make(chan struct{})
	var calls atomic.Int32
	e.fake.Lane("fifo").Respond(func(r fakeprovider.Recorded) fakeprovider.Reply {
		if calls.Add(1) == 1 {
			close(aInFlight)
			return fakeprovider.Text("A done").UntilReleased()
		}
		return fakeprovider.Text("B done")
	})
	t.Cleanup(func() { e.fake.Lane("fifo").Respond(nil) })

	type res struct {
		text string
		err  error
	}
	aRes, bRes := make(chan res, 1), make(chan res, 1)
	go func() {
		m, err := a.Send(ctx, "Say hello from A.")
		if err != nil {
			aRes <- res{err: err}
			return
		}
		aRes <- res{text: m.Text()}
	}()
	<-aInFlight
	go func() {
		m, err := b.Send(ctx, "Say hello from B.")
		if err != nil {
			bRes <- res{err: err}
			return
		}
		bRes <- res{text: m.Text()}
	}()
	<-arrived // B's sendMessage is queued on the server
	select {
	case r := <-bRes:
		t.Fatalf("B finished while A's turn was in flight: %+v", r)
	default:
	}
	e.fake.Release()
	ra, rb := <-aRes, <-bRes
	require.NoError(t, ra.err)
	require.NoError(t, rb.err)
	assert.Equal(t, "A done", ra.text)
	assert.Equal(t, "B done", rb.text)

	// Both turns, strictly in order, each attributed to its driver.
	var order []string
	for _, ev := range allEvents(t, ctx, a, 200) {
		if ev.Type == sdk.EventClientMessageSend || ev.Type == sdk.EventServerMessageSend {
			who := map[string]string{keyA: "A", keyB: "B"}[ev.ClientKeyID]
			order = append(order, who+":"+string(ev.Type))
		}
	}
	assert.Equal(t, []string{"A:client.message.send", "A:server.message.send", "B:client.message.send", "B:server.message.send"}, order)
}

func (e *env) observerSubscribe(t *testing.T) {
	ctx := ctxT(t)
	pid := e.profile(t, "observe")
	cfgA, _ := e.config(t, pid)
	cfgB, keyB := e.config(t, pid)
	a, err := sdk.Connect(ctx, cfgA)
	require.NoError(t, err)
	closeSession(t, a)
	b, err := sdk.Join(ctx, cfgB, a.ID)
	require.NoError(t, err)

	// Subscribe from the newest persisted event: nothing after it can be
	// missed, however long the subscription takes to open.
	hist := allEvents(t, ctx, a, 200)
	require.NotEmpty(t, hist)
	observer, err := sdk.Attach(cfgA, a.ID, a.Key()) // a separate observer handle
	require.NoError(t, err)

	got := make(chan sdk.Event, 64)
	done := make(chan error, 1)
	go func() {
		defer close(got)
		for ev, err := range observer.Subscribe(ctx, sdk.SubscribeOptions{SinceEventID: hist[len(hist)-1].ID}) {
			if err != nil {
				done <- err
				return
			}
			got <- ev
		}
		done <- nil
	}()

	e.fake.Lane("observe").Enqueue(fakeprovider.Text("hello from B's turn"))
	_, err = b.Send(ctx, "B speaks")
	require.NoError(t, err)

	var seen []sdk.EventType
	for ev := range got {
		seen = append(seen, ev.Type)
		if ev.Type == sdk.EventServerMessageSend {
			assert.Equal(t, keyB, ev.ClientKeyID, "the observer sees B's turn attributed to B")
			var m sdk.Message
			require.NoError(t, ev.Decode(&m))
			assert.Equal(t, "hello from B's turn", m.Text())
			break
		}
	}
	assert.Contains(t, seen, sdk.EventProviderRequest)
	assert.Contains(t, seen, sdk.EventServerMessageSend)

	require.NoError(t, a.Unsubscribe(ctx))
	for range got { // drain until the iterator ends
	}
	select {
	case err := <-done:
		assert.NoError(t, err, "unsubscribe ends the sequence cleanly")
	case <-ctx.Done():
		t.Fatal("subscription did not end after unsubscribe")
	}
}

func (e *env) eventsPagination(t *testing.T) {
	ctx := ctxT(t)
	cfg, _ := e.config(t, e.profile(t, "pages"))
	s, err := sdk.Connect(ctx, cfg)
	require.NoError(t, err)
	closeSession(t, s)
	for i := range 3 {
		_, err := s.Send(ctx, fmt.Sprintf("message %d", i))
		require.NoError(t, err)
	}
	whole, err := s.EventsPage(ctx, sdk.EventsQuery{Limit: 200})
	require.NoError(t, err)
	assert.Empty(t, whole.NextCursor)
	require.Greater(t, len(whole.Items), 6)

	first, err := s.EventsPage(ctx, sdk.EventsQuery{Limit: 2})
	require.NoError(t, err)
	assert.Len(t, first.Items, 2)
	assert.NotEmpty(t, first.NextCursor)

	paged := allEvents(t, ctx, s, 2)
	ids := func(evs []sdk.Event) []string {
		var out []string
		for _, ev := range evs {
			out = append(out, ev.ID)
		}
		return out
	}
	assert.Equal(t, ids(whole.Items), ids(paged), "pages join up without gaps or repeats")
	assert.Equal(t, sdk.EventSessionOpen, paged[0].Type)
	for _, ev := range paged {
		assert.True(t, ev.Type.Known(), "%s", ev.Type)
		assert.False(t, ev.CreatedAt.IsZero())
	}
}

func (e *env) providersFailed(t *testing.T) {
	ctx := ctxT(t)
	lane := e.fake.Lane("down")
	lane.Respond(func(fakeprovider.Recorded) fakeprovider.Reply { return fakeprovider.Error(500, "provider exploded") })
	t.Cleanup(func() { lane.Respond(nil) })
	cfg, _ := e.config(t, e.profile(t, "down"))
	s, err := sdk.Connect(ctx, cfg)
	require.NoError(t, err)
	closeSession(t, s)

	_, err = s.Send(ctx, "hello?")
	var pf *sdk.ProvidersFailedError
	require.ErrorAs(t, err, &pf)
	assert.Contains(t, types(pf.Events), sdk.EventProviderResponse)
	assert.Contains(t, types(pf.Events), sdk.EventSessionError)
	require.NotNil(t, pf.Message)
	assert.NotEmpty(t, pf.Message.Text())

	_, err = s.Send(ctx, "still there?")
	assert.True(t, sdk.IsSessionClosed(err), "the session is in the error state: %v", err)
}

func (e *env) localSubagent(t *testing.T) {
	ctx := ctxT(t)
	lane := e.fake.Lane("subagent")
	cfg, _ := e.config(t, e.profile(t, "subagent", tools.LaunchSubagentName, tools.LocalSubagentStatusName))
	subs, err := tools.NewLocalSubagents(tools.Host{}, tools.SubagentDef{Harness: "cat", CommandTemplate: "cat; echo ' via '{model}"})
	require.NoError(t, err)
	s, err := sdk.Connect(ctx, cfg, subs.Option())
	require.NoError(t, err)
	closeSession(t, s)
	mark, err := s.EventsPage(ctx, sdk.EventsQuery{Limit: 200})
	require.NoError(t, err)

	lane.Enqueue(
		fakeprovider.ToolUse("tu_launch", tools.LaunchSubagentName, map[string]any{"harness": "cat", "model": "m1", "prompt": "diagnose it"}),
		fakeprovider.Text("Launched."),
	)
	before := e.fake.RequestCount()
	reply, err := s.Send(ctx, "Delegate the diagnosis.")
	require.NoError(t, err)
	assert.Equal(t, "Launched.", reply.Text())
	reqs := e.fake.Requests()[before:]
	require.Len(t, reqs, 2)
	assert.NotContains(t, reqs[0].ToolNames(), tools.LocalSubagentStatusName, "no status tool before a launch")

	// Wait for the subagent's completion report through the live stream.
	var lifecycle []sdk.EventType
	for ev, err := range s.Subscribe(ctx, sdk.SubscribeOptions{SinceEventID: mark.Items[len(mark.Items)-1].ID}) {
		require.NoError(t, err)
		if strings.HasPrefix(string(ev.Type), "session.subagent.") {
			lifecycle = append(lifecycle, ev.Type)
		}
		if ev.Type == sdk.EventSubagentCompleted || ev.Type == sdk.EventSubagentFailed {
			break
		}
	}
	assert.Equal(t, []sdk.EventType{sdk.EventSubagentStart, sdk.EventSubagentRunning, sdk.EventSubagentCompleted}, lifecycle)

	lane.Enqueue(fakeprovider.ToolUse("tu_status", tools.LocalSubagentStatusName, nil), fakeprovider.Text("It said: diagnose it."), fakeprovider.Text("ok"))
	before = e.fake.RequestCount()
	_, err = s.Send(ctx, "Check on it.")
	require.NoError(t, err)
	reqs = e.fake.Requests()[before:]
	require.Len(t, reqs, 2)
	assert.Contains(t, reqs[0].ToolNames(), tools.LocalSubagentStatusName, "advertised while tracked")
	result := fmt.Sprint(lastMessage(reqs[1])["content"])
	assert.Contains(t, result, "diagnose it via m1")
	assert.Contains(t, result, "completed")

	before = e.fake.RequestCount()
	_, err = s.Send(ctx, "Anything else?")
	require.NoError(t, err)
	assert.NotContains(t, e.fake.Requests()[before].ToolNames(), tools.LocalSubagentStatusName, "withdrawn after the result was read")
}

func (e *env) errorsAndDeclarations(t *testing.T) {
	ctx := ctxT(t)
	pid := e.profile(t, "misc", "get_time")
	cfg, _ := e.config(t, pid)
	h := func(context.Context, json.RawMessage) (any, error) { return "x", nil }

	_, err := sdk.Connect(ctx, cfg, sdk.WithTool(sdk.Tool{Name: "not_allowed", Handler: h}))
	assert.True(t, sdk.IsToolNotAllowed(err), "%v", err)

	bad := cfg
	bad.ClientKey = "bae_not_a_key"
	_, err = sdk.Connect(ctx, bad)
	assert.True(t, sdk.IsUnauthorized(err), "%v", err)

	s, err := sdk.Connect(ctx, cfg, sdk.WithTool(sdk.Tool{Name: "get_time", Handler: h}))
	require.NoError(t, err)

	other, _ := e.config(t, e.profile(t, "misc"))
	_, err = sdk.Join(ctx, other, s.ID)
	assert.True(t, sdk.IsProfileMismatch(err), "%v", err)

	err = s.UpdateClientTools(ctx, []sdk.ToolSpec{{Name: "not_allowed"}})
	assert.True(t, sdk.IsToolNotAllowed(err), "%v", err)
	assert.Equal(t, []string{"get_time"}, names(s.ClientTools()), "a refused update changes nothing")

	_, err = s.ExecRemoteSandbox(ctx, "true")
	assert.True(t, sdk.IsSandboxNotRunning(err), "%v", err)

	require.NoError(t, s.Close(ctx))
	_, err = s.Send(ctx, "after close")
	assert.True(t, sdk.IsUnauthorized(err) || sdk.IsSessionClosed(err), "%v", err)
	_, err = sdk.Join(ctx, cfg, s.ID)
	assert.True(t, sdk.IsSessionClosed(err), "%v", err)
}

func names(specs []sdk.ToolSpec) []string {
	var out []string
	for _, s := range specs {
		out = append(out, s.Name)
	}
	slices.Sort(out)
	return out
}

func (e *env) sandboxDeclarations(t *testing.T) {
	ctx := ctxT(t)
	cfg, _ := e.config(t, e.profile(t, "misc"))
	remote, err := tools.RemoteSubagents("bae-subagents:latest", tools.SubagentDef{Harness: "claude", CommandTemplate: "claude --model {model} --print"})
	require.NoError(t, err)
	s, err := sdk.Connect(ctx, cfg, sdk.WithSandboxTool(tools.RemoteShellCommandSpec()), sdk.WithSubagentTool(remote))
	require.NoError(t, err)
	closeSession(t, s)

	page, err := s.EventsPage(ctx, sdk.EventsQuery{})
	require.NoError(t, err)
	require.Equal(t, sdk.EventSessionOpen, page.Items[0].Type)
	var open struct {
		ClientVersion string   `json:"client_version"`
		Tools         []string `json:"tools"`
		SandboxTools  []string `json:"sandbox_tools"`
		SubagentTools []string `json:"subagent_tools"`
	}
	require.NoError(t, page.Items[0].Decode(&open))
	assert.Equal(t, "sdk-itest/1", open.ClientVersion)
	assert.Empty(t, open.Tools)
	assert.Equal(t, []string{"run_shell_command"}, open.SandboxTools)
	assert.Equal(t, []string{"launch_subagent"}, open.SubagentTools)

	// A local sandbox reports its lifecycle into the shared log.
	require.NoError(t, s.ReportLocalSandbox(ctx, sdk.LocalSandboxReport{State: sdk.SandboxRunning, Image: "alpine:3", ContainerID: "c1"}))
	require.NoError(t, s.ReportLocalSandbox(ctx, sdk.LocalSandboxReport{State: sdk.SandboxFailed, Image: "alpine:3", ContainerID: "c1", Detail: "oom"}))
	evs := allEvents(t, ctx, s, 200)
	last := evs[len(evs)-1]
	assert.Equal(t, sdk.EventSessionSandboxError, last.Type)
	assert.JSONEq(t, `{"dispatch":"local","image":"alpine:3","unsandboxed":false,"container_id":"c1","detail":"oom"}`, string(last.Payload))
}

// forkAndRewind: Fork returns a registered driver on a session that starts
// where the source is; Rewind takes a turn out of the next request, and
// its refusals are typed.
func (e *env) forkAndRewind(t *testing.T) {
	ctx := ctxT(t)
	cfg, _ := e.config(t, e.profile(t, "misc"))
	s, err := sdk.Connect(ctx, cfg)
	require.NoError(t, err)
	lane := e.fake.Lane("misc")
	var firstEvent string
	for i, m := range []string{"alpha", "beta"} {
		lane.Enqueue(fakeprovider.Text("answer " + m))
		_, err := s.Send(ctx, m)
		require.NoError(t, err, "turn %d", i)
		if i == 0 {
			firstEvent = s.LastEventID()
		}
	}

	f, at, err := s.Fork(ctx, "")
	require.NoError(t, err)
	assert.Equal(t, s.ID, at.SessionID)
	assert.False(t, at.MovedToTurnStart)
	lane.Enqueue(fakeprovider.Text("on the fork"))
	n := len(e.fake.Requests())
	_, err = f.Send(ctx, "gamma")
	require.NoError(t, err)
	assert.Len(t, e.fake.Requests()[n].Messages(), 5)

	_, _, err = s.Fork(ctx, "evt_nope")
	assert.True(t, sdk.IsInvalidParams(err), "%v", err)

	// Rewind to after the first turn's last event: the second turn goes.
	var before string
	passed := false
	for ev, err := range s.Events(ctx, sdk.EventsQuery{}) {
		require.NoError(t, err)
		if passed && before == "" && ev.Type == sdk.EventClientMessageSend {
			before = ev.ID
		}
		passed = passed || ev.ID == firstEvent
	}
	require.NotEmpty(t, before)
	res, err := s.Rewind(ctx, sdk.RewindPoint{BeforeEventID: before})
	require.NoError(t, err)
	require.Len(t, res.TurnIDs, 1)
	assert.Empty(t, res.ToolCalls)
	assert.NotEmpty(t, res.EventID)
	lane.Enqueue(fakeprovider.Text("after the rewind"))
	n = len(e.fake.Requests())
	_, err = s.Send(ctx, "delta")
	require.NoError(t, err)
	assert.Len(t, e.fake.Requests()[n].Messages(), 3, "alpha, its answer, delta")

	// The same point again takes the turn sent since; then nothing is left.
	again, err := s.Rewind(ctx, sdk.RewindPoint{TurnID: res.TurnIDs[0]})
	require.NoError(t, err)
	assert.Len(t, again.TurnIDs, 1)
	assert.NotEqual(t, res.TurnIDs[0], again.TurnIDs[0])
	_, err = s.Rewind(ctx, sdk.RewindPoint{TurnID: res.TurnIDs[0]})
	assert.True(t, sdk.IsNothingToRewind(err), "%v", err)
	_, err = f.Rewind(ctx, sdk.RewindPoint{TurnID: res.TurnIDs[0]})
	assert.True(t, sdk.IsRewindBeforeFork(err), "%v", err)
	_, err = s.Rewind(ctx, sdk.RewindPoint{TurnID: "trn_nope"})
	assert.True(t, sdk.IsInvalidParams(err), "%v", err)
}
