package tests

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/app"
	"github.com/bae-go/bae-go/internal/sandbox"
	"github.com/bae-go/bae-go/internal/sessiontools"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/sandboxtest"
	"github.com/bae-go/bae-go/internal/testing/testdb"
	"github.com/bae-go/bae-go/internal/testing/testenv"
	"github.com/bae-go/bae-go/store"
)

// ---- helpers -------------------------------------------------------------

// fsStdioTOML registers the re-executed test binary as stdio MCP server name.
func fsStdioTOML(t *testing.T, name string) string {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	toml := fmt.Sprintf("\n[[mcp.servers]]\nname = %q\ntransport = \"stdio\"\ncommand = %q\nargs = [%q]\n", name, exe, fsServerArg)
	// A stdio server starts with a minimal environment: the release file
	// of the hang tool is passed through the entry's own env.
	var env []string
	for _, name := range []string{fsReleaseEnv, fsCallsEnv} {
		if v := os.Getenv(name); v != "" {
			env = append(env, fmt.Sprintf("%s = %q", name, v))
		}
	}
	if len(env) > 0 {
		toml += "env = { " + strings.Join(env, ", ") + " }\n"
	}
	return toml
}

var profileSeq atomic.Int64

// profile creates a profile on the "primary" provider with a unique name.
func (e *env) profile(body map[string]any) string {
	e.t.Helper()
	body["name"] = fmt.Sprintf("tools-%d", profileSeq.Add(1))
	body["primary_provider"] = "primary"
	if _, ok := body["allowed_tools"]; !ok {
		body["allowed_tools"] = []string{}
	}
	return e.srv.Profile(e.t, body)
}

// openOn opens a session on profile pid with a new client key, without
// registering it as a driver.
func (e *env) openOn(pid string, body map[string]any) *driver {
	e.t.Helper()
	if body == nil {
		body = map[string]any{}
	}
	body["client_version"] = "test"
	keyID, key := e.srv.Key(e.t, pid)
	sid, sk := e.srv.Open(e.t, key, body)
	return &driver{e: e, keyID: keyID, key: key, sid: sid, sk: sk}
}

// call runs one non-streaming RPC and returns its terminal object.
func (d *driver) call(method string, params any) map[string]any {
	d.e.t.Helper()
	return testenv.Terminal(d.e.t, d.e.srv.Call(d.e.t, d.sid, d.sk, method, params))
}

// result is the terminal's result, failing the test on an error object.
func result(t *testing.T, term map[string]any) map[string]any {
	t.Helper()
	require.Nil(t, term["error"], "unexpected error: %v", term["error"])
	return term["result"].(map[string]any)
}

// rpcError asserts an error object with code and returns its message.
func rpcError(t *testing.T, term map[string]any, code int) string {
	t.Helper()
	e, ok := term["error"].(map[string]any)
	require.True(t, ok, "expected error %d, got %v", code, term)
	assert.EqualValues(t, code, e["code"], "message: %v", e["message"])
	msg, _ := e["message"].(string)
	return msg
}

// logLen is the current length of the session's log, a mark for since.
func (d *driver) logLen() int { return len(d.allEvents()) }

// since returns the events appended after mark.
func (d *driver) since(mark int) []map[string]any { return d.allEvents()[mark:] }

// closeSession is DELETE /sessions/{id}.
func (d *driver) closeSession() {
	d.e.t.Helper()
	r := d.e.srv.Client(d.e.t, http.MethodDelete, "/api/v1/sessions/"+d.sid, d.sk, nil)
	require.Equal(d.e.t, http.StatusOK, r.Status, string(r.Raw))
}

func ofType(evs []map[string]any, typ string) []map[string]any {
	var out []map[string]any
	for _, e := range evs {
		if e["event_type"] == typ {
			out = append(out, e)
		}
	}
	return out
}

// advertised lists the tool names of a provider.request payload.
func advertised(req map[string]any) []string {
	out := []string{}
	for _, tl := range req["tools"].([]any) {
		out = append(out, tl.(map[string]any)["name"].(string))
	}
	return out
}

func textBlocks(s string) []any { return []any{map[string]any{"type": "text", "text": s}} }

// onlyText returns the text of content that must be a single text block.
func onlyText(t *testing.T, content any) string {
	t.Helper()
	arr, ok := content.([]any)
	require.True(t, ok, "content is not a block array: %v", content)
	require.Len(t, arr, 1)
	b := arr[0].(map[string]any)
	require.Equal(t, "text", b["type"])
	return b["text"].(string)
}

// processGone reports whether pid no longer exists. A zombie still answers
// signal 0, so true also proves the process was reaped.
func processGone(pid int) bool { return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) }

// fsChildren lists this process's children running the stdio MCP server
// (zombies included: an unreaped child is a leak too).
func fsChildren(t *testing.T) []int {
	t.Helper()
	me := strconv.Itoa(os.Getpid())
	dirs, err := filepath.Glob("/proc/[0-9]*")
	require.NoError(t, err)
	var out []int
	for _, dir := range dirs {
		stat, err := os.ReadFile(dir + "/stat")
		if err != nil {
			continue // exited meanwhile
		}
		// pid (comm) state ppid …; comm may contain spaces, so cut at ')'.
		rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:])
		fields := strings.Fields(rest)
		if len(fields) < 2 || fields[1] != me {
			continue
		}
		cmdline, _ := os.ReadFile(dir + "/cmdline")
		if strings.Contains(string(cmdline), fsServerArg) {
			pid, _ := strconv.Atoi(filepath.Base(dir))
			out = append(out, pid)
		}
	}
	return out
}

// sessionClosedHook returns a channel closed once this replica has run its
// session-closed callbacks for sid; the MCP manager's runs first (it was
// registered at start-up), so MCP connections are gone by then.
func (e *env) sessionClosedHook(sid string) <-chan struct{} {
	ch := make(chan struct{})
	var once atomic.Bool
	e.srv.Parts.Hub.OnSessionClosed(func(id string) {
		if id == sid && once.CompareAndSwap(false, true) {
			close(ch)
		}
	})
	return ch
}

func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		require.FailNow(t, "timed out waiting for "+what)
	}
}

// buildImages builds n busybox images of t's own (sandboxtest.Image: each
// is removed at test end with every container started from it). Call it
// before newEnv so the removal runs after the server stopped.
func buildImages(t *testing.T, n int) []string {
	t.Helper()
	var tags []string
	for i := range n {
		tags = append(tags, sandboxtest.Image(t, fmt.Sprintf("bae-tools-test-%d", i)))
	}
	return tags
}

// waitProvisioned waits for the profile's background image provisioning and
// requires every image available.
func (e *env) waitProvisioned(pid string, images ...string) {
	e.t.Helper()
	p := e.srv.Parts.Services.Provisioner()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(e.t, p.Wait(ctx, pid))
	for _, st := range p.Images(pid, images) {
		require.Equal(e.t, sandbox.StatusAvailable, st.Status, "%s: %s", st.Name, st.Detail)
	}
}

// containers lists the sandbox containers labelled with the session.
func (e *env) containers(sid string) []sandbox.Container {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := e.srv.Parts.Services.Driver().List(ctx, sandbox.LabelSession+"="+sid)
	require.NoError(e.t, err)
	return list
}

// reapOnCleanup stops any container the session still has at test end (a
// backstop for failing tests; it runs before the server stops).
func (d *driver) reapOnCleanup() {
	drv := d.e.srv.Parts.Services.Driver()
	d.e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		list, err := drv.List(ctx, sandbox.LabelSession+"="+d.sid)
		if err != nil {
			return
		}
		for _, c := range list {
			_ = drv.Stop(ctx, c.ID)
		}
	})
}

var shellTool = map[string]any{
	"name":        "run_shell_command",
	"description": "Run a shell command in the session's sandbox",
	"input_schema": map[string]any{
		"type":       "object",
		"properties": map[string]any{"command": map[string]any{"type": "string"}},
		"required":   []string{"command"},
	},
}

// ---- 1. MCP ----------------------------------------------------------------

// fsTools are the tools newFSServer offers.
var fsTools = []string{"list_files", "pid", "crash", "hang", "read_big", "create_issue"}

// mcpTurnTypes are the event types of a turn whose model calls one MCP
// tool and answers with its result.
var mcpTurnTypes = []string{
	"client.message.send", "provider.request", "provider.response",
	"tool.call", "mcp.request", "mcp.response", "tool.result",
	"provider.request", "provider.response", "server.message.send",
}

func TestMCPStdioToolRoundTrip(t *testing.T) {
	e := newEnv(t, envOpts{allowedTools: []string{}, extraTOML: fsStdioTOML(t, "fs")})
	// An unknown server name is skipped, never fatal.
	pid := e.profile(map[string]any{"mcp_servers": []string{"not-configured", "fs"}})
	d := e.openOn(pid, nil)
	d.register()
	e.fake.Lane("primary").Enqueue(fakeprovider.ToolUse("tu_1", "list_files", map[string]any{"path": "/data"}), fakeprovider.Text("Two files."))

	notes, term := d.send("which files?")
	evs := resultEvents(term)
	require.Equal(t, mcpTurnTypes, types(evs))
	assert.Equal(t, types(evs[1:]), types(notifications(notes)), "everything but the caller's own message is streamed live")

	assert.ElementsMatch(t, fsTools, advertised(payload(evs[1])))
	assert.ElementsMatch(t, fsTools, e.fake.Requests()[0].ToolNames())
	data := map[string]any{"path": "/data"}
	assert.Equal(t, map[string]any{"id": "tu_1", "name": "list_files", "input": data, "dispatch": "mcp", "server_name": "fs"}, payload(evs[3]))
	assert.Equal(t, map[string]any{"method": "tools/call", "server_name": "fs", "tool": "list_files", "input": data}, payload(evs[4]))
	assert.Equal(t, map[string]any{
		"server_name": "fs", "ok": true,
		"result": map[string]any{"content": textBlocks(fsListing), "isError": false},
	}, payload(evs[5]))
	assert.Equal(t, map[string]any{"tool_use_id": "tu_1", "dispatch": "mcp", "server_name": "fs", "is_error": false, "content": textBlocks(fsListing)}, payload(evs[6]))
	for _, ev := range evs {
		assert.Equal(t, d.keyID, ev["client_key_id"])
	}

	// The provider's second call answers the tool_use with the MCP result.
	reqs := e.fake.Requests()
	require.Len(t, reqs, 2)
	msgs := reqs[1].Messages()
	require.Len(t, msgs, 3)
	assert.Equal(t, "assistant", msgs[1]["role"])
	last := msgs[2]
	assert.Equal(t, "user", last["role"])
	blocks := last["content"].([]any)
	require.Len(t, blocks, 1)
	res := blocks[0].(map[string]any)
	assert.Equal(t, "tool_result", res["type"])
	assert.Equal(t, "tu_1", res["tool_use_id"])
	assert.Equal(t, textBlocks(fsListing), res["content"])
	assert.Equal(t, "Two files.", firstText(message(term)))
	// An all-server turn never pauses, so nothing is tagged with dispatch.
	assert.NotContains(t, string(reqs[1].RawBody), `"dispatch"`)
}

func TestMCPStdioCrashReconnectsAndCloseEndsProcess(t *testing.T) {
	e := newEnv(t, envOpts{allowedTools: []string{}, extraTOML: fsStdioTOML(t, "fs")})
	pid := e.profile(map[string]any{"mcp_servers": []string{"fs"}})
	d := e.openOn(pid, nil)
	d.register()
	lane := e.fake.Lane("primary")

	serverPID := func(id string) int {
		t.Helper()
		lane.Enqueue(fakeprovider.ToolUse(id, "pid", nil), fakeprovider.Text("ok"))
		_, term := d.send("pid?")
		results := ofType(resultEvents(term), "tool.result")
		require.Len(t, results, 1)
		require.Equal(t, false, payload(results[0])["is_error"], "%v", payload(results[0]))
		n, err := strconv.Atoi(onlyText(t, payload(results[0])["content"]))
		require.NoError(t, err)
		return n
	}
	first := serverPID("tu_p1")
	assert.Contains(t, fsChildren(t), first, "the session's stdio server is a child of the server process")

	lane.Enqueue(fakeprovider.ToolUse("tu_crash", "crash", nil), fakeprovider.Text("it crashed"))
	_, term := d.send("crash it")
	evs := resultEvents(term)
	require.Equal(t, mcpTurnTypes, types(evs))
	resp := payload(evs[5])
	assert.Equal(t, false, resp["ok"])
	assert.Equal(t, "fs", resp["server_name"])
	assert.NotContains(t, resp, "result")
	detail, _ := resp["error"].(string)
	assert.Contains(t, detail, "exited unexpectedly")
	res := payload(evs[6])
	assert.Equal(t, true, res["is_error"])
	assert.Equal(t, "fs", res["server_name"])
	assert.Equal(t, "MCP error: "+detail, onlyText(t, res["content"]))
	assert.Equal(t, "it crashed", firstText(message(term)), "the turn continues after a tool error")
	assert.True(t, processGone(first), "the crashed server was reaped")

	second := serverPID("tu_p2")
	assert.NotEqual(t, first, second, "the next call reconnected")

	closed := e.sessionClosedHook(d.sid)
	d.closeSession()
	waitFor(t, closed, "session close to reach the MCP manager")
	assert.True(t, processGone(second), "closing the session terminates and reaps its stdio server")
	assert.Empty(t, fsChildren(t), "no MCP server process outlives its session")
}

func TestMCPStreamableHTTPWithHeaderToken(t *testing.T) {
	const secret = "mcp-header-s3cret"
	t.Setenv("BAE_TEST_MCP_TOKEN", secret)
	var authorized, rejected atomic.Int32
	mcpHandler := server.NewStreamableHTTPServer(newFSServer())
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+secret {
			rejected.Add(1)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		authorized.Add(1)
		mcpHandler.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	toml := fmt.Sprintf(`
[[mcp.servers]]
name = "remote"
transport = "http"
url = %q
headers = { Authorization = "Bearer ${BAE_TEST_MCP_TOKEN}" }
`, ts.URL+"/mcp")
	e := newEnv(t, envOpts{allowedTools: []string{}, extraTOML: toml})
	pid := e.profile(map[string]any{"mcp_servers": []string{"remote"}})
	d := e.openOn(pid, nil)
	d.register()
	e.fake.Lane("primary").Enqueue(fakeprovider.ToolUse("tu_h", "list_files", nil), fakeprovider.Text("listed"))

	_, term := d.send("list over http")
	evs := resultEvents(term)
	require.Equal(t, mcpTurnTypes, types(evs))
	assert.ElementsMatch(t, fsTools, advertised(payload(evs[1])))
	assert.Equal(t, "remote", payload(evs[3])["server_name"])
	assert.Equal(t, true, payload(evs[5])["ok"])
	assert.Equal(t, map[string]any{"tool_use_id": "tu_h", "dispatch": "mcp", "server_name": "remote", "is_error": false, "content": textBlocks(fsListing)}, payload(evs[6]))
	assert.Positive(t, authorized.Load())
	assert.Zero(t, rejected.Load(), "every request carried the resolved header")
	raw, _ := json.Marshal(d.allEvents())
	assert.NotContains(t, string(raw), secret, "the header secret is never logged")
}

// ---- 2. Remote sandbox -----------------------------------------------------

func TestRemoteSandboxLifecycle(t *testing.T) {
	images := buildImages(t, 2)
	mine, theirs := images[0], images[1]
	e := newEnv(t, envOpts{})
	pid := e.profile(map[string]any{"available_sandboxes": []string{mine}})
	other := e.profile(map[string]any{"available_sandboxes": []string{theirs}})
	e.waitProvisioned(pid, mine)
	e.waitProvisioned(other, theirs)
	r := e.srv.Admin(t, http.MethodGet, "/admin/v1/sandbox-status", nil)
	require.Equal(t, http.StatusOK, r.Status)
	assert.Contains(t, string(r.Raw), `{"name":"`+mine+`","status":"available"}`)

	d := e.openOn(pid, nil)
	d.reapOnCleanup()
	for _, m := range []string{"session.startRemoteSandbox", "session.stopRemoteSandbox", "session.execRemoteSandbox"} {
		rpcError(t, d.call(m, map[string]any{"image": mine, "command": "true"}), -32001)
	}

	mark := d.logLen()
	d.register()
	reg := d.since(mark)
	require.Equal(t, []string{"session.driver.register", "session.sandbox.available"}, types(reg))
	assert.Equal(t, map[string]any{}, payload(reg[0]))
	assert.Equal(t, map[string]any{"images": []any{map[string]any{"name": mine, "status": "available"}}}, payload(reg[1]),
		"only this session's own profile's images")

	mark = d.logLen()
	rpcError(t, d.call("session.startRemoteSandbox", map[string]any{"image": theirs}), -32011)
	rpcError(t, d.call("session.startRemoteSandbox", map[string]any{"image": "busybox:never-declared"}), -32011)
	rpcError(t, d.call("session.startRemoteSandbox", map[string]any{"image": "  "}), -32602)
	rpcError(t, d.call("session.startRemoteSandbox", nil), -32602)
	rpcError(t, d.call("session.execRemoteSandbox", map[string]any{"command": "true"}), -32013)
	rpcError(t, d.call("session.stopRemoteSandbox", nil), -32013)
	assert.Empty(t, d.since(mark), "rejected calls log nothing")
	assert.Empty(t, e.containers(d.sid), "no container is started for a rejected image")

	started := result(t, d.call("session.startRemoteSandbox", map[string]any{"image": mine}))
	sbID, _ := started["sandbox_id"].(string)
	require.NotEmpty(t, sbID)
	assert.Equal(t, mine, started["image"])
	evs := d.since(mark)
	require.Equal(t, []string{"session.sandbox.start", "session.sandbox.running"}, types(evs))
	assert.Equal(t, map[string]any{"image": mine, "dispatch": "remote"}, payload(evs[0]))
	assert.Equal(t, map[string]any{"image": mine, "sandbox_id": sbID, "dispatch": "remote"}, payload(evs[1]))
	assert.Equal(t, evs[1]["created_at"], started["started_at"], "started_at is the running event's created_at")
	list := e.containers(d.sid)
	require.Len(t, list, 1)
	assert.Equal(t, sbID, list[0].ID)

	mark = d.logLen()
	msg := rpcError(t, d.call("session.startRemoteSandbox", map[string]any{"image": mine}), -32000)
	assert.Contains(t, msg, "already running")
	assert.Len(t, e.containers(d.sid), 1, "one sandbox per session")

	out := result(t, d.call("session.execRemoteSandbox", map[string]any{"command": "echo out; echo err >&2; exit 4"}))
	assert.Equal(t, map[string]any{"stdout": "out\n", "stderr": "err\n", "exit_code": float64(4)}, out, "a non-zero exit is still a result")
	out = result(t, d.call("session.execRemoteSandbox", map[string]any{"command": "cat /etc/passwd | head -1"}))
	assert.Equal(t, map[string]any{"stdout": "root:x:0:0:root:/root:/bin/sh\n", "stderr": "", "exit_code": float64(0)}, out)
	rpcError(t, d.call("session.execRemoteSandbox", nil), -32602)
	assert.Empty(t, d.since(mark), "exec is a utility call: no events on success")

	stopped := result(t, d.call("session.stopRemoteSandbox", nil))
	assert.Equal(t, map[string]any{"stopped": true, "image": mine, "sandbox_id": sbID}, stopped)
	evs = d.since(mark)
	require.Equal(t, []string{"session.sandbox.stop", "session.sandbox.stopped"}, types(evs))
	want := map[string]any{"image": mine, "sandbox_id": sbID, "reason": "explicit", "dispatch": "remote"}
	assert.Equal(t, want, payload(evs[0]))
	assert.Equal(t, want, payload(evs[1]))
	assert.Empty(t, e.containers(d.sid), "the container is gone")
	rpcError(t, d.call("session.execRemoteSandbox", map[string]any{"command": "true"}), -32013)
	rpcError(t, d.call("session.stopRemoteSandbox", nil), -32013)

	// Closing the session stops a still-running sandbox.
	again := result(t, d.call("session.startRemoteSandbox", map[string]any{"image": mine}))
	againID := again["sandbox_id"].(string)
	require.NotEqual(t, sbID, againID)
	require.Len(t, e.containers(d.sid), 1)
	mark = d.logLen()
	d.closeSession()
	evs = d.since(mark)
	require.Equal(t, []string{"session.close", "session.sandbox.stop", "session.sandbox.stopped"}, types(evs))
	want = map[string]any{"image": mine, "sandbox_id": againID, "reason": "session_close", "dispatch": "remote"}
	assert.Equal(t, want, payload(evs[1]))
	assert.Equal(t, want, payload(evs[2]))
	assert.Empty(t, e.containers(d.sid), "DELETE removed the container")
}

func TestRemoteSandboxStartFailureAndVanishedContainer(t *testing.T) {
	image := buildImages(t, 1)[0]
	// Refused at once by any engine: nothing listens on port 1.
	missing := "127.0.0.1:1/bae-missing:never"
	e := newEnv(t, envOpts{})
	pid := e.profile(map[string]any{"available_sandboxes": []string{image, missing}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, e.srv.Parts.Services.Provisioner().Wait(ctx, pid))
	d := e.openOn(pid, map[string]any{"sandbox_tools": []any{shellTool}})
	d.reapOnCleanup()
	mark := d.logLen()
	d.register()
	reg := d.since(mark)
	require.Equal(t, []string{"session.driver.register", "session.sandbox.available"}, types(reg))
	imgs := payload(reg[1])["images"].([]any)
	require.Len(t, imgs, 2)
	assert.Equal(t, map[string]any{"name": image, "status": "available"}, imgs[0])
	failed := imgs[1].(map[string]any)
	assert.Equal(t, missing, failed["name"])
	assert.Equal(t, "error", failed["status"])
	assert.NotEmpty(t, failed["detail"])

	mark = d.logLen()
	assert.Contains(t, rpcError(t, d.call("session.startRemoteSandbox", map[string]any{"image": missing}), -32012), "sandbox_start_failed")
	evs := d.since(mark)
	require.Equal(t, []string{"session.sandbox.start", "session.sandbox.error"}, types(evs))
	assert.Equal(t, map[string]any{"image": missing, "dispatch": "remote"}, payload(evs[0]))
	serr := payload(evs[1])
	assert.NotEmpty(t, serr["detail"])
	delete(serr, "detail")
	assert.Equal(t, map[string]any{"image": missing, "phase": "start", "dispatch": "remote"}, serr, "no sandbox_id: no handle was retained")
	assert.Empty(t, e.containers(d.sid))

	// The failed start released the session's slot.
	sbID := result(t, d.call("session.startRemoteSandbox", map[string]any{"image": image}))["sandbox_id"].(string)
	// The container vanishes behind the server's back.
	require.NoError(t, e.srv.Parts.Services.Driver().Stop(ctx, sbID))

	mark = d.logLen()
	assert.Contains(t, rpcError(t, d.call("session.execRemoteSandbox", map[string]any{"command": "true"}), -32000), "sandbox exec failed")
	evs = d.since(mark)
	require.Equal(t, []string{"session.sandbox.error"}, types(evs))
	xerr := payload(evs[0])
	assert.NotEmpty(t, xerr["detail"])
	delete(xerr, "detail")
	assert.Equal(t, map[string]any{"image": image, "sandbox_id": sbID, "phase": "exec", "dispatch": "remote"}, xerr)

	e.fake.Lane("primary").Enqueue(fakeprovider.ToolUse("tu_x", "run_shell_command", map[string]any{"command": "echo hi"}), fakeprovider.Text("it broke"))
	_, term := d.send("run")
	evs = resultEvents(term)
	require.Equal(t, []string{
		"client.message.send", "provider.request", "provider.response",
		"tool.call", "sandbox.request", "session.sandbox.error", "sandbox.response", "tool.result",
		"provider.request", "provider.response", "server.message.send",
	}, types(evs))
	assert.Equal(t, "exec", payload(evs[5])["phase"])
	resp := payload(evs[6])
	assert.Equal(t, sbID, resp["sandbox_id"])
	assert.Equal(t, false, resp["ok"])
	detail, _ := resp["error"].(string)
	assert.NotEmpty(t, detail)
	assert.Equal(t, map[string]any{"tool_use_id": "tu_x", "dispatch": "sandbox", "is_error": true, "content": textBlocks("sandbox error: " + detail)}, payload(evs[7]))

	// Stopping a sandbox whose container is already gone still succeeds.
	mark = d.logLen()
	assert.Equal(t, map[string]any{"stopped": true, "image": image, "sandbox_id": sbID}, result(t, d.call("session.stopRemoteSandbox", nil)))
	assert.Equal(t, []string{"session.sandbox.stop", "session.sandbox.stopped"}, types(d.since(mark)))
}

// gatedDriver holds the first Start until the caller's context ends, as if
// the client hung up just as its container came up.
type gatedDriver struct {
	sandbox.Driver
	entered chan struct{}
	stopped chan string
	once    atomic.Bool
}

func (g *gatedDriver) Start(ctx context.Context, image string, labels map[string]string, policy sandbox.Policy) (sandbox.Handle, error) {
	h, err := g.Driver.Start(context.WithoutCancel(ctx), image, labels, policy)
	if g.once.CompareAndSwap(false, true) {
		close(g.entered)
		<-ctx.Done()
	}
	return h, err
}

func (g *gatedDriver) Stop(ctx context.Context, id string) error {
	select {
	case g.stopped <- id:
	default:
	}
	return g.Driver.Stop(ctx, id)
}

// TestRemoteSandboxStartSurvivesClientHangup: a client that disconnects
// while its sandbox starts must not leave the session's slot claimed by a
// sandbox nobody can use, stop or replace.
func TestRemoteSandboxStartSurvivesClientHangup(t *testing.T) {
	image := buildImages(t, 1)[0]
	fake := fakeprovider.New(t)
	gated := &gatedDriver{entered: make(chan struct{}), stopped: make(chan string, 4)}
	srv := testenv.Start(t, testenv.Options{
		ConfigTOML: fmt.Sprintf("[[providers.entries]]\nname = \"primary\"\nprovider = \"anthropic\"\nbase_url = %q\nmodel = \"m\"\nauth_token = \"t\"\n", fake.URL()),
		Extend: func(p *app.Parts) error {
			gated.Driver = p.Services.Driver()
			dep, err := p.Store.DeploymentID(context.Background())
			if err != nil {
				return err
			}
			p.Deps.Tools = &sessiontools.Service{Store: p.Store, Driver: gated, Provisioner: p.Services.Provisioner(), Deployment: dep, Log: p.Deps.Log}
			return nil
		},
	})
	e := &env{t: t, srv: srv, fake: fake}
	pid := e.profile(map[string]any{"available_sandboxes": []string{image}})
	e.waitProvisioned(pid, image)
	d := e.openOn(pid, nil)
	d.reapOnCleanup()
	d.register()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	obs := srv.RPCStream(t, ctx, d.sid, d.sk, map[string]any{"jsonrpc": "2.0", "id": 1, "method": "session.subscribe", "params": map[string]any{}})
	defer obs.Close()
	running := make(chan map[string]any, 1)
	go func() {
		for m := range obs.Lines() {
			if ev, _ := m["params"].(map[string]any); ev != nil && ev["event_type"] == "session.sandbox.running" {
				running <- ev
				return
			}
		}
	}()

	reqCtx, hangUp := context.WithCancel(ctx)
	st := srv.RPCStream(t, reqCtx, d.sid, d.sk, map[string]any{"jsonrpc": "2.0", "id": 2, "method": "session.startRemoteSandbox", "params": map[string]any{"image": image}})
	waitFor(t, gated.entered, "the container start")
	hangUp()
	st.Close()

	var ev map[string]any
	select {
	case ev = <-running:
	case id := <-gated.stopped:
		require.FailNow(t, "the server discarded the sandbox it started", "container %s", id)
	case <-ctx.Done():
		require.FailNow(t, "the start never finished")
	}
	sbID := payload(ev)["sandbox_id"].(string)
	list := e.containers(d.sid)
	require.Len(t, list, 1)
	assert.Equal(t, sbID, list[0].ID)
	out := result(t, d.call("session.execRemoteSandbox", map[string]any{"command": "echo usable"}))
	assert.Equal(t, "usable\n", out["stdout"], "the started sandbox is usable")
	assert.Equal(t, map[string]any{"stopped": true, "image": image, "sandbox_id": sbID}, result(t, d.call("session.stopRemoteSandbox", nil)))
	assert.Empty(t, e.containers(d.sid))
}

// ---- 3. Auto-mode sandbox tools ------------------------------------------

func TestAutoModeSandboxTool(t *testing.T) {
	image := buildImages(t, 1)[0]
	e := newEnv(t, envOpts{})
	pid := e.profile(map[string]any{"available_sandboxes": []string{image}})
	e.waitProvisioned(pid, image)
	d := e.openOn(pid, map[string]any{"sandbox_tools": []any{shellTool}})
	d.reapOnCleanup()
	d.register()
	lane := e.fake.Lane("primary")
	noSandbox := "no remote sandbox is running for tool 'run_shell_command'; call session.startRemoteSandbox first"

	// Without a started sandbox the call is an error-shaped result.
	lane.Enqueue(fakeprovider.ToolUse("tu_0", "run_shell_command", map[string]any{"command": "echo hi"}), fakeprovider.Text("no sandbox yet"))
	_, term := d.send("run it")
	evs := resultEvents(term)
	sandboxTurn := []string{
		"client.message.send", "provider.request", "provider.response",
		"tool.call", "sandbox.request", "sandbox.response", "tool.result",
		"provider.request", "provider.response", "server.message.send",
	}
	require.Equal(t, sandboxTurn, types(evs))
	assert.Equal(t, []string{"run_shell_command"}, advertised(payload(evs[1])))
	assert.Equal(t, map[string]any{"sandbox_id": nil, "ok": false, "error": noSandbox}, payload(evs[5]))
	assert.Equal(t, map[string]any{"tool_use_id": "tu_0", "dispatch": "sandbox", "is_error": true, "content": textBlocks("sandbox error: " + noSandbox)}, payload(evs[6]))
	assert.Equal(t, "no sandbox yet", firstText(message(term)))

	// A slot claimed by a start still in progress has no container yet: the
	// tool must not exec against it.
	require.NoError(t, e.srv.Parts.Store.SetSandbox(context.Background(), d.sid, &store.SandboxState{Image: image}, true))
	lane.Enqueue(fakeprovider.ToolUse("tu_half", "run_shell_command", map[string]any{"command": "echo hi"}), fakeprovider.Text("still starting"))
	_, term = d.send("run it while starting")
	evs = resultEvents(term)
	require.Equal(t, sandboxTurn, types(evs))
	assert.Equal(t, map[string]any{"sandbox_id": nil, "ok": false, "error": noSandbox}, payload(evs[5]))
	require.NoError(t, e.srv.Parts.Store.SetSandbox(context.Background(), d.sid, nil, false))

	started := result(t, d.call("session.startRemoteSandbox", map[string]any{"image": image}))
	sbID := started["sandbox_id"].(string)

	cmd := "echo hi; echo oops >&2; exit 3"
	lane.Enqueue(fakeprovider.ToolUse("tu_1", "run_shell_command", map[string]any{"command": cmd}), fakeprovider.Text("it failed"))
	notes, term := d.send("run it for real")
	evs = resultEvents(term)
	require.Equal(t, sandboxTurn, types(evs))
	assert.Equal(t, types(evs[1:]), types(notifications(notes)))
	assert.Equal(t, map[string]any{"id": "tu_1", "name": "run_shell_command", "input": map[string]any{"command": cmd}, "dispatch": "sandbox", "server_name": nil}, payload(evs[3]))
	assert.Equal(t, map[string]any{"tool": "run_shell_command", "input": map[string]any{"command": cmd}, "command": cmd}, payload(evs[4]))
	assert.Equal(t, map[string]any{
		"sandbox_id": sbID, "ok": false,
		"result": map[string]any{"stdout": "hi\n", "stderr": "oops\n", "exit_code": float64(3)},
	}, payload(evs[5]))
	rendered := "hi\n[stderr]\noops\n[exit_code: 3]"
	assert.Equal(t, map[string]any{"tool_use_id": "tu_1", "dispatch": "sandbox", "is_error": true, "content": textBlocks(rendered)}, payload(evs[6]))
	reqs := e.fake.Requests()
	msgs := reqs[len(reqs)-1].Messages()
	res := msgs[len(msgs)-1]["content"].([]any)[0].(map[string]any)
	assert.Equal(t, "tu_1", res["tool_use_id"])
	assert.Equal(t, textBlocks(rendered), res["content"])
	assert.Equal(t, true, res["is_error"])

	// A zero exit with clean stderr is just the stdout, and not an error.
	lane.Enqueue(fakeprovider.ToolUse("tu_2", "run_shell_command", map[string]any{"command": "echo fine"}), fakeprovider.Text("fine"))
	_, term = d.send("again")
	evs = resultEvents(term)
	require.Equal(t, sandboxTurn, types(evs))
	assert.Equal(t, true, payload(evs[5])["ok"])
	assert.Equal(t, map[string]any{"tool_use_id": "tu_2", "dispatch": "sandbox", "is_error": false, "content": textBlocks("fine\n")}, payload(evs[6]))

	// A tool input without a string command is an error result, not an exec.
	lane.Enqueue(fakeprovider.ToolUse("tu_3", "run_shell_command", map[string]any{"cmd": "ls"}), fakeprovider.Text("bad input"))
	_, term = d.send("bad")
	evs = resultEvents(term)
	require.Equal(t, sandboxTurn, types(evs))
	assert.Nil(t, payload(evs[4])["command"])
	assert.Equal(t, false, payload(evs[5])["ok"])
	assert.Equal(t, true, payload(evs[6])["is_error"])
	assert.True(t, strings.HasPrefix(onlyText(t, payload(evs[6])["content"]), "sandbox error: "))
}

// ---- 4. Mixed client + MCP + sandbox --------------------------------------

func TestMixedClientMCPAndSandboxToolsMergeOnResume(t *testing.T) {
	image := buildImages(t, 1)[0]
	e := newEnv(t, envOpts{extraTOML: fsStdioTOML(t, "fs")})
	pid := e.profile(map[string]any{"mcp_servers": []string{"fs"}, "available_sandboxes": []string{image}, "allowed_tools": []string{"get_time"}})
	e.waitProvisioned(pid, image)
	d := e.openOn(pid, map[string]any{"tools": []any{tool("get_time")}, "sandbox_tools": []any{shellTool}})
	d.reapOnCleanup()
	d.register()
	sbID := result(t, d.call("session.startRemoteSandbox", map[string]any{"image": image}))["sandbox_id"].(string)

	e.fake.Lane("primary").Enqueue(
		fakeprovider.ToolUse("tu_c", "get_time", nil).
			WithToolUse("tu_m", "list_files", nil).
			WithToolUse("tu_s", "run_shell_command", map[string]any{"command": "echo sandboxed"}),
		fakeprovider.Text("all done"),
	)
	_, term := d.send("do everything")
	evs := resultEvents(term)
	require.Equal(t, []string{
		"client.message.send", "provider.request", "provider.response",
		"tool.call", "tool.call", "tool.call",
		"mcp.request", "mcp.response", "tool.result",
		"sandbox.request", "sandbox.response", "tool.result",
		"server.message.send",
	}, types(evs))
	assert.ElementsMatch(t, append([]string{"get_time", "run_shell_command"}, fsTools...), advertised(payload(evs[1])))
	var dispatches []any
	for _, c := range evs[3:6] {
		dispatches = append(dispatches, payload(c)["dispatch"])
	}
	assert.Equal(t, []any{"client", "mcp", "sandbox"}, dispatches)
	assert.Equal(t, "tu_m", payload(evs[8])["tool_use_id"])
	assert.Equal(t, sbID, payload(evs[10])["sandbox_id"])
	assert.Equal(t, "tu_s", payload(evs[11])["tool_use_id"])
	content := message(term)["content"].([]any)
	require.Len(t, content, 3)
	for i, want := range []string{"client", "mcp", "sandbox"} {
		assert.Equal(t, want, content[i].(map[string]any)["dispatch"])
	}
	assert.Equal(t, content, payload(evs[12])["content"], "server.message.send carries the tagged blocks")
	assert.Equal(t, 1, e.fake.RequestCount(), "the turn paused for the client tool")

	_, term = d.send([]any{map[string]any{"type": "tool_result", "tool_use_id": "tu_c", "content": "noon"}})
	evs = resultEvents(term)
	require.Equal(t, []string{"client.message.send", "tool.result", "provider.request", "provider.response", "server.message.send"}, types(evs))
	assert.Equal(t, map[string]any{"tool_use_id": "tu_c", "dispatch": "client", "server_name": nil, "is_error": false, "content": "noon"}, payload(evs[1]))
	merged := payload(evs[0])["content"].([]any)
	require.Len(t, merged, 3)
	ids := []any{}
	for _, b := range merged {
		ids = append(ids, b.(map[string]any)["tool_use_id"])
	}
	assert.Equal(t, []any{"tu_c", "tu_m", "tu_s"}, ids, "one result per tool_use, in the assistant's order")
	assert.Equal(t, "noon", merged[0].(map[string]any)["content"])
	assert.Equal(t, textBlocks(fsListing), merged[1].(map[string]any)["content"])
	assert.Equal(t, textBlocks("sandboxed\n"), merged[2].(map[string]any)["content"])

	reqs := e.fake.Requests()
	require.Len(t, reqs, 2)
	msgs := reqs[1].Messages()
	require.Len(t, msgs, 3)
	upstream := msgs[2]["content"].([]any)
	require.Len(t, upstream, 3)
	for i, id := range []string{"tu_c", "tu_m", "tu_s"} {
		assert.Equal(t, id, upstream[i].(map[string]any)["tool_use_id"])
	}
	assert.NotContains(t, string(reqs[1].RawBody), `"dispatch"`)
	assert.Equal(t, "all done", firstText(message(term)))
}

// ---- 5. Reports and client tool updates -----------------------------------

func TestReportLocalSandbox(t *testing.T) {
	e := newEnv(t, envOpts{})
	d := e.openOn(e.pid, nil)
	rpcError(t, d.call("session.reportLocalSandbox", map[string]any{"state": "running", "image": "python:3.12"}), -32001)
	d.register()

	mark := d.logLen()
	cases := []struct {
		params map[string]any
		typ    string
		want   map[string]any
	}{
		{map[string]any{"state": "running", "image": "python:3.12", "container_id": "c0ffee"}, "session.sandbox.running",
			map[string]any{"dispatch": "local", "image": "python:3.12", "unsandboxed": false, "container_id": "c0ffee", "detail": nil}},
		{map[string]any{"state": "error", "image": "python:3.12", "container_id": "c0ffee", "detail": "oom"}, "session.sandbox.error",
			map[string]any{"dispatch": "local", "image": "python:3.12", "unsandboxed": false, "container_id": "c0ffee", "detail": "oom"}},
		{map[string]any{"state": "stopped", "image": "python:3.12"}, "session.sandbox.stopped",
			map[string]any{"dispatch": "local", "image": "python:3.12", "unsandboxed": false, "container_id": nil, "detail": nil}},
		{map[string]any{"state": "running", "image": nil, "unsandboxed": true}, "session.sandbox.running",
			map[string]any{"dispatch": "local", "image": nil, "unsandboxed": true, "container_id": nil, "detail": nil}},
	}
	for _, c := range cases {
		assert.Equal(t, map[string]any{"reported": true}, result(t, d.call("session.reportLocalSandbox", c.params)))
	}
	evs := d.since(mark)
	require.Len(t, evs, len(cases))
	for i, c := range cases {
		assert.Equal(t, c.typ, evs[i]["event_type"])
		assert.Equal(t, c.want, payload(evs[i]))
		assert.Equal(t, d.keyID, evs[i]["client_key_id"])
	}

	mark = d.logLen()
	for _, p := range []map[string]any{
		{"state": "paused", "image": "x"},
		{"image": "x"},
		{"state": "running"},
		{"state": "running", "image": 7},
		{"state": "running", "image": "x", "unsandboxed": "yes"},
		{"state": "running", "image": "x", "unsandboxed": true},
	} {
		rpcError(t, d.call("session.reportLocalSandbox", p), -32602)
	}
	assert.Empty(t, d.since(mark))
}

func TestReportLocalSubagent(t *testing.T) {
	e := newEnv(t, envOpts{})
	d := e.openOn(e.pid, nil)
	base := func(state string, extra map[string]any) map[string]any {
		p := map[string]any{"state": state, "subagent_id": "sba_1", "harness": "claude", "model": "claude-sonnet-5"}
		for k, v := range extra {
			p[k] = v
		}
		return p
	}
	rpcError(t, d.call("session.reportLocalSubagent", base("start", nil)), -32001)
	rpcError(t, d.call("session.cancelSubagent", map[string]any{"subagent_id": "sba_1"}), -32001)
	d.register()

	common := map[string]any{"dispatch": "local", "subagent_id": "sba_1", "harness": "claude", "model": "claude-sonnet-5", "detail": nil}
	with := func(extra map[string]any) map[string]any {
		p := map[string]any{}
		for k, v := range common {
			p[k] = v
		}
		for k, v := range extra {
			p[k] = v
		}
		return p
	}
	mark := d.logLen()
	cases := []struct {
		params map[string]any
		typ    string
		want   map[string]any
	}{
		{base("start", nil), "session.subagent.start", with(nil)},
		{base("running", map[string]any{"detail": "pid 42"}), "session.subagent.running", with(map[string]any{"detail": "pid 42"})},
		{base("completed", map[string]any{"exit_code": 0}), "session.subagent.completed", with(map[string]any{"exit_code": float64(0)})},
		{base("failed", map[string]any{"reason": "timeout"}), "session.subagent.failed", with(map[string]any{"reason": "timeout", "exit_code": nil})},
		{base("failed", map[string]any{"reason": "nonzero_exit", "exit_code": 2}), "session.subagent.failed", with(map[string]any{"reason": "nonzero_exit", "exit_code": float64(2)})},
		{base("cancelled", map[string]any{"reason": "explicit"}), "session.subagent.cancelled", with(map[string]any{"reason": "explicit"})},
	}
	for _, c := range cases {
		assert.Equal(t, map[string]any{"reported": true}, result(t, d.call("session.reportLocalSubagent", c.params)))
	}
	evs := d.since(mark)
	require.Len(t, evs, len(cases))
	for i, c := range cases {
		assert.Equal(t, c.typ, evs[i]["event_type"])
		assert.Equal(t, c.want, payload(evs[i]), c.typ)
		assert.Equal(t, d.keyID, evs[i]["client_key_id"])
	}

	mark = d.logLen()
	for _, p := range []map[string]any{
		base("exploded", nil),
		{"subagent_id": "sba_1", "harness": "claude", "model": "m"},
		{"state": "start", "harness": "claude", "model": "m"},
		base("start", map[string]any{"harness": "  "}),
		base("start", map[string]any{"model": 3}),
		base("start", map[string]any{"detail": 5}),
		base("failed", map[string]any{"reason": true}),
		base("completed", map[string]any{"exit_code": 1.5}),
		base("completed", map[string]any{"exit_code": "1"}),
	} {
		rpcError(t, d.call("session.reportLocalSubagent", p), -32602)
	}
	assert.Empty(t, d.since(mark))
	// A local subagent is not tracked by the server.
	rpcError(t, d.call("session.cancelSubagent", map[string]any{"subagent_id": "sba_1"}), -32014)
}

func TestUpdateClientTools(t *testing.T) {
	e := newEnv(t, envOpts{allowedTools: []string{"get_time", "lookup", "remote_subagent_status"}})
	d := e.openOn(e.pid, map[string]any{"tools": []any{tool("get_time")}})
	rpcError(t, d.call("session.updateClientTools", map[string]any{"tools": []any{}}), -32001)
	d.register()

	advertisedNext := func() []string {
		t.Helper()
		_, term := d.send("hi")
		return advertised(payload(resultEvents(term)[1]))
	}
	assert.Equal(t, []string{"get_time"}, advertisedNext())

	mark := d.logLen()
	lookup := map[string]any{"name": "lookup", "description": "Look something up", "input_schema": map[string]any{"type": "object", "properties": map[string]any{"q": map[string]any{"type": "string"}}}}
	assert.Equal(t, map[string]any{"updated": true}, result(t, d.call("session.updateClientTools", map[string]any{"tools": []any{lookup}})))
	assert.Empty(t, d.since(mark), "no event is logged for an update")
	_, term := d.send("hi again")
	req := payload(resultEvents(term)[1])
	assert.Equal(t, []any{lookup}, req["tools"], "the next provider.request advertises the replacement, verbatim")
	assert.Equal(t, []string{"lookup"}, e.fake.Requests()[len(e.fake.Requests())-1].ToolNames())

	for _, tools := range []any{
		[]any{tool("get_time"), tool("not_allowed")},
		[]any{tool("remote_subagent_status")}, // reserved even when allowlisted
	} {
		rpcError(t, d.call("session.updateClientTools", map[string]any{"tools": tools}), -32015)
	}
	for _, p := range []map[string]any{
		{},
		{"tools": nil},
		{"tools": "get_time"},
		{"tools": []any{map[string]any{"name": " "}}},
		{"tools": []any{map[string]any{"description": "nameless"}}},
	} {
		rpcError(t, d.call("session.updateClientTools", p), -32602)
	}
	assert.Equal(t, []string{"lookup"}, advertisedNext(), "rejected updates change nothing")

	// An empty list is a valid full replacement.
	assert.Equal(t, map[string]any{"updated": true}, result(t, d.call("session.updateClientTools", map[string]any{"tools": []any{}})))
	assert.Empty(t, advertisedNext())

	d.closeSession()
	rpcError(t, d.call("session.updateClientTools", map[string]any{"tools": []any{}}), -32000)
}

// ---- Restarts ---------------------------------------------------------------

// restartOpts are options for servers taking over from one another on one
// database and Temporal, with fake as provider "primary".
func restartOpts(t *testing.T, fake *fakeprovider.Server, extraTOML string) testenv.Options {
	t.Helper()
	return testenv.Options{
		DatabaseURL: testdb.New(t),
		DataDir:     t.TempDir(),
		Temporal:    testenv.Temporal(t).GetDefaultClient(),
		ConfigTOML:  testenv.PrimaryProviderTOML(fake.URL()) + extraTOML,
		Env:         map[string]string{"BAE_TASK_QUEUE": "tools-restart", "BAE_ACTIVITY_HEARTBEAT_TIMEOUT": "1s"},
	}
}

// sandboxRestart is a session with a remote sandbox running, on the first
// of two servers taking over from one another (restartOpts).
type sandboxRestart struct {
	drv           *sandbox.DockerDriver
	fake          *fakeprovider.Server
	opts          testenv.Options
	a             *testenv.Server
	sid, sk, sbID string
}

// startSandboxRestart starts the first server with a profile whose fresh
// image is provisioned, opens a session with the fields open gives for that
// image, registers its driver and starts its remote sandbox. The session's
// containers are stopped when the test ends.
func startSandboxRestart(t *testing.T, open func(image string) map[string]any) sandboxRestart {
	t.Helper()
	if testing.Short() {
		t.Skip("restart test")
	}
	image := buildImages(t, 1)[0]
	drv, err := sandbox.NewDockerDriver(slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() { _ = drv.Close() })
	fake := fakeprovider.New(t)
	opts := restartOpts(t, fake, "")
	a := testenv.Start(t, opts)
	pid := a.Profile(t, map[string]any{"name": "main", "primary_provider": "primary", "available_sandboxes": []string{image}})
	wctx, wcancel := context.WithTimeout(context.Background(), time.Minute)
	defer wcancel()
	require.NoError(t, a.Parts.Services.Provisioner().Wait(wctx, pid))
	_, key := a.Key(t, pid)
	sid, sk := a.Open(t, key, open(image))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		list, _ := drv.List(ctx, sandbox.LabelSession+"="+sid)
		for _, c := range list {
			_ = drv.Stop(ctx, c.ID)
		}
	})
	a.Call(t, sid, sk, "session.registerDriver", nil)
	started := testenv.Terminal(t, a.Call(t, sid, sk, "session.startRemoteSandbox", map[string]any{"image": image}))
	sbID := result(t, started)["sandbox_id"].(string)
	return sandboxRestart{drv: drv, fake: fake, opts: opts, a: a, sid: sid, sk: sk, sbID: sbID}
}

func sendBody(content string) map[string]any {
	return map[string]any{"jsonrpc": "2.0", "id": 1, "method": "session.sendMessage", "params": map[string]any{"message": map[string]any{"content": content}}}
}

// finishedTurn waits on a new server for the session's turn to end and
// returns the whole log.
func finishedTurn(t *testing.T, ctx context.Context, srv *testenv.Server, sid, sk string) []map[string]any {
	t.Helper()
	obs := srv.RPCStream(t, ctx, sid, sk, map[string]any{"jsonrpc": "2.0", "id": 2, "method": "session.subscribe", "params": map[string]any{}})
	defer obs.Close()
	waitEvent(t, obs, "server.message.send")
	r := srv.Client(t, http.MethodGet, "/api/v1/sessions/"+sid+"/events?limit=200", sk, nil)
	require.Equal(t, http.StatusOK, r.Status)
	var out []map[string]any
	for _, it := range r.Body["items"].([]any) {
		out = append(out, it.(map[string]any))
	}
	return out
}

func countTypes(evs []map[string]any) map[string]int {
	out := map[string]int{}
	for _, e := range evs {
		out[e["event_type"].(string)]++
	}
	return out
}

// TestMCPCallInterruptedByRestartIsRetried stops the server while an MCP
// call is in flight: the call is retried on the next server, not answered
// with the cancellation as an error result.
func TestMCPCallInterruptedByRestartIsRetried(t *testing.T) {
	if testing.Short() {
		t.Skip("restart test")
	}
	release := filepath.Join(t.TempDir(), "release")
	t.Setenv(fsReleaseEnv, release)
	fake := fakeprovider.New(t)
	opts := restartOpts(t, fake, fsStdioTOML(t, "fs"))
	a := testenv.Start(t, opts)
	pid := a.Profile(t, map[string]any{"name": "main", "primary_provider": "primary", "mcp_servers": []string{"fs"}})
	_, key := a.Key(t, pid)
	sid, sk := a.Open(t, key, nil)
	a.Call(t, sid, sk, "session.registerDriver", nil)
	fake.Enqueue(fakeprovider.ToolUse("tu_h", "hang", nil), fakeprovider.Text("after restart"))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stream := a.RPCStream(t, ctx, sid, sk, sendBody("hang"))
	waitEvent(t, stream, "mcp.request")
	stream.Close()
	a.Stop() // mid MCP call
	require.Empty(t, fsChildren(t), "the stopped server closed its MCP processes")
	require.NoError(t, os.WriteFile(release, nil, 0o600))

	b := testenv.Start(t, opts)
	evs := finishedTurn(t, ctx, b, sid, sk)
	counts := countTypes(evs)
	for _, typ := range []string{"tool.call", "mcp.request", "mcp.response", "tool.result", "server.message.send"} {
		assert.Equal(t, 1, counts[typ], typ)
	}
	res := ofType(evs, "tool.result")
	require.Len(t, res, 1)
	assert.Equal(t, map[string]any{"tool_use_id": "tu_h", "dispatch": "mcp", "server_name": "fs", "is_error": false, "content": textBlocks("released")}, payload(res[0]))
	assert.Equal(t, "after restart", onlyText(t, payload(ofType(evs, "server.message.send")[0])["content"]))
}

// TestSandboxExecInterruptedByRestartIsRetried is the Auto-mode sandbox
// twin: the retry on the next server collects the command the stopped one
// started (it kept running in the container) and never starts it again.
func TestSandboxExecInterruptedByRestartIsRetried(t *testing.T) {
	rs := startSandboxRestart(t, func(string) map[string]any { return map[string]any{"sandbox_tools": []any{shellTool}} })
	drv, fake, opts, a, sid, sk, sbID := rs.drv, rs.fake, rs.opts, rs.a, rs.sid, rs.sk, rs.sbID
	// The counter shows how many times the command started.
	cmd := "echo run >>/tmp/counter; until [ -e /tmp/release ]; do sleep 0.1; done; echo released; wc -l </tmp/counter"
	fake.Enqueue(fakeprovider.ToolUse("tu_s", "run_shell_command", map[string]any{"command": cmd}), fakeprovider.Text("after restart"))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stream := a.RPCStream(t, ctx, sid, sk, sendBody("wait"))
	waitEvent(t, stream, "sandbox.request")
	require.Eventually(t, func() bool {
		r, err := drv.Exec(ctx, sbID, "cat /tmp/counter 2>/dev/null", nil)
		return err == nil && r.Stdout == "run\n"
	}, 30*time.Second, 50*time.Millisecond)
	stream.Close()
	a.Stop() // mid exec
	_, err := drv.Exec(ctx, sbID, "touch /tmp/release", nil)
	require.NoError(t, err)

	b := testenv.Start(t, opts)
	evs := finishedTurn(t, ctx, b, sid, sk)
	counts := countTypes(evs)
	for _, typ := range []string{"tool.call", "sandbox.request", "sandbox.response", "tool.result", "server.message.send"} {
		assert.Equal(t, 1, counts[typ], typ)
	}
	assert.Zero(t, counts["session.sandbox.error"], "a stopping worker is not a sandbox failure")
	res := ofType(evs, "tool.result")
	require.Len(t, res, 1)
	assert.Equal(t, map[string]any{"tool_use_id": "tu_s", "dispatch": "sandbox", "is_error": false, "content": textBlocks("released\n1\n")}, payload(res[0]),
		"the retry collected the first run instead of starting the command again")
	counter, err := drv.Exec(ctx, sbID, "cat /tmp/counter", nil)
	require.NoError(t, err)
	assert.Equal(t, "run\n", counter.Stdout, "the command ran exactly once")

	r := b.Client(t, http.MethodDelete, "/api/v1/sessions/"+sid, sk, nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	list, err := drv.List(ctx, sandbox.LabelSession+"="+sid)
	require.NoError(t, err)
	assert.Empty(t, list, "the new server stopped the sandbox the old one started")
}
