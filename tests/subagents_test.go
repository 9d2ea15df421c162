package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/sandbox"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/sandboxtest"
	"github.com/bae-go/bae-go/internal/testing/testenv"
	"github.com/bae-go/bae-go/store"
)

// busyboxImage builds a local image of t's own (no registry needed),
// removed at test end with every container started from it, or skips when
// no Docker engine is reachable.
func busyboxImage(t *testing.T) string {
	t.Helper()
	return sandboxtest.Image(t, "bae-test-busybox")
}

func subagentDecl(image string) map[string]any {
	return map[string]any{
		"name":         "launch_subagent",
		"description":  "Launch a CLI subagent",
		"input_schema": map[string]any{"type": "object", "properties": map[string]any{"harness": map[string]any{"type": "string"}, "model": map[string]any{"type": "string"}, "prompt": map[string]any{"type": "string"}}, "required": []string{"harness", "model", "prompt"}},
		"image":        image,
		"subagents": []any{
			map[string]any{"harness": "echo", "command_template": "cat; echo model={model}", "prompt_via": "stdin", "timeout_secs": 30},
			map[string]any{"harness": "fail", "command_template": "echo bad >&2; exit 3", "prompt_via": "stdin"},
			map[string]any{"harness": "slow", "command_template": "sleep 30", "prompt_via": "stdin", "timeout_secs": 1},
			map[string]any{"harness": "forever", "command_template": "sleep 300", "prompt_via": "stdin"},
		},
	}
}

// openSubagents lets e's profile (allowed_tools get_time) use image and
// opens a session declaring subagentDecl(image), registered as a driver.
func (e *env) openSubagents(image string) *driver {
	e.t.Helper()
	t := e.t
	r := e.srv.Admin(t, http.MethodPut, "/admin/v1/profiles/"+e.pid, map[string]any{"name": "main", "primary_provider": "primary", "allowed_tools": []string{"get_time"}, "available_sandboxes": []string{image}})
	require.Equal(t, 200, r.Status, string(r.Raw))
	keyID, key := e.srv.Key(t, e.pid)
	sid, sk := e.srv.Open(t, key, map[string]any{"subagent_tools": []any{subagentDecl(image)}})
	d := &driver{e: e, keyID: keyID, key: key, sid: sid, sk: sk}
	d.register()
	return d
}

// waitEvent reads the observer stream until an event of typ arrives.
func waitEvent(t *testing.T, st *testenv.Stream, typ string) map[string]any {
	t.Helper()
	for {
		m := st.Next(30 * time.Second)
		require.NotNil(t, m, "waiting for %s", typ)
		ev := m["params"].(map[string]any)
		if ev["event_type"] == typ {
			return ev
		}
	}
}

func statusEntries(t *testing.T, toolResult map[string]any) []any {
	t.Helper()
	text := payload(toolResult)["content"].([]any)[0].(map[string]any)["text"].(string)
	var body map[string]any
	require.NoError(t, json.Unmarshal([]byte(text), &body))
	return body["subagents"].([]any)
}

func TestRemoteSubagentLifecycle(t *testing.T) {
	image := busyboxImage(t)
	e := newEnv(t, envOpts{})
	d := e.openSubagents(image)
	sid, sk := d.sid, d.sk
	objs := e.srv.Call(t, sid, sk, "session.startRemoteSandbox", map[string]any{"image": image})
	require.NotNil(t, testenv.Terminal(t, objs)["result"], "%v", objs)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	obs := e.srv.RPCStream(t, ctx, sid, sk, map[string]any{"jsonrpc": "2.0", "id": 99, "method": "session.subscribe", "params": map[string]any{}})
	defer obs.Close()

	// Turn 1 launches; the turn does not wait for the CLI.
	e.fake.Lane("primary").Enqueue(
		fakeprovider.ToolUse("tu_l", "launch_subagent", map[string]any{"harness": "echo", "model": "m1", "prompt": "hello sub"}),
		fakeprovider.Text("launched"),
	)
	_, term := d.send("delegate it")
	evs := resultEvents(term)
	assert.Equal(t, []string{"client.message.send", "provider.request", "provider.response", "tool.call",
		"session.subagent.start", "session.subagent.running", "tool.result",
		"provider.request", "provider.response", "server.message.send"}, types(evs))
	assert.Equal(t, "subagent", payload(evs[3])["dispatch"])
	start := payload(evs[4])
	sbaID := start["subagent_id"].(string)
	assert.Regexp(t, `^sba_[0-9a-f]{32}$`, sbaID)
	assert.Equal(t, map[string]any{"dispatch": "remote", "subagent_id": sbaID, "harness": "echo", "model": "m1", "detail": nil}, start)
	var ack map[string]any
	require.NoError(t, json.Unmarshal([]byte(payload(evs[6])["content"].([]any)[0].(map[string]any)["text"].(string)), &ack))
	assert.Equal(t, map[string]any{"subagent_id": sbaID, "harness": "echo", "model": "m1", "status": "started"}, ack)
	assert.Equal(t, "launched", firstText(message(term)))

	done := waitEvent(t, obs, "session.subagent.completed")
	assert.Equal(t, map[string]any{"dispatch": "remote", "subagent_id": sbaID, "harness": "echo", "model": "m1", "detail": nil, "exit_code": 0.0}, payload(done))

	// Turn 2: the status tool is advertised and reports the output once.
	e.fake.Lane("primary").Enqueue(fakeprovider.ToolUse("tu_s", "remote_subagent_status", map[string]any{}), fakeprovider.Text("got it"))
	_, term = d.send("how did it go?")
	reqs := e.fake.Requests()
	assert.Contains(t, reqs[len(reqs)-2].ToolNames(), "remote_subagent_status")
	var statusResult map[string]any
	for _, ev := range resultEvents(term) {
		if ev["event_type"] == "tool.result" {
			statusResult = ev
		}
	}
	require.NotNil(t, statusResult)
	entries := statusEntries(t, statusResult)
	require.Len(t, entries, 1)
	entry := entries[0].(map[string]any)
	assert.Equal(t, "completed", entry["status"])
	assert.Equal(t, "hello submodel=m1\n", entry["stdout"])
	assert.EqualValues(t, 0, entry["exit_code"])

	// Turn 3: acknowledged entries are gone, and so is the status tool.
	d.send("anything else?")
	reqs = e.fake.Requests()
	assert.NotContains(t, reqs[len(reqs)-1].ToolNames(), "remote_subagent_status")

	// Failure, timeout and explicit cancellation.
	e.fake.Lane("primary").Enqueue(
		fakeprovider.ToolUse("tu_f", "launch_subagent", map[string]any{"harness": "fail", "model": "m", "prompt": "p"}).
			WithToolUse("tu_t", "launch_subagent", map[string]any{"harness": "slow", "model": "m", "prompt": "p"}).
			WithToolUse("tu_c", "launch_subagent", map[string]any{"harness": "forever", "model": "m", "prompt": "p"}).
			WithToolUse("tu_x", "launch_subagent", map[string]any{"harness": "nope", "model": "m", "prompt": "p"}),
		fakeprovider.Text("three launched"),
	)
	_, term = d.send("launch more")
	var launched []string
	var unknownHarness map[string]any
	for _, ev := range resultEvents(term) {
		switch ev["event_type"] {
		case "session.subagent.start":
			launched = append(launched, payload(ev)["subagent_id"].(string))
		case "tool.result":
			if payload(ev)["tool_use_id"] == "tu_x" {
				unknownHarness = payload(ev)
			}
		}
	}
	require.Len(t, launched, 3)
	require.NotNil(t, unknownHarness)
	assert.Equal(t, true, unknownHarness["is_error"])

	objs = e.srv.Call(t, sid, sk, "session.cancelSubagent", map[string]any{"subagent_id": launched[2]})
	assert.Equal(t, map[string]any{"cancelled": true, "subagent_id": launched[2], "was_running": true}, testenv.Terminal(t, objs)["result"])
	objs = e.srv.Call(t, sid, sk, "session.cancelSubagent", map[string]any{"subagent_id": launched[2]})
	assert.Equal(t, map[string]any{"cancelled": true, "subagent_id": launched[2], "was_running": false}, testenv.Terminal(t, objs)["result"])
	objs = e.srv.Call(t, sid, sk, "session.cancelSubagent", map[string]any{"subagent_id": "sba_unknown"})
	assert.EqualValues(t, -32014, testenv.Terminal(t, objs)["error"].(map[string]any)["code"])

	terminal := map[string]map[string]any{}
	for len(terminal) < 3 {
		m := obs.Next(30 * time.Second)
		require.NotNil(t, m, "terminal events arrive: have %v", terminal)
		ev := m["params"].(map[string]any)
		switch ev["event_type"] {
		case "session.subagent.failed", "session.subagent.cancelled", "session.subagent.completed":
			terminal[payload(ev)["subagent_id"].(string)] = ev
		}
	}
	failed := payload(terminal[launched[0]])
	assert.Equal(t, "session.subagent.failed", terminal[launched[0]]["event_type"])
	assert.Equal(t, "nonzero_exit", failed["reason"])
	assert.EqualValues(t, 3, failed["exit_code"])
	timedOut := payload(terminal[launched[1]])
	assert.Equal(t, "timeout", timedOut["reason"])
	cancelled := payload(terminal[launched[2]])
	assert.Equal(t, "session.subagent.cancelled", terminal[launched[2]]["event_type"])
	assert.Equal(t, "explicit", cancelled["reason"])

	// Closing the session stops the sandbox; nothing is left running.
	r := e.srv.Client(t, http.MethodDelete, "/api/v1/sessions/"+sid, sk, nil)
	require.Equal(t, 200, r.Status)
	drv, err := sandbox.NewDockerDriver(slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	left, err := drv.List(context.Background(), fmt.Sprintf("%s=%s", sandbox.LabelSession, sid))
	require.NoError(t, err)
	assert.Empty(t, left)
}

// TestRemoteSubagentInterruptedByRestartRunsOnce stops the server while a
// subagent's CLI runs in the sandbox: the CLI goes on in the container, and
// the next server's retry attaches to it and records its outcome instead of
// starting the CLI a second time (or giving it up as failed).
func TestRemoteSubagentInterruptedByRestartRunsOnce(t *testing.T) {
	rs := startSandboxRestart(t, func(image string) map[string]any {
		decl := subagentDecl(image)
		decl["subagents"] = []any{map[string]any{"harness": "count", "prompt_via": "stdin", "timeout_secs": 120,
			"command_template": "echo run >>/tmp/sa_counter; until [ -e /tmp/release ]; do sleep 0.1; done; cat; wc -l </tmp/sa_counter"}}
		return map[string]any{"subagent_tools": []any{decl}}
	})
	drv, fake, opts, a, sid, sk, sbID := rs.drv, rs.fake, rs.opts, rs.a, rs.sid, rs.sk, rs.sbID
	fake.Enqueue(fakeprovider.ToolUse("tu_l", "launch_subagent", map[string]any{"harness": "count", "model": "m", "prompt": "the prompt\n"}), fakeprovider.Text("launched"))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	term := testenv.Terminal(t, a.RPC(t, sid, sk, sendBody("delegate")))
	var sbaID string
	for _, ev := range resultEvents(term) {
		if ev["event_type"] == "session.subagent.start" {
			sbaID = payload(ev)["subagent_id"].(string)
		}
	}
	require.NotEmpty(t, sbaID)
	require.Eventually(t, func() bool {
		r, err := drv.Exec(ctx, sbID, "cat /tmp/sa_counter 2>/dev/null", nil)
		return err == nil && r.Stdout == "run\n"
	}, 30*time.Second, 50*time.Millisecond, "the CLI started")
	a.Stop() // mid run
	_, err := drv.Exec(ctx, sbID, "touch /tmp/release", nil)
	require.NoError(t, err)

	b := testenv.Start(t, opts)
	var sa store.Subagent
	require.Eventually(t, func() bool {
		sa, err = b.Parts.Store.GetSubagent(ctx, sid, sbaID)
		return err == nil && sa.Status != store.SubagentRunning
	}, time.Minute, 100*time.Millisecond, "the retry records the outcome")
	require.Equal(t, store.SubagentCompleted, sa.Status, "reason %v detail %v", deref(sa.Reason), deref(sa.Detail))
	require.NotNil(t, sa.Stdout)
	assert.Equal(t, "the prompt\n1\n", *sa.Stdout, "the first run's output, with its stdin")
	counter, err := drv.Exec(ctx, sbID, "cat /tmp/sa_counter", nil)
	require.NoError(t, err)
	assert.Equal(t, "run\n", counter.Stdout, "the CLI ran exactly once")

	r := b.Client(t, http.MethodDelete, "/api/v1/sessions/"+sid, sk, nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
}

// TestRemoteSubagentCancelKillsTheCLI: an explicit cancel stops the CLI's
// processes, not only the bookkeeping.
func TestRemoteSubagentCancelKillsTheCLI(t *testing.T) {
	image := busyboxImage(t)
	e := newEnv(t, envOpts{})
	r := e.srv.Admin(t, http.MethodPut, "/admin/v1/profiles/"+e.pid, map[string]any{"name": "main", "primary_provider": "primary", "available_sandboxes": []string{image}})
	require.Equal(t, 200, r.Status, string(r.Raw))
	keyID, key := e.srv.Key(t, e.pid)
	sid, sk := e.srv.Open(t, key, map[string]any{"subagent_tools": []any{subagentDecl(image)}})
	d := &driver{e: e, keyID: keyID, key: key, sid: sid, sk: sk}
	d.reapOnCleanup()
	d.register()
	sbID := result(t, d.call("session.startRemoteSandbox", map[string]any{"image": image}))["sandbox_id"].(string)
	e.fake.Lane("primary").Enqueue(fakeprovider.ToolUse("tu_c", "launch_subagent", map[string]any{"harness": "forever", "model": "m", "prompt": "p"}), fakeprovider.Text("launched"))
	_, term := d.send("launch")
	var sbaID string
	for _, ev := range resultEvents(term) {
		if ev["event_type"] == "session.subagent.start" {
			sbaID = payload(ev)["subagent_id"].(string)
		}
	}
	require.NotEmpty(t, sbaID)
	drv := e.srv.Parts.Services.Driver()
	sleeping := func() bool {
		res, err := drv.Exec(context.Background(), sbID, "ps -o args | grep -c '^sleep 300'", nil)
		require.NoError(t, err)
		return strings.TrimSpace(res.Stdout) == "1"
	}
	require.Eventually(t, sleeping, 30*time.Second, 50*time.Millisecond)
	objs := e.srv.Call(t, sid, sk, "session.cancelSubagent", map[string]any{"subagent_id": sbaID})
	require.Equal(t, true, testenv.Terminal(t, objs)["result"].(map[string]any)["was_running"])
	require.Eventually(t, func() bool { return !sleeping() }, 30*time.Second, 100*time.Millisecond, "the CLI was killed")
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// TestRemoteSubagentTemplateInjections: a declaration whose placeholder sits
// inside quotes is refused at open, and a model name or prompt chosen by the
// model that would inject a command or an option never reaches the
// sandbox's shell; a well-formed launch still runs there.
func TestRemoteSubagentTemplateInjections(t *testing.T) {
	image := busyboxImage(t)
	e := newEnv(t, envOpts{})
	r := e.srv.Admin(t, http.MethodPut, "/admin/v1/profiles/"+e.pid, map[string]any{"name": "main", "primary_provider": "primary", "available_sandboxes": []string{image}})
	require.Equal(t, 200, r.Status, string(r.Raw))
	keyID, key := e.srv.Key(t, e.pid)

	for tpl, via := range map[string]string{`echo "{model}"`: "stdin", `cli -p '{prompt}'`: "arg", "cli {prompt} {prompt}": "arg"} {
		decl := subagentDecl(image)
		decl["subagents"] = []any{map[string]any{"harness": "q", "command_template": tpl, "prompt_via": via}}
		r := e.srv.Client(t, http.MethodPost, "/api/v1/sessions", key, map[string]any{"subagent_tools": []any{decl}})
		assert.Equal(t, http.StatusUnprocessableEntity, r.Status, tpl)
		assert.Equal(t, "invalid_subagent_tools", r.Body["type"], tpl)
		assert.Contains(t, r.Body["detail"], `harness "q"`, tpl)
	}

	decl := subagentDecl(image)
	decl["subagents"] = []any{
		map[string]any{"harness": "argv", "command_template": "printf %s {model} {prompt}", "prompt_via": "arg"},
		map[string]any{"harness": "dashes", "command_template": "printf %s {model} -- {prompt}", "prompt_via": "arg"},
	}
	sid, sk := e.srv.Open(t, key, map[string]any{"subagent_tools": []any{decl}})
	d := &driver{e: e, keyID: keyID, key: key, sid: sid, sk: sk}
	d.register()
	sbID := result(t, d.call("session.startRemoteSandbox", map[string]any{"image": image}))["sandbox_id"].(string)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	obs := e.srv.RPCStream(t, ctx, sid, sk, map[string]any{"jsonrpc": "2.0", "id": 99, "method": "session.subscribe", "params": map[string]any{}})
	defer obs.Close()

	attacks := map[string]map[string]any{
		"tu_semi":  {"harness": "argv", "model": "m; touch /tmp/pwned", "prompt": "p"},
		"tu_subst": {"harness": "argv", "model": "$(touch /tmp/pwned)", "prompt": "p"},
		"tu_quote": {"harness": "argv", "model": "m'; touch /tmp/pwned; '", "prompt": "p"},
		"tu_opt":   {"harness": "argv", "model": "m", "prompt": "-o/tmp/pwned"},
	}
	step := fakeprovider.ToolUse("tu_semi", "launch_subagent", attacks["tu_semi"])
	for _, id := range []string{"tu_subst", "tu_quote", "tu_opt"} {
		step = step.WithToolUse(id, "launch_subagent", attacks[id])
	}
	e.fake.Lane("primary").Enqueue(step, fakeprovider.Text("refused"))
	_, term := d.send("try it")
	refusals := map[string]string{}
	for _, ev := range resultEvents(term) {
		assert.NotEqual(t, "session.subagent.start", ev["event_type"], "nothing is launched")
		if ev["event_type"] == "tool.result" {
			p := payload(ev)
			assert.Equal(t, true, p["is_error"])
			refusals[p["tool_use_id"].(string)] = p["content"].([]any)[0].(map[string]any)["text"].(string)
		}
	}
	require.Len(t, refusals, 4)
	for _, id := range []string{"tu_semi", "tu_subst", "tu_quote"} {
		assert.Contains(t, refusals[id], "is not a model name", id)
	}
	assert.Contains(t, refusals["tu_opt"], `begins with \"-\"`)

	e.fake.Lane("primary").Enqueue(
		fakeprovider.ToolUse("tu_ok", "launch_subagent", map[string]any{"harness": "dashes", "model": "qwen2.5-coder:7b", "prompt": "- a list item"}),
		fakeprovider.Text("launched"))
	d.send("now properly")
	done := waitEvent(t, obs, "session.subagent.completed")
	sbaID := payload(done)["subagent_id"].(string)
	sa, err := e.srv.Parts.Store.GetSubagent(context.Background(), sid, sbaID)
	require.NoError(t, err)
	assert.Equal(t, "qwen2.5-coder:7b--- a list item", deref(sa.Stdout), "after --, a prompt may begin with -")

	res, err := e.srv.Parts.Services.Driver().Exec(context.Background(), sbID, "test -e /tmp/pwned; echo $?", nil)
	require.NoError(t, err)
	assert.Equal(t, "1\n", res.Stdout, "no attack ran in the sandbox")
}

// toolNamesOf lists the names in a provider.request event's "tools".
func toolNamesOf(t *testing.T, ev map[string]any) []string {
	t.Helper()
	names := []string{}
	tools, ok := payload(ev)["tools"].([]any)
	require.True(t, ok, "provider.request has a tools array: %v", ev)
	for _, tl := range tools {
		names = append(names, tl.(map[string]any)["name"].(string))
	}
	return names
}

// TestRemoteSubagentStatusToolLifecycle follows remote_subagent_status
// through a launch and its acknowledgment, request by request, both in the
// event log's provider.request events and in what the provider received:
// hidden before any launch, offered once a launch exists, and gone from the
// very request that follows the tool_result reading the terminal status.
func TestRemoteSubagentStatusToolLifecycle(t *testing.T) {
	image := busyboxImage(t)
	e := newEnv(t, envOpts{})
	d := e.openSubagents(image)
	sid, sk := d.sid, d.sk
	objs := e.srv.Call(t, sid, sk, "session.startRemoteSandbox", map[string]any{"image": image})
	require.NotNil(t, testenv.Terminal(t, objs)["result"], "%v", objs)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	obs := e.srv.RPCStream(t, ctx, sid, sk, map[string]any{"jsonrpc": "2.0", "id": 99, "method": "session.subscribe", "params": map[string]any{}})
	defer obs.Close()

	// streamed holds what the subscription delivered, by event id.
	streamed := map[string]map[string]any{}
	streamedUntil := func(id string) map[string]any {
		t.Helper()
		for streamed[id] == nil {
			m := obs.Next(30 * time.Second)
			require.NotNil(t, m, "waiting for event %s on the subscription", id)
			ev := m["params"].(map[string]any)
			streamed[ev["id"].(string)] = ev
		}
		return streamed[id]
	}
	waitStreamed := func(typ string) {
		t.Helper()
		for {
			for _, ev := range streamed {
				if ev["event_type"] == typ {
					return
				}
			}
			m := obs.Next(30 * time.Second)
			require.NotNil(t, m, "waiting for %s", typ)
			ev := m["params"].(map[string]any)
			streamed[ev["id"].(string)] = ev
		}
	}

	const status = "remote_subagent_status"
	// turn sends one message and returns, for each provider request it
	// made, the tool names the provider received, after checking that the
	// turn's provider.request events (in the answer and in the stored log)
	// show exactly those tools and messages.
	turn := func(text string) [][]string {
		t.Helper()
		before := len(e.fake.Requests())
		_, term := d.send(text)
		got := e.fake.Requests()[before:]
		var logged []map[string]any
		for _, ev := range resultEvents(term) {
			if ev["event_type"] == "provider.request" {
				logged = append(logged, ev)
			}
		}
		require.Len(t, logged, len(got), "one provider.request per request the provider received")
		stored := map[string]map[string]any{}
		for _, ev := range d.allEvents() {
			stored[ev["id"].(string)] = ev
		}
		var names [][]string
		for i, rec := range got {
			names = append(names, rec.ToolNames())
			assert.Equal(t, rec.ToolNames(), toolNamesOf(t, logged[i]), "request %d of %q: the answer's event shows the tools sent", i, text)
			// The prompt-cache breakpoint on the last tool is transport, like
			// "stream": the event records the canonical tools.
			assert.Equal(t, fakeprovider.WithoutCacheControl(rec.Body["tools"]), payload(logged[i])["tools"], "request %d of %q: tools as sent", i, text)
			assert.Len(t, payload(logged[i])["messages"], len(rec.Messages()), "request %d of %q: messages as sent", i, text)
			log := stored[logged[i]["id"].(string)]
			require.NotNil(t, log, "the answer's event is in the log")
			assert.Equal(t, payload(logged[i]), payload(log), "request %d of %q: the stored event reads the same", i, text)
			assert.Equal(t, payload(logged[i]), payload(streamedUntil(logged[i]["id"].(string))), "request %d of %q: the subscription shows the same", i, text)
		}
		return names
	}

	// Turn 1: no launch yet, so the first request hides the tool; the
	// request after the launch's tool_result offers it.
	e.fake.Lane("primary").Enqueue(
		fakeprovider.ToolUse("tu_l", "launch_subagent", map[string]any{"harness": "echo", "model": "m1", "prompt": "hi"}),
		fakeprovider.Text("launched"),
	)
	names := turn("delegate it")
	require.Len(t, names, 2)
	assert.NotContains(t, names[0], status, "hidden before any launch")
	assert.Contains(t, names[0], "launch_subagent")
	assert.Contains(t, names[1], status, "offered once a launch exists")
	waitStreamed("session.subagent.completed")

	// Turn 2: offered while the terminal status is unread; reading it
	// acknowledges it, and the request right after the tool_result no
	// longer offers the tool.
	e.fake.Lane("primary").Enqueue(fakeprovider.ToolUse("tu_s", status, map[string]any{}), fakeprovider.Text("got it"))
	names = turn("how did it go?")
	require.Len(t, names, 2)
	assert.Contains(t, names[0], status)
	assert.NotContains(t, names[1], status, "evicted in the request after the acknowledging tool_result")

	// Turn 3: still gone.
	names = turn("anything else?")
	require.Len(t, names, 1)
	assert.NotContains(t, names[0], status)
}

// TestSubagentStatusSurvivesAFailedResultStore: the status tool's eviction
// of the terminal statuses it reports and the storing of its tool_result
// are one transaction. The first store of that tool_result fails (a
// trigger raises, as a crash between the two steps would leave it); the
// retried call must still report the completed subagent, not an empty list.
func TestSubagentStatusSurvivesAFailedResultStore(t *testing.T) {
	const image = "bae-test-unused:latest" // no sandbox runs: the row is made below
	e := newEnv(t, envOpts{})
	d := e.openSubagents(image)
	sid, keyID := d.sid, d.keyID

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, e.srv.DatabaseURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	// A subagent that completed and whose status nobody has read yet.
	_, err = conn.Exec(ctx, `INSERT INTO subagents (id, session_id, client_key_id, harness, model, status, sandbox_id, command, timeout_secs, exit_code, stdout, finished_at)
		VALUES ('sba_done', $1, $2, 'echo', 'm1', 'completed', 'sbx_gone', 'cat', 30, 0, 'all done', now())`, sid, keyID)
	require.NoError(t, err)
	// The first tool.result of the status call fails to store (a sequence
	// counts outside the transaction the raise rolls back).
	_, err = conn.Exec(ctx, `CREATE SEQUENCE status_result_tries;
		CREATE FUNCTION fail_first_status_result() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.event_type = 'tool.result' AND NEW.payload::jsonb->>'tool_use_id' = 'tu_s' AND nextval('status_result_tries') = 1 THEN
				RAISE EXCEPTION 'injected: the worker died before the tool_result was stored';
			END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER fail_first_status_result BEFORE INSERT ON session_events
			FOR EACH ROW EXECUTE FUNCTION fail_first_status_result();`)
	require.NoError(t, err)

	e.fake.Lane("primary").Enqueue(fakeprovider.ToolUse("tu_s", "remote_subagent_status", map[string]any{}), fakeprovider.Text("got it"))
	_, term := d.send("how did it go?")
	var tries int
	require.NoError(t, conn.QueryRow(ctx, `SELECT last_value FROM status_result_tries`).Scan(&tries))
	require.GreaterOrEqual(t, tries, 2, "the first store failed and the call was retried")
	var statusResult map[string]any
	for _, ev := range resultEvents(term) {
		if ev["event_type"] == "tool.result" {
			statusResult = ev
		}
	}
	require.NotNil(t, statusResult, "%v", term)
	entries := statusEntries(t, statusResult)
	require.Len(t, entries, 1, "the terminal status is reported by the result that was stored")
	entry := entries[0].(map[string]any)
	assert.Equal(t, "sba_done", entry["subagent_id"])
	assert.Equal(t, "completed", entry["status"])
	assert.Equal(t, "all done", entry["stdout"])
	var evicted bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT evicted_at IS NOT NULL FROM subagents WHERE id = 'sba_done'`).Scan(&evicted))
	assert.True(t, evicted, "reported, so acknowledged")
}
