package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/fakeprovider"
	"github.com/bae-go/bae-go/internal/ids"
	"github.com/bae-go/bae-go/internal/sandbox"
	"github.com/bae-go/bae-go/internal/testenv"
)

// busyboxImage builds a local image for t (no registry needed), or skips
// when no Docker engine is reachable.
func busyboxImage(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := sandbox.EngineAvailable(ctx); err != nil {
		t.Skipf("docker engine not reachable: %v", err)
	}
	tag := "bae-test-busybox:" + ids.New("")[:12]
	require.NoError(t, sandbox.BuildBusyboxImage(ctx, tag))
	t.Cleanup(func() { _ = sandbox.RemoveImage(context.Background(), tag) })
	return tag
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
	r := e.srv.Admin(t, http.MethodPut, "/admin/v1/profiles/"+e.pid, map[string]any{"name": "main", "primary_provider": "primary", "allowed_tools": []string{"get_time"}, "available_sandboxes": []string{image}})
	require.Equal(t, 200, r.Status, string(r.Raw))
	keyID, key := e.srv.Key(t, e.pid)
	sid, sk := e.srv.Open(t, key, map[string]any{"subagent_tools": []any{subagentDecl(image)}})
	d := &driver{e: e, keyID: keyID, key: key, sid: sid, sk: sk}
	d.register()
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
	r = e.srv.Client(t, http.MethodDelete, "/api/v1/sessions/"+sid, sk, nil)
	require.Equal(t, 200, r.Status)
	drv, err := sandbox.NewDockerDriver()
	require.NoError(t, err)
	left, err := drv.List(context.Background(), fmt.Sprintf("%s=%s", sandbox.LabelSession, sid))
	require.NoError(t, err)
	assert.Empty(t, left)
}
