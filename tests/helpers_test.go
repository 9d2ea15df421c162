// Package tests holds end-to-end tests of the session loop: a real baesrv
// (PostgreSQL + embedded Temporal) driven over HTTP with a fake provider.
package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/app"
	"github.com/bae-go/bae-go/internal/telemetry"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/testenv"
	"github.com/bae-go/bae-go/store"
)

// env is one server, one fake provider (lanes "primary" and "fallback"),
// a profile and helpers to drive sessions.
type env struct {
	t    *testing.T
	srv  *testenv.Server
	fake *fakeprovider.Server
	pid  string
}

type envOpts struct {
	turnTimeout  time.Duration
	allowedTools []string
	fallbacks    []string
	extraTOML    string
	// telemetry and serverEnv go to testenv.Options (Telemetry, Env).
	telemetry *telemetry.Telemetry
	serverEnv map[string]string
	// logs receives the server's log (testenv.Options.LogOutput).
	logs io.Writer
}

func newEnv(t *testing.T, o envOpts) *env {
	t.Helper()
	return newEnvWith(t, o, nil)
}

// newEnvWith is newEnv with a hook on the server's parts (testenv.Options.Extend).
func newEnvWith(t *testing.T, o envOpts, extend func(*app.Parts) error) *env {
	t.Helper()
	return newEnvFull(t, fakeprovider.New(t), o, extend)
}

// newEnvOnFake is newEnv on a given fake, with extra configuration.
func newEnvOnFake(t *testing.T, fake *fakeprovider.Server, extraTOML string) *env {
	t.Helper()
	return newEnvFull(t, fake, envOpts{extraTOML: extraTOML}, nil)
}

func newEnvFull(t *testing.T, fake *fakeprovider.Server, o envOpts, extend func(*app.Parts) error) *env {
	t.Helper()
	toml := fmt.Sprintf(`
[[providers.entries]]
name = "primary"
provider = "anthropic"
base_url = %q
model = "claude-fake"
auth_token = "${BAE_FAKE_TOKEN}"
# The fake has no window here: requests are never compacted, as before
# (the compaction tests configure one).
context_window = 100000000

[[providers.entries]]
name = "fallback"
provider = "openai"
base_url = %q
model = "gpt-fake"
auth_token = "literal-token"

[[providers.entries]]
name = "unset-token"
provider = "anthropic"
base_url = %q
model = "claude-fake"
auth_token = "${BAE_TEST_DEFINITELY_UNSET}"
`, fake.Lane("primary").URL(), fake.Lane("fallback").URL(), fake.Lane("primary").URL()) + o.extraTOML
	t.Setenv("BAE_FAKE_TOKEN", "sk-fake-secret")
	srv := testenv.Start(t, testenv.Options{ConfigTOML: toml, TurnTimeout: o.turnTimeout, Extend: extend, Telemetry: o.telemetry, Env: o.serverEnv, LogOutput: o.logs})
	fb := o.fallbacks
	if fb == nil {
		fb = []string{}
	}
	tools := o.allowedTools
	if tools == nil {
		tools = []string{"get_time", "lookup"}
	}
	pid := srv.Profile(t, map[string]any{"name": "main", "primary_provider": "primary", "fallback_providers": fb, "allowed_tools": tools})
	return &env{t: t, srv: srv, fake: fake, pid: pid}
}

// driver is one client key with a session key on a session.
type driver struct {
	e      *env
	keyID  string
	key    string
	sid    string
	sk     string
	nextID int
}

func tool(name string) map[string]any {
	return map[string]any{"name": name, "description": name + " tool", "input_schema": map[string]any{"type": "object"}}
}

// open creates a session with a new client key and registers it.
func (e *env) open(tools ...string) *driver {
	e.t.Helper()
	keyID, key := e.srv.Key(e.t, e.pid)
	decl := []any{}
	for _, n := range tools {
		decl = append(decl, tool(n))
	}
	sid, sk := e.srv.Open(e.t, key, map[string]any{"client_version": "test", "tools": decl})
	d := &driver{e: e, keyID: keyID, key: key, sid: sid, sk: sk}
	d.register()
	return d
}

// join attaches a new client key to d's session and registers it.
func (e *env) join(d *driver, tools ...string) *driver {
	e.t.Helper()
	keyID, key := e.srv.Key(e.t, e.pid)
	decl := []any{}
	for _, n := range tools {
		decl = append(decl, tool(n))
	}
	sk := e.srv.Join(e.t, d.sid, key, map[string]any{"tools": decl})
	j := &driver{e: e, keyID: keyID, key: key, sid: d.sid, sk: sk}
	j.register()
	return j
}

// openFirstAnswered opens a driver's session and has its first message,
// "first", answered ("echo: first").
func (e *env) openFirstAnswered() *driver {
	e.t.Helper()
	d := e.open()
	_, term := d.send("first")
	require.Equal(e.t, "echo: first", firstText(message(term)))
	return d
}

// requireResendAnswered resends text under the Idempotency-Key key and
// requires its turn's answer ("echo: " + text).
func (d *driver) requireResendAnswered(ctx context.Context, key, text string) {
	d.e.t.Helper()
	term := testenv.Terminal(d.e.t, d.keyed(ctx, key, text))
	require.NotNil(d.e.t, term["result"], "the resend of %q: %v", key, term)
	assert.Equal(d.e.t, "echo: "+text, firstText(message(term)))
}

func (d *driver) register() {
	d.e.t.Helper()
	objs := d.e.srv.Call(d.e.t, d.sid, d.sk, "session.registerDriver", nil)
	require.Equal(d.e.t, map[string]any{"registered": true}, testenv.Terminal(d.e.t, objs)["result"])
}

func (d *driver) request(content any) map[string]any {
	d.nextID++
	return map[string]any{"jsonrpc": "2.0", "id": d.nextID, "method": "session.sendMessage", "params": map[string]any{"message": map[string]any{"role": "user", "content": content}}}
}

// send runs one sendMessage and returns (notifications, terminal).
func (d *driver) send(content any) ([]map[string]any, map[string]any) {
	d.e.t.Helper()
	objs := d.e.srv.RPC(d.e.t, d.sid, d.sk, d.request(content))
	term := testenv.Terminal(d.e.t, objs)
	return objs[:len(objs)-1], term
}

// stream starts a sendMessage without waiting for it.
func (d *driver) stream(ctx context.Context, content any) *testenv.Stream {
	return d.e.srv.RPCStream(d.e.t, ctx, d.sid, d.sk, d.request(content))
}

func resultEvents(term map[string]any) []map[string]any {
	var out []map[string]any
	for _, e := range term["result"].(map[string]any)["events"].([]any) {
		out = append(out, e.(map[string]any))
	}
	return out
}

func types(evs []map[string]any) []string {
	out := []string{}
	for _, e := range evs {
		out = append(out, e["event_type"].(string))
	}
	return out
}

func payload(e map[string]any) map[string]any { return e["payload"].(map[string]any) }

func notifications(objs []map[string]any) []map[string]any {
	var out []map[string]any
	for _, o := range objs {
		if o["method"] == "session.event" {
			out = append(out, o["params"].(map[string]any))
		}
	}
	return out
}

// allEvents reads the session's whole log through the client API.
func (d *driver) allEvents() []map[string]any {
	d.e.t.Helper()
	var out []map[string]any
	cursor := ""
	for {
		r := d.e.srv.Client(d.e.t, http.MethodGet, "/api/v1/sessions/"+d.sid+"/events?limit=200&cursor="+cursor, d.sk, nil)
		require.Equal(d.e.t, http.StatusOK, r.Status, string(r.Raw))
		for _, it := range r.Body["items"].([]any) {
			out = append(out, it.(map[string]any))
		}
		if r.Body["next_cursor"] == nil {
			return out
		}
		cursor = r.Body["next_cursor"].(string)
	}
}

func message(term map[string]any) map[string]any {
	return term["result"].(map[string]any)["message"].(map[string]any)
}

func firstText(msg map[string]any) string {
	for _, b := range msg["content"].([]any) {
		if bm := b.(map[string]any); bm["type"] == "text" {
			return bm["text"].(string)
		}
	}
	return ""
}

// openSessionStartedOn opens a session on srv with a driver registered
// and its first message answered there ("warm", from fake): a session's
// workflow starts with its first message, on the replica that sends it,
// so its turns run on srv. It returns the session's id and key.
func openSessionStartedOn(t *testing.T, fake *fakeprovider.Server, srv *testenv.Server) (sid, sk string) {
	t.Helper()
	pid := srv.Profile(t, map[string]any{"name": "main", "primary_provider": "primary"})
	_, client := srv.Key(t, pid)
	sid, sk = srv.Open(t, client, nil)
	srv.Call(t, sid, sk, "session.registerDriver", nil)
	fake.Enqueue(fakeprovider.Text("warm"))
	require.Equal(t, "warm", firstText(message(testenv.Terminal(t, srv.RPC(t, sid, sk, map[string]any{
		"jsonrpc": "2.0", "id": 1, "method": "session.sendMessage", "params": map[string]any{"message": map[string]any{"content": "on A"}},
	})))))
	return sid, sk
}

// sendCounted sends text to d's session through router, served in-process
// on a context that counts PostgreSQL calls (store.CountCalls), so that
// what is counted is the request's own and not its turn's activities'.
// header adds to the request's headers. It returns the stream's last
// object and the calls counted.
func (d *driver) sendCounted(ctx context.Context, router http.Handler, text string, header http.Header) (map[string]any, store.DBCalls) {
	t := d.e.t
	t.Helper()
	body, err := json.Marshal(d.request(text))
	require.NoError(t, err)
	counted, calls := store.CountCalls(ctx)
	req := httptest.NewRequestWithContext(counted, http.MethodPost, "/api/v1/sessions/"+d.sid+"/rpc", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+d.sk)
	req.Header.Set("Content-Type", "application/json")
	for k, vs := range header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	rec := httptest.NewRecorder()
	router.ServeHTTP(rec, req)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	lines := bytes.Split(bytes.TrimSpace(rec.Body.Bytes()), []byte("\n"))
	var term map[string]any
	require.NoError(t, json.Unmarshal(lines[len(lines)-1], &term))
	return term, calls()
}
