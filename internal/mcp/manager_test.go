package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/config"
	"github.com/bae-go/bae-go/internal/lib/childenv"
	"github.com/bae-go/bae-go/internal/testing/testlog"
)

type fixture struct {
	m    *Manager
	logs *testlog.Buffer
}

// newFixture builds a Manager over the given registry and environment and
// closes it at test end.
func newFixture(t *testing.T, servers []ServerConfig, env map[string]string, tweak ...func(*Options)) fixture {
	t.Helper()
	reg := make(map[string]ServerConfig, len(servers))
	for _, s := range servers {
		reg[s.Name] = s
	}
	logs := &testlog.Buffer{}
	opts := Options{
		Lookup: func(name string) (ServerConfig, bool) { s, ok := reg[name]; return s, ok },
		Env:    func(k string) (string, bool) { v, ok := env[k]; return v, ok },
		Log:    slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	for _, f := range tweak {
		f(&opts)
	}
	m := New(opts)
	t.Cleanup(m.Close)
	return fixture{m: m, logs: logs}
}

func echoStdio(t *testing.T, name string) ServerConfig {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	return ServerConfig{Name: name, Transport: TransportStdio, Command: exe, Args: []string{echoServerArg}, Env: childRaceEnv()}
}

// childRaceEnv keeps a child built with -race from lingering 1s at exit,
// which would make every close take a second. The child's environment is
// minimal, so this must be passed through the entry's env.
func childRaceEnv() map[string]string {
	return map[string]string{"GORACE": "atexit_sleep_ms=0"}
}

func toolNames(t *testing.T, raw json.RawMessage) []string {
	t.Helper()
	var tools []Tool
	require.NoError(t, json.Unmarshal(raw, &tools))
	names := make([]string, 0, len(tools))
	for _, tl := range tools {
		names = append(names, tl.Server+"/"+tl.Name)
	}
	return names
}

// callText calls a tool and returns its single text block.
func callText(t *testing.T, m *Manager, session, server, tool, input string) string {
	t.Helper()
	out, err := m.CallTool(context.Background(), session, server, tool, json.RawMessage(input))
	require.NoError(t, err)
	var res struct {
		Content []struct{ Type, Text string }
		IsError bool
	}
	require.NoError(t, json.Unmarshal(out, &res))
	require.False(t, res.IsError, "result: %s", out)
	require.Len(t, res.Content, 1, "result: %s", out)
	require.Equal(t, "text", res.Content[0].Type)
	return res.Content[0].Text
}

func serverPID(t *testing.T, m *Manager, session, server string) int {
	t.Helper()
	pid, err := strconv.Atoi(callText(t, m, session, server, "pid", `{}`))
	require.NoError(t, err)
	return pid
}

// processGone reports whether pid no longer exists. A zombie (exited but not
// reaped) still answers signal 0, so true also proves it was reaped.
func processGone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

var echoTools = []string{
	"echo/echo", "echo/list_files", "echo/crash", "echo/fail", "echo/pid", "echo/structured", "echo/env", "echo/hang",
}

func TestStdioDiscoverAndCall(t *testing.T) {
	f := newFixture(t, []ServerConfig{echoStdio(t, "echo")}, nil)
	ctx := context.Background()

	raw, err := f.m.DiscoverTools(ctx, "ses_1", []string{"echo"})
	require.NoError(t, err)
	assert.ElementsMatch(t, echoTools, toolNames(t, raw))

	var tools []map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(raw, &tools))
	byName := map[string]map[string]json.RawMessage{}
	for _, tl := range tools {
		var name string
		require.NoError(t, json.Unmarshal(tl["name"], &name))
		byName[name] = tl
	}
	echo := byName["echo"]
	assert.JSONEq(t, `"echo"`, string(echo["server"]))
	assert.JSONEq(t, `"Echo the text argument back"`, string(echo["description"]))
	assert.JSONEq(t, `{"type":"object","properties":{"text":{"type":"string","description":"text to echo"}},"required":["text"]}`,
		string(echo["input_schema"]))
	listFiles := byName["list_files"]
	require.Contains(t, listFiles, "description")
	assert.Equal(t, "null", string(listFiles["description"]))
	assert.JSONEq(t, `{"type":"object","properties":{},"required":[]}`, string(listFiles["input_schema"]))

	out, err := f.m.CallTool(ctx, "ses_1", "echo", "echo", json.RawMessage(`{"text":"hello"}`))
	require.NoError(t, err)
	assert.JSONEq(t, `{"content":[{"type":"text","text":"hello"}],"isError":false}`, string(out))

	assert.Equal(t, "README.md\ndata.csv", callText(t, f.m, "ses_1", "echo", "list_files", ``))

	out, err = f.m.CallTool(ctx, "ses_1", "echo", "fail", nil)
	require.NoError(t, err, "an isError result is not a Go error")
	assert.JSONEq(t, `{"content":[{"type":"text","text":"boom"}],"isError":true}`, string(out))

	out, err = f.m.CallTool(ctx, "ses_1", "echo", "structured", nil)
	require.NoError(t, err)
	assert.JSONEq(t, `{"content":[{"type":"text","text":"2 files"}],"isError":false,
		"structuredContent":{"count":2,"big":9007199254740993}}`, string(out))
	assert.Contains(t, string(out), "9007199254740993", "large integers keep their precision")

	// Discovery's connection is the one calls use: one process throughout.
	pid := serverPID(t, f.m, "ses_1", "echo")
	raw, err = f.m.DiscoverTools(ctx, "ses_1", []string{"echo"})
	require.NoError(t, err)
	assert.ElementsMatch(t, echoTools, toolNames(t, raw))
	assert.Equal(t, pid, serverPID(t, f.m, "ses_1", "echo"))
}

func TestDiscoverSkipsUnknownAndFailingServers(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close() // a port nothing listens on any more

	f := newFixture(t, []ServerConfig{
		echoStdio(t, "echo"),
		{Name: "missing-bin", Transport: TransportStdio, Command: "/nonexistent/mcp-server-binary"},
		{Name: "unreachable", Transport: TransportHTTP, URL: deadURL + "/mcp"},
		{Name: "unreachable-sse", Transport: TransportSSE, URL: deadURL + "/sse"},
		{Name: "needs-token", Transport: TransportHTTP, URL: deadURL + "/mcp",
			Headers: map[string]string{"Authorization": "Bearer ${UNSET_MCP_TOKEN}"}},
		{Name: "bogus", Transport: "carrier-pigeon"},
	}, nil)

	raw, err := f.m.DiscoverTools(context.Background(), "ses_1",
		[]string{"nope", "missing-bin", "unreachable", "echo", "unreachable-sse", "needs-token", "bogus", "echo"})
	require.NoError(t, err)
	assert.ElementsMatch(t, echoTools, toolNames(t, raw), "only the healthy server's tools, once")

	logs := f.logs.String()
	assert.Contains(t, logs, `configured MCP server not found in registry; skipping`)
	assert.Contains(t, logs, `mcp_server_name=nope`)
	for _, name := range []string{"missing-bin", "unreachable", "unreachable-sse", "needs-token", "bogus"} {
		assert.Contains(t, logs, "mcp_server_name="+name, "failure of %s logged", name)
	}
	assert.Contains(t, logs, `UNSET_MCP_TOKEN`)

	// Nothing discovered at all is an empty array, not null.
	raw, err = f.m.DiscoverTools(context.Background(), "ses_2", []string{"nope"})
	require.NoError(t, err)
	assert.JSONEq(t, `[]`, string(raw))
}

func TestDiscoverKeepsServerOrder(t *testing.T) {
	f := newFixture(t, []ServerConfig{echoStdio(t, "a"), echoStdio(t, "b")}, nil)
	raw, err := f.m.DiscoverTools(context.Background(), "ses_1", []string{"b", "a"})
	require.NoError(t, err)
	var tools []Tool
	require.NoError(t, json.Unmarshal(raw, &tools))
	require.Len(t, tools, 2*len(echoTools))
	for i, tl := range tools {
		want := "b"
		if i >= len(echoTools) {
			want = "a"
		}
		assert.Equal(t, want, tl.Server, "tool %d", i)
	}
}

func TestCallToolConnectsOnDemand(t *testing.T) {
	// As on a replica that never ran discovery for this session.
	f := newFixture(t, []ServerConfig{echoStdio(t, "echo")}, nil)
	assert.Equal(t, "hi", callText(t, f.m, "ses_1", "echo", "echo", `{"text":"hi"}`))
}

func TestCallToolConcurrentFirstCallsShareOneProcess(t *testing.T) {
	f := newFixture(t, []ServerConfig{echoStdio(t, "echo")}, nil)
	const n = 8
	pids := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			out, err := f.m.CallTool(context.Background(), "ses_1", "echo", "pid", nil)
			if !assert.NoError(t, err) {
				return
			}
			var res struct{ Content []struct{ Text string } }
			if assert.NoError(t, json.Unmarshal(out, &res)) && assert.Len(t, res.Content, 1) {
				pids[i], _ = strconv.Atoi(res.Content[0].Text)
			}
		})
	}
	wg.Wait()
	for _, pid := range pids {
		assert.Equal(t, pids[0], pid)
	}
	assert.NotZero(t, pids[0])
}

func TestCallToolReconnectsAfterStdioCrash(t *testing.T) {
	f := newFixture(t, []ServerConfig{echoStdio(t, "echo")}, nil)
	_, err := f.m.DiscoverTools(context.Background(), "ses_1", []string{"echo"})
	require.NoError(t, err)
	pid1 := serverPID(t, f.m, "ses_1", "echo")

	_, err = f.m.CallTool(context.Background(), "ses_1", "echo", "crash", nil)
	require.Error(t, err)
	var te *TransportError
	require.ErrorAs(t, err, &te)
	assert.Equal(t, "echo", te.Server)
	assert.Contains(t, err.Error(), "stdio process exited unexpectedly")
	assert.Contains(t, err.Error(), "exit status 3")
	assert.True(t, processGone(pid1), "crashed process reaped")

	assert.Equal(t, "again", callText(t, f.m, "ses_1", "echo", "echo", `{"text":"again"}`))
	pid2 := serverPID(t, f.m, "ses_1", "echo")
	assert.NotEqual(t, pid1, pid2)
}

func TestCallTimeoutDropsWedgedConnection(t *testing.T) {
	f := newFixture(t, []ServerConfig{echoStdio(t, "echo")}, nil,
		func(o *Options) { o.CallTimeout = 300 * time.Millisecond })
	pid1 := serverPID(t, f.m, "ses_1", "echo")

	_, err := f.m.CallTool(context.Background(), "ses_1", "echo", "hang", nil)
	var te *TransportError
	require.ErrorAs(t, err, &te)
	assert.Contains(t, err.Error(), "no reply")
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.True(t, processGone(pid1), "wedged process terminated and reaped")

	assert.NotEqual(t, pid1, serverPID(t, f.m, "ses_1", "echo"))
}

func TestCallToolCallerCancelKeepsConnection(t *testing.T) {
	f := newFixture(t, []ServerConfig{echoStdio(t, "echo")}, nil)
	pid := serverPID(t, f.m, "ses_1", "echo")

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := f.m.CallTool(ctx, "ses_1", "echo", "hang", nil)
		done <- err
	}()
	// The hang request may or may not have been sent yet; either way the
	// caller's cancellation must not cost the session its connection.
	cancel()
	err := <-done
	require.ErrorIs(t, err, context.Canceled)
	var te *TransportError
	assert.False(t, errors.As(err, &te))
	assert.Equal(t, pid, serverPID(t, f.m, "ses_1", "echo"))
}

func TestCallToolErrors(t *testing.T) {
	f := newFixture(t, []ServerConfig{
		echoStdio(t, "echo"),
		{Name: "needs-token", Transport: TransportHTTP, URL: "http://127.0.0.1:1/mcp",
			Headers: map[string]string{"Authorization": "Bearer ${UNSET_MCP_TOKEN}"}},
	}, nil)
	ctx := context.Background()

	_, err := f.m.CallTool(ctx, "ses_1", "nope", "echo", nil)
	assert.ErrorIs(t, err, ErrUnknownServer)

	_, err = f.m.CallTool(ctx, "ses_1", "needs-token", "echo", nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "UNSET_MCP_TOKEN")

	_, err = f.m.CallTool(ctx, "ses_1", "echo", "echo", json.RawMessage(`[1,2]`))
	assert.ErrorContains(t, err, "JSON object")

	// An unknown tool is a JSON-RPC error reply: the connection survives.
	pid := serverPID(t, f.m, "ses_1", "echo")
	_, err = f.m.CallTool(ctx, "ses_1", "echo", "no_such_tool", nil)
	require.Error(t, err)
	var te *TransportError
	assert.False(t, errors.As(err, &te), "not a transport error: %v", err)
	assert.Equal(t, pid, serverPID(t, f.m, "ses_1", "echo"))
}

func TestCloseSessionTerminatesProcesses(t *testing.T) {
	f := newFixture(t, []ServerConfig{echoStdio(t, "a"), echoStdio(t, "b")}, nil)
	ctx := context.Background()
	for _, s := range []string{"ses_1", "ses_2"} {
		_, err := f.m.DiscoverTools(ctx, s, []string{"a", "b"})
		require.NoError(t, err)
	}
	s1a, s1b := serverPID(t, f.m, "ses_1", "a"), serverPID(t, f.m, "ses_1", "b")
	s2a := serverPID(t, f.m, "ses_2", "a")
	assert.NotEqual(t, s1a, s1b)
	assert.NotEqual(t, s1a, s2a, "one process per (session, server)")

	f.m.CloseSession("ses_1")
	assert.True(t, processGone(s1a), "ses_1/a gone")
	assert.True(t, processGone(s1b), "ses_1/b gone")
	assert.False(t, processGone(s2a), "ses_2 untouched")
	assert.Equal(t, s2a, serverPID(t, f.m, "ses_2", "a"))
	f.m.CloseSession("ses_1") // idempotent

	f.m.Close()
	assert.True(t, processGone(s2a), "Close terminates everything")
	_, err := f.m.CallTool(ctx, "ses_2", "a", "pid", nil)
	assert.ErrorIs(t, err, ErrClosed)
	_, err = f.m.DiscoverTools(ctx, "ses_2", []string{"a"})
	assert.ErrorIs(t, err, ErrClosed)
}

// requireBearer rejects requests without the expected Authorization header.
func requireBearer(token string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func TestRemoteTransportsWithHeaderToken(t *testing.T) {
	const secret = "s3cret-token-value"
	streamable := httptest.NewServer(requireBearer(secret, server.NewStreamableHTTPServer(newEchoServer())))
	t.Cleanup(streamable.Close)
	sse := httptest.NewServer(requireBearer(secret, server.NewSSEServer(newEchoServer())))
	t.Cleanup(sse.Close)

	for _, tc := range []struct{ transport, url string }{
		{TransportHTTP, streamable.URL + "/mcp"},
		{TransportSSE, sse.URL + "/sse"},
	} {
		t.Run(tc.transport, func(t *testing.T) {
			cfg := ServerConfig{Name: "echo", Transport: tc.transport, URL: tc.url,
				Headers: map[string]string{"Authorization": "Bearer ${MCP_TOKEN}"}}

			f := newFixture(t, []ServerConfig{cfg}, map[string]string{"MCP_TOKEN": secret})
			raw, err := f.m.DiscoverTools(context.Background(), "ses_1", []string{"echo"})
			require.NoError(t, err)
			assert.ElementsMatch(t, echoTools, toolNames(t, raw))
			assert.Equal(t, "over "+tc.transport, callText(t, f.m, "ses_1", "echo", "echo",
				`{"text":"over `+tc.transport+`"}`))
			out, err := f.m.CallTool(context.Background(), "ses_1", "echo", "fail", nil)
			require.NoError(t, err)
			assert.JSONEq(t, `{"content":[{"type":"text","text":"boom"}],"isError":true}`, string(out))
			f.m.CloseSession("ses_1")
			assert.NotContains(t, f.logs.String(), secret)

			// A wrong token: skipped in discovery, an error for calls, and
			// still never logged.
			wrong := newFixture(t, []ServerConfig{cfg}, map[string]string{"MCP_TOKEN": "wrong-token-value"})
			raw, err = wrong.m.DiscoverTools(context.Background(), "ses_1", []string{"echo"})
			require.NoError(t, err)
			assert.JSONEq(t, `[]`, string(raw))
			_, err = wrong.m.CallTool(context.Background(), "ses_1", "echo", "echo", json.RawMessage(`{"text":"x"}`))
			require.Error(t, err)
			assert.Contains(t, wrong.logs.String(), "mcp_server_name=echo")
			assert.NotContains(t, wrong.logs.String(), "wrong-token-value")

			// An unset variable: skipped, with the variable named.
			unset := newFixture(t, []ServerConfig{cfg}, nil)
			raw, err = unset.m.DiscoverTools(context.Background(), "ses_1", []string{"echo"})
			require.NoError(t, err)
			assert.JSONEq(t, `[]`, string(raw))
			assert.Contains(t, unset.logs.String(), "MCP_TOKEN")
		})
	}
}

// swappable lets a test replace the handler behind a live URL, simulating a
// remote MCP server restart that forgets its sessions.
type swappable struct{ h atomic.Pointer[http.Handler] }

func (s *swappable) set(h http.Handler) { s.h.Store(&h) }
func (s *swappable) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(*s.h.Load()).ServeHTTP(w, r)
}

func TestStreamableHTTPReconnectsAfterServerRestart(t *testing.T) {
	sw := &swappable{}
	sw.set(server.NewStreamableHTTPServer(newEchoServer(), server.WithStateful(true)))
	ts := httptest.NewServer(sw)
	t.Cleanup(ts.Close)
	f := newFixture(t, []ServerConfig{{Name: "echo", Transport: TransportHTTP, URL: ts.URL + "/mcp"}}, nil)

	assert.Equal(t, "one", callText(t, f.m, "ses_1", "echo", "echo", `{"text":"one"}`))
	sw.set(server.NewStreamableHTTPServer(newEchoServer(), server.WithStateful(true)))

	_, err := f.m.CallTool(context.Background(), "ses_1", "echo", "echo", json.RawMessage(`{"text":"two"}`))
	var te *TransportError
	require.ErrorAs(t, err, &te, "the old MCP session is unknown to the restarted server")
	assert.Equal(t, "three", callText(t, f.m, "ses_1", "echo", "echo", `{"text":"three"}`))
}

// exited reports whether pid, which need not be our child, has terminated:
// gone entirely, or a zombie awaiting a reaper that is not us.
func exited(pid int) bool {
	if processGone(pid) {
		return true
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	// Format: "pid (comm) state ..."; comm may contain spaces.
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}

func TestCloseSessionKillsWrapperGrandchildren(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no procfs")
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	pidFile := filepath.Join(t.TempDir(), "grandchild.pid")
	// Like npx: a wrapper whose helper outlives the server it started.
	script := `sleep 1000 </dev/null >/dev/null 2>&1 & echo $! > "$1"; exec "$0" ` + echoServerArg
	f := newFixture(t, []ServerConfig{{Name: "wrapped", Transport: TransportStdio, Command: sh,
		Args: []string{"-c", script, exe, pidFile}, Env: childRaceEnv()}}, nil)

	serverPid := serverPID(t, f.m, "ses_1", "wrapped")
	b, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	helperPid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Kill(helperPid, syscall.SIGKILL) }) // no leak if this test fails
	require.False(t, exited(helperPid), "helper running before close")

	f.m.CloseSession("ses_1")
	assert.True(t, processGone(serverPid), "server reaped")
	// SIGKILL lands asynchronously and another process reaps the orphan, so
	// poll for the OS to finish rather than expecting it instantly.
	assert.Eventually(t, func() bool { return exited(helperPid) }, 5*time.Second, 5*time.Millisecond,
		"helper killed with the process group")
}

func TestIdleTimeoutClosesUnusedConnections(t *testing.T) {
	f := newFixture(t, []ServerConfig{echoStdio(t, "echo")}, nil,
		func(o *Options) { o.IdleTimeout = 50 * time.Millisecond })
	pid := serverPID(t, f.m, "ses_1", "echo")
	// The reaper runs on its own ticker; wait for its effect.
	require.Eventually(t, func() bool { return processGone(pid) }, 5*time.Second, 5*time.Millisecond)
	assert.NotEqual(t, pid, serverPID(t, f.m, "ses_1", "echo"), "reconnects on demand")
}

func TestIdleTimeoutSparesCallsInFlight(t *testing.T) {
	f := newFixture(t, []ServerConfig{echoStdio(t, "echo")}, nil, func(o *Options) {
		o.IdleTimeout = 10 * time.Millisecond
		o.CallTimeout = 300 * time.Millisecond
	})
	// Had the reaper closed the connection under the call, the error would
	// be the process exiting, not the call's own timeout.
	_, err := f.m.CallTool(context.Background(), "ses_1", "echo", "hang", nil)
	assert.ErrorContains(t, err, "no reply")
}

// The registry's method value must plug straight into Options.Lookup.
var _ = Options{Lookup: (&config.File{}).MCPServer}

// LiveSessions counts sessions with an open connection: not one whose only
// server failed to connect, and not once the session closed.
func TestLiveSessions(t *testing.T) {
	f := newFixture(t, []ServerConfig{echoStdio(t, "echo"), {Name: "broken", Transport: TransportStdio, Command: "/nonexistent/mcp-server"}}, nil)
	ctx := context.Background()
	assert.Equal(t, 0, f.m.LiveSessions())
	_, err := f.m.DiscoverTools(ctx, "ses_1", []string{"echo", "broken"})
	require.NoError(t, err)
	_, err = f.m.DiscoverTools(ctx, "ses_2", []string{"broken"})
	require.NoError(t, err)
	_, err = f.m.DiscoverTools(ctx, "ses_3", []string{"echo"})
	require.NoError(t, err)
	assert.Equal(t, 2, f.m.LiveSessions())
	f.m.CloseSession("ses_1")
	assert.Equal(t, 1, f.m.LiveSessions())
	f.m.Close()
	assert.Equal(t, 0, f.m.LiveSessions())
}

// A stdio MCP server gets PATH, HOME, the locale and its entry's own env,
// never the rest of the server's environment: the database URL, the console
// password and provider tokens stay out of reach of a third-party server.
func TestStdioServerGetsMinimalEnvironment(t *testing.T) {
	secrets := map[string]string{
		"BAE_DATABASE_URL":     "postgres://bae:db-secret@db/bae",
		"BAE_CONSOLE_PASSWORD": "console-secret-password",
		"ANTHROPIC_API_KEY":    "sk-ant-secret",
		"OPENAI_API_KEY":       "sk-openai-secret",
		"WORDS_API_TOKEN":      "words-secret", // only named by the entry
	}
	for k, v := range secrets {
		t.Setenv(k, v)
	}
	t.Setenv("LC_MESSAGES", "C")
	t.Setenv("HOME", "/home/bae")
	cfg := echoStdio(t, "echo")
	cfg.Env = childRaceEnv()
	cfg.Env["WORDS_TOKEN"] = "${WORDS_API_TOKEN}"
	cfg.Env["WORDS_MODE"] = "plain"
	cfg.Env["HOME"] = "/srv/words"
	f := newFixture(t, []ServerConfig{cfg}, nil, func(o *Options) { o.Env = os.LookupEnv })

	got := map[string]string{}
	for _, kv := range strings.Split(callText(t, f.m, "ses_1", "echo", "env", `{}`), "\n") {
		k, v, _ := strings.Cut(kv, "=")
		_, dup := got[k]
		require.False(t, dup, "%s set twice", k)
		got[k] = v
	}
	for k, v := range secrets {
		assert.NotContains(t, got, k)
		for name, value := range got {
			if name != "WORDS_TOKEN" {
				assert.NotContains(t, value, v, "%s carries %s's value", name, k)
			}
		}
	}
	assert.Equal(t, os.Getenv("PATH"), got["PATH"])
	assert.Equal(t, "C", got["LC_MESSAGES"])
	assert.Equal(t, "/srv/words", got["HOME"], "the entry's env wins")
	assert.Equal(t, "words-secret", got["WORDS_TOKEN"], "a secret handed over through env")
	assert.Equal(t, "plain", got["WORDS_MODE"])
	extra := []string{}
	for k := range got {
		if !childenv.Inherited(k) && cfg.Env[k] == "" {
			extra = append(extra, k)
		}
	}
	assert.Empty(t, extra, "nothing else")
}

// An entry env value naming an unset variable fails the connect, naming it.
func TestStdioEnvUnsetVariable(t *testing.T) {
	cfg := echoStdio(t, "echo")
	cfg.Env["TOKEN"] = "${NOT_SET_ANYWHERE}"
	f := newFixture(t, []ServerConfig{cfg}, nil)
	_, err := f.m.CallTool(context.Background(), "ses_1", "echo", "echo", json.RawMessage(`{"text":"x"}`))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "NOT_SET_ANYWHERE")
}

// A server url's user info and query (a credential) stay out of the log and
// of the error a failed call returns (it becomes the model's tool result).
func TestConnectErrorsRedactURL(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := strings.Replace(dead.URL, "http://", "http://svc:url-password@", 1)
	dead.Close()
	f := newFixture(t, []ServerConfig{
		{Name: "http", Transport: TransportHTTP, URL: deadURL + "/mcp?api_key=query-secret"},
		{Name: "sse", Transport: TransportSSE, URL: deadURL + "/sse?api_key=query-secret"},
	}, nil)
	_, err := f.m.DiscoverTools(context.Background(), "ses_1", []string{"http", "sse"})
	require.NoError(t, err)
	for _, server := range []string{"http", "sse"} {
		_, err = f.m.CallTool(context.Background(), "ses_1", server, "echo", nil)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "127.0.0.1", "the host is still named")
		for _, secret := range []string{"url-password", "query-secret", "svc"} {
			assert.NotContains(t, err.Error(), secret)
		}
	}
	logs := f.logs.String()
	require.Contains(t, logs, "MCP server failed to connect")
	for _, secret := range []string{"url-password", "query-secret"} {
		assert.NotContains(t, logs, secret)
	}
}
