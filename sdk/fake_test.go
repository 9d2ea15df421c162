package sdk_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/sdk"
)

// rpcCall is one /rpc request the fake received.
type rpcCall struct {
	Method string
	Params map[string]any
	Raw    json.RawMessage // params
	ID     json.RawMessage
	Header http.Header
}

// fakeBAE is a scripted BAE client port.
type fakeBAE struct {
	t  *testing.T
	ts *httptest.Server

	mu      sync.Mutex
	opens   []map[string]any // bodies of POST /sessions and /join
	calls   []rpcCall
	deletes int
	// rpc answers a call by writing NDJSON lines; nil uses defaultRPC.
	rpc func(w *ndjsonWriter, c rpcCall)
	// before runs ahead of the 200 of a non-registration call: it may set
	// response headers, or answer the call itself (returning true).
	before func(w http.ResponseWriter, c rpcCall) bool
	// register answers session.registerDriver; nil succeeds.
	register func(w *ndjsonWriter, c rpcCall)
	// events backs GET /events.
	events []sdk.Event
	pages  []string // cursors requested
}

// ndjsonWriter writes and flushes one JSON object per line.
type ndjsonWriter struct {
	w http.ResponseWriter
	r *http.Request
}

func (n *ndjsonWriter) line(v any) {
	var b []byte
	switch x := v.(type) {
	case string:
		b = []byte(x)
	default:
		var err error
		b, err = json.Marshal(v)
		if err != nil {
			panic(err)
		}
	}
	_, _ = n.w.Write(append(b, '\n'))
	n.w.(http.Flusher).Flush()
}

func (n *ndjsonWriter) result(c rpcCall, v any) {
	n.line(map[string]any{"jsonrpc": "2.0", "id": c.ID, "result": v})
}

func (n *ndjsonWriter) fail(c rpcCall, code int, msg string) {
	n.line(map[string]any{"jsonrpc": "2.0", "id": c.ID, "error": map[string]any{"code": code, "message": msg}})
}

func (n *ndjsonWriter) event(e sdk.Event) {
	n.line(map[string]any{"jsonrpc": "2.0", "method": "session.event", "params": e})
}

func newFake(t *testing.T) *fakeBAE {
	f := &fakeBAE{t: t}
	f.ts = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.ts.Close)
	return f
}

func (f *fakeBAE) cfg() sdk.Config {
	return sdk.Config{ServerURL: f.ts.URL + "/", ClientKey: "bae_client", ClientVersion: "test/1"}
}

func (f *fakeBAE) rpcCalls(method string) []rpcCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []rpcCall
	for _, c := range f.calls {
		if method == "" || c.Method == method {
			out = append(out, c)
		}
	}
	return out
}

func (f *fakeBAE) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	switch {
	case r.Method == http.MethodPost && (r.URL.Path == "/api/v1/sessions" || strings.HasSuffix(r.URL.Path, "/join")):
		if r.Header.Get("Authorization") != "Bearer bae_client" {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"type":"unauthorized","title":"Unauthorized","status":401,"detail":"invalid or revoked client key"}`))
			return
		}
		var m map[string]any
		require.NoError(f.t, json.Unmarshal(body, &m))
		f.mu.Lock()
		f.opens = append(f.opens, m)
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"session_id":"ses_1","session_key":"bae_ses_1","profile":{"id":"pro_1","name":"main","allowed_tools":["get_time"],"mcp_servers":[],"provider":{"provider":"anthropic","model":"m"}}}`))
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/rpc"):
		if r.Header.Get("Authorization") != "Bearer bae_ses_1" {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"type":"unauthorized","title":"Unauthorized","status":401,"detail":"bad session key"}`))
			return
		}
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		require.NoError(f.t, json.Unmarshal(body, &req))
		c := rpcCall{Method: req.Method, Raw: req.Params, ID: req.ID, Header: r.Header.Clone()}
		_ = json.Unmarshal(req.Params, &c.Params)
		f.mu.Lock()
		f.calls = append(f.calls, c)
		handler, register, before := f.rpc, f.register, f.before
		f.mu.Unlock()
		if before != nil && c.Method != "session.registerDriver" && before(w, c) {
			return
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		out := &ndjsonWriter{w: w, r: r}
		if c.Method == "session.registerDriver" && register != nil {
			register(out, c)
			return
		}
		if c.Method == "session.registerDriver" || handler == nil {
			out.result(c, map[string]any{"registered": true})
			return
		}
		handler(out, c)
	case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/events"):
		f.servePage(w, r)
	case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/participants"):
		_, _ = w.Write([]byte(`{"drivers":["key_a","key_b"]}`))
	case r.Method == http.MethodDelete:
		f.mu.Lock()
		f.deletes++
		f.mu.Unlock()
		_, _ = w.Write([]byte(`{"session_id":"ses_1","state":"closed"}`))
	default:
		http.NotFound(w, r)
	}
}

// servePage pages f.events with integer cursors, like baesrv.
func (f *fakeBAE) servePage(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cursor := r.URL.Query().Get("cursor")
	f.pages = append(f.pages, cursor)
	start := 0
	if cursor != "" {
		_, _ = fmt.Sscan(cursor, &start)
	}
	limit := 50
	if l := r.URL.Query().Get("limit"); l != "" {
		_, _ = fmt.Sscan(l, &limit)
	}
	end := min(start+limit, len(f.events))
	var next any
	if end < len(f.events) {
		next = fmt.Sprint(end)
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"items": f.events[start:end], "next_cursor": next})
}

// ev builds an event for scripts.
func ev(id string, typ sdk.EventType, payload string) sdk.Event {
	if payload == "" {
		payload = "{}"
	}
	return sdk.Event{ID: id, SessionID: "ses_1", ClientKeyID: "key_a", Type: typ, Payload: json.RawMessage(payload)}
}
