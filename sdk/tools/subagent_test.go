package tools

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/sdk"
)

// subagentSession wires m into a fake session, declaring base tools.
func subagentSession(t *testing.T, m *LocalSubagents) (*sdk.Session, context.Context, *recorder) {
	t.Helper()
	return fakeSession(t, m.Option())
}

func launch(t *testing.T, ctx context.Context, m *LocalSubagents, harness, model, prompt string) string {
	t.Helper()
	out, err := m.launch(ctx, mustJSON(map[string]string{"harness": harness, "model": model, "prompt": prompt}))
	require.NoError(t, err)
	var res map[string]string
	require.NoError(t, json.Unmarshal([]byte(out.(string)), &res), "%v", out)
	require.Equal(t, "started", res["status"], "%v", out)
	require.True(t, strings.HasPrefix(res["subagent_id"], "sba_"))
	return res["subagent_id"]
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// wait blocks until the task's watcher finished.
func wait(t *testing.T, m *LocalSubagents, id string) {
	t.Helper()
	m.mu.Lock()
	tk := m.tasks[id]
	m.mu.Unlock()
	require.NotNil(t, tk)
	select {
	case <-tk.done:
	case <-time.After(30 * time.Second):
		t.Fatal("subagent did not finish")
	}
}

func statusOf(t *testing.T, ctx context.Context, m *LocalSubagents, id string) ([]SubagentStatus, string) {
	t.Helper()
	out, err := m.status(ctx, mustJSON(map[string]string{"subagent_id": id}))
	require.NoError(t, err)
	var res struct {
		Subagents []SubagentStatus `json:"subagents"`
		Error     string           `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(out.(string)), &res))
	return res.Subagents, res.Error
}

func toolNames(params map[string]any) []string {
	var names []string
	for _, t := range params["tools"].([]any) {
		names = append(names, t.(map[string]any)["name"].(string))
	}
	return names
}

func TestLocalSubagentStdinLifecycle(t *testing.T) {
	m, err := NewLocalSubagents(Host{}, SubagentDef{Harness: "echo", CommandTemplate: "cat; echo ' model='{model}"})
	require.NoError(t, err)
	_, ctx, rec := subagentSession(t, m)

	prompt := "  inspect the failing test\n"
	id := launch(t, ctx, m, "echo", "m-1", prompt)
	wait(t, m, id)

	got, errMsg := statusOf(t, ctx, m, id)
	require.Empty(t, errMsg)
	require.Len(t, got, 1)
	st := got[0]
	assert.Equal(t, "completed", st.Status)
	require.NotNil(t, st.Stdout)
	assert.Equal(t, prompt+" model=m-1\n", *st.Stdout, "the raw prompt reaches stdin unchanged")
	assert.Equal(t, 0, *st.ExitCode)
	assert.False(t, st.Truncated)

	_, errMsg = statusOf(t, ctx, m, id)
	assert.Contains(t, errMsg, "unknown subagent_id", "a finished result is read once")

	var states []string
	for _, r := range rec.byMethod("session.reportLocalSubagent") {
		assert.Equal(t, id, r["subagent_id"])
		states = append(states, r["state"].(string))
	}
	assert.Equal(t, []string{"start", "running", "completed"}, states)

	updates := rec.byMethod("session.updateClientTools")
	require.Len(t, updates, 2)
	assert.Equal(t, []string{LaunchSubagentName, LocalSubagentStatusName}, toolNames(updates[0]), "status appears with the first task")
	assert.Equal(t, []string{LaunchSubagentName}, toolNames(updates[1]), "and goes once the map is empty")
}

func TestLocalSubagentArgPromptIsQuoted(t *testing.T) {
	m, err := NewLocalSubagents(Host{}, SubagentDef{Harness: "p", CommandTemplate: "printf %s {prompt}", PromptVia: PromptViaArg})
	require.NoError(t, err)
	_, ctx, _ := subagentSession(t, m)
	hostile := `x'; echo pwned; '`
	id := launch(t, ctx, m, "p", "m", hostile)
	wait(t, m, id)
	got, _ := statusOf(t, ctx, m, id)
	assert.Equal(t, hostile, *got[0].Stdout)
}

func TestLocalSubagentFailureTimeoutAndTruncation(t *testing.T) {
	m, err := NewLocalSubagents(Host{},
		SubagentDef{Harness: "fail", CommandTemplate: "echo nope >&2; exit 3"},
		SubagentDef{Harness: "slow", CommandTemplate: "sleep 30", Timeout: 100 * time.Millisecond},
		SubagentDef{Harness: "loud", CommandTemplate: "head -c 70000 /dev/zero | tr '\\0' a; printf 'é' >&2"},
	)
	require.NoError(t, err)
	_, ctx, rec := subagentSession(t, m)
	fail := launch(t, ctx, m, "fail", "m", "go")
	slow := launch(t, ctx, m, "slow", "m", "go")
	loud := launch(t, ctx, m, "loud", "m", "go")
	wait(t, m, fail)
	wait(t, m, slow)
	wait(t, m, loud)

	// Without an id the status tool reports every task in launch order.
	out, err := m.status(ctx, json.RawMessage(`{}`))
	require.NoError(t, err)
	var res struct{ Subagents []SubagentStatus }
	require.NoError(t, json.Unmarshal([]byte(out.(string)), &res))
	require.Len(t, res.Subagents, 3)
	f, s, l := res.Subagents[0], res.Subagents[1], res.Subagents[2]

	assert.Equal(t, "failed", f.Status)
	assert.Equal(t, "nonzero_exit", *f.Reason)
	assert.Equal(t, 3, *f.ExitCode)
	assert.Equal(t, "nope\n", *f.Stderr)

	assert.Equal(t, "timed_out", s.Status)
	assert.Equal(t, "timeout", *s.Reason)
	assert.Nil(t, s.ExitCode)

	assert.Equal(t, "completed", l.Status)
	assert.True(t, l.Truncated)
	assert.Len(t, *l.Stdout, SubagentOutputCap)
	assert.Equal(t, "é", *l.Stderr)

	terminal := map[string]map[string]any{}
	for _, r := range rec.byMethod("session.reportLocalSubagent") {
		if st := r["state"]; st != "start" && st != "running" {
			terminal[r["subagent_id"].(string)] = r
		}
	}
	assert.Equal(t, "failed", terminal[slow]["state"], "a timeout is reported as failed")
	assert.Equal(t, "timeout", terminal[slow]["reason"])
	assert.EqualValues(t, 3, terminal[fail]["exit_code"])

	// The map is empty now: nothing left to report.
	out, err = m.status(ctx, json.RawMessage(`{}`))
	require.NoError(t, err)
	assert.JSONEq(t, `{"subagents":[]}`, out.(string))
}

func TestLocalSubagentCancelCapAndClose(t *testing.T) {
	m, err := NewLocalSubagents(Host{}, SubagentDef{Harness: "sleepy", CommandTemplate: "sleep 60"})
	require.NoError(t, err)
	s, ctx, rec := subagentSession(t, m)

	var ids []string
	for range MaxSubagentsPerSession {
		ids = append(ids, launch(t, ctx, m, "sleepy", "m", "zz"))
	}
	out, err := m.launch(ctx, mustJSON(map[string]string{"harness": "sleepy", "model": "m", "prompt": "zz"}))
	require.NoError(t, err)
	assert.Contains(t, out, "subagent limit reached")

	require.NoError(t, m.Cancel(ctx, ids[0]))
	wait(t, m, ids[0])
	got, _ := statusOf(t, ctx, m, ids[0])
	assert.Equal(t, "cancelled", got[0].Status)
	assert.Equal(t, "explicit", *got[0].Reason)
	require.NoError(t, m.Cancel(ctx, "sba_unknown"), "unknown ids are a no-op")

	// A cancelled task frees a slot.
	ids = append(ids, launch(t, ctx, m, "sleepy", "m", "zz"))

	_ = s.Close(context.Background()) // DELETE fails against the fake; the hook has run
	var closed int
	for _, r := range rec.byMethod("session.reportLocalSubagent") {
		if r["state"] == "cancelled" && r["reason"] == "session_close" {
			closed++
		}
	}
	assert.Equal(t, MaxSubagentsPerSession, closed)
	m.mu.Lock()
	assert.Empty(t, m.tasks)
	m.mu.Unlock()
	out, err = m.launch(ctx, mustJSON(map[string]string{"harness": "sleepy", "model": "m", "prompt": "zz"}))
	require.NoError(t, err)
	assert.Contains(t, out, "closing")
}

func TestLocalSubagentInputErrorsAreInBand(t *testing.T) {
	m, err := NewLocalSubagents(Host{}, SubagentDef{Harness: "a", CommandTemplate: "cat"})
	require.NoError(t, err)
	_, ctx, _ := subagentSession(t, m)
	for _, in := range []map[string]string{
		{"harness": "a", "model": "m"},
		{"harness": "a", "model": "m", "prompt": "   "},
		{"harness": "zzz", "model": "m", "prompt": "p"},
	} {
		out, err := m.launch(ctx, mustJSON(in))
		require.NoError(t, err)
		assert.Contains(t, out, `"error"`, "%v", in)
	}
	_, errMsg := statusOf(t, ctx, m, "sba_nope")
	assert.Contains(t, errMsg, "unknown")
}

// TestLocalSubagentRefusesInjectedValues: the model chooses the model name
// and the prompt; a model name with shell metacharacters, or a prompt that
// would become the CLI's option, never reaches the shell.
func TestLocalSubagentRefusesInjectedValues(t *testing.T) {
	dir := t.TempDir()
	pwned := filepath.Join(dir, "pwned")
	m, err := NewLocalSubagents(Host{},
		SubagentDef{Harness: "p", CommandTemplate: "printf %s {model} {prompt}", PromptVia: PromptViaArg},
		SubagentDef{Harness: "dd", CommandTemplate: "printf %s {model} -- {prompt}", PromptVia: PromptViaArg})
	require.NoError(t, err)
	_, ctx, rec := subagentSession(t, m)
	for _, model := range []string{"m; touch " + pwned, "$(touch " + pwned + ")", "-o" + pwned, "m'x"} {
		out, err := m.launch(ctx, mustJSON(map[string]string{"harness": "p", "model": model, "prompt": "hi"}))
		require.NoError(t, err)
		assert.Contains(t, out, "is not a model name", model)
	}
	out, err := m.launch(ctx, mustJSON(map[string]string{"harness": "p", "model": "m", "prompt": "--help"}))
	require.NoError(t, err)
	assert.Contains(t, out, `begins with \"-\"`)
	assert.Empty(t, rec.byMethod("session.reportLocalSubagent"), "nothing was launched")

	id := launch(t, ctx, m, "dd", "claude-sonnet-4-5", "- a list item")
	wait(t, m, id)
	got, _ := statusOf(t, ctx, m, id)
	assert.Equal(t, "claude-sonnet-4-5--- a list item", *got[0].Stdout, "after --, a prompt may begin with -")
	assert.NoFileExists(t, pwned)
}

func TestLocalSubagentRemoteTarget(t *testing.T) {
	m, err := NewLocalSubagents(Remote{}, SubagentDef{Harness: "r", CommandTemplate: "run {model} {prompt}", PromptVia: PromptViaArg})
	require.NoError(t, err)
	_, ctx, rec := subagentSession(t, m)
	rec.results["session.execRemoteSandbox"] = map[string]any{"stdout": "done", "stderr": "", "exit_code": 0}
	id := launch(t, ctx, m, "r", "m", "fix it")
	wait(t, m, id)
	got, _ := statusOf(t, ctx, m, id)
	assert.Equal(t, "completed", got[0].Status)
	assert.Equal(t, "done", *got[0].Stdout)
	assert.Equal(t, []map[string]any{{"command": "run 'm' 'fix it'"}}, rec.byMethod("session.execRemoteSandbox"))
}

func TestSubagentDefValidation(t *testing.T) {
	_, err := NewLocalSubagents(Host{})
	assert.Error(t, err)
	_, err = NewLocalSubagents(Host{}, SubagentDef{Harness: "a", CommandTemplate: "x {prompt}"})
	assert.ErrorContains(t, err, "must not put {prompt}")
	_, err = NewLocalSubagents(Host{}, SubagentDef{Harness: "a", CommandTemplate: "x", PromptVia: PromptViaArg})
	assert.ErrorContains(t, err, "needs {prompt}")
	_, err = NewLocalSubagents(Host{}, SubagentDef{Harness: "a", CommandTemplate: "x {cwd}"})
	assert.ErrorContains(t, err, "not allowed")
	_, err = NewLocalSubagents(Host{}, SubagentDef{Harness: "a", CommandTemplate: `x --model "{model}"`})
	assert.ErrorContains(t, err, "inside double quotes")
	_, err = NewLocalSubagents(Host{}, SubagentDef{Harness: "a", CommandTemplate: "x {prompt} {prompt}", PromptVia: PromptViaArg})
	assert.ErrorContains(t, err, "exactly once")
	_, err = NewLocalSubagents(Host{}, SubagentDef{Harness: "a", CommandTemplate: "x"}, SubagentDef{Harness: "a", CommandTemplate: "y"})
	assert.ErrorContains(t, err, "twice")
	_, err = NewLocalSubagents(Remote{}, SubagentDef{Harness: "a", CommandTemplate: "claude"})
	assert.ErrorContains(t, err, "no stdin")
	_, err = NewLocalSubagents(nil, SubagentDef{Harness: "a", CommandTemplate: "claude"})
	assert.Error(t, err)
}

func TestRemoteSubagentsSpec(t *testing.T) {
	spec, err := RemoteSubagents("bae-subagents:latest",
		SubagentDef{Harness: "claude", CommandTemplate: "claude --model {model} --print"},
		SubagentDef{Harness: "codex", CommandTemplate: "codex exec --model {model} {prompt}", PromptVia: PromptViaArg, Timeout: 90 * time.Second},
	)
	require.NoError(t, err)
	raw, err := json.Marshal(spec)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m))
	assert.Equal(t, "launch_subagent", m["name"])
	assert.Equal(t, "bae-subagents:latest", m["image"])
	assert.Equal(t, []any{
		map[string]any{"harness": "claude", "command_template": "claude --model {model} --print", "prompt_via": "stdin", "timeout_secs": float64(600)},
		map[string]any{"harness": "codex", "command_template": "codex exec --model {model} {prompt}", "prompt_via": "arg", "timeout_secs": float64(90)},
	}, m["subagents"])
	schema := m["input_schema"].(map[string]any)
	assert.Equal(t, []any{"harness", "model", "prompt"}, schema["required"])

	_, err = RemoteSubagents("", SubagentDef{Harness: "a", CommandTemplate: "x"})
	assert.Error(t, err)
}

func TestCapUTF8(t *testing.T) {
	s, cut := capUTF8("aé", 2)
	assert.Equal(t, "a", s, "never splits a rune")
	assert.True(t, cut)
	s, cut = capUTF8("ab", 2)
	assert.Equal(t, "ab", s)
	assert.False(t, cut)
}
