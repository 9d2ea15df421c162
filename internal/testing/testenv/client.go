package testenv

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Response is a decoded HTTP response.
type Response struct {
	Status int
	Body   map[string]any
	Raw    []byte
}

// Do sends a JSON request with an optional bearer token.
func Do(t testing.TB, method, url, token string, body any) Response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = bytes.NewBufferString(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		buf, err := json.Marshal(b)
		require.NoError(t, err)
		rd = bytes.NewReader(buf)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	out := Response{Status: resp.StatusCode, Raw: raw}
	if len(raw) > 0 {
		_ = json.Unmarshal(raw, &out.Body)
	}
	return out
}

// Admin calls the admin API with the server's admin key.
func (s *Server) Admin(t testing.TB, method, path string, body any) Response {
	t.Helper()
	return Do(t, method, s.AdminURL+path, s.AdminKey, body)
}

// Client calls the client API.
func (s *Server) Client(t testing.TB, method, path, token string, body any) Response {
	t.Helper()
	return Do(t, method, s.ClientURL+path, token, body)
}

// Profile creates a profile and returns its id.
func (s *Server) Profile(t testing.TB, body map[string]any) string {
	t.Helper()
	r := s.Admin(t, http.MethodPost, "/admin/v1/profiles", body)
	require.Equal(t, http.StatusCreated, r.Status, string(r.Raw))
	return r.Body["id"].(string)
}

// Key creates a client key on a profile and returns (id, plaintext).
func (s *Server) Key(t testing.TB, profileID string) (string, string) {
	t.Helper()
	r := s.Admin(t, http.MethodPost, "/admin/v1/keys", map[string]any{"name": "test", "profile_id": profileID})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Raw))
	return r.Body["id"].(string), r.Body["key"].(string)
}

// Open opens a session and returns (session id, session key).
func (s *Server) Open(t testing.TB, clientKey string, body map[string]any) (string, string) {
	t.Helper()
	if body == nil {
		body = map[string]any{}
	}
	r := s.Client(t, http.MethodPost, "/api/v1/sessions", clientKey, body)
	require.Equal(t, http.StatusCreated, r.Status, string(r.Raw))
	return r.Body["session_id"].(string), r.Body["session_key"].(string)
}

// Join joins a session with another client key (body: its declarations,
// nil for none) and returns the new session key.
func (s *Server) Join(t testing.TB, sessionID, clientKey string, body map[string]any) string {
	t.Helper()
	if body == nil {
		body = map[string]any{}
	}
	r := s.Client(t, http.MethodPost, "/api/v1/sessions/"+sessionID+"/join", clientKey, body)
	require.Equal(t, http.StatusCreated, r.Status, string(r.Raw))
	return r.Body["session_key"].(string)
}

// Stream is an open /rpc NDJSON response.
type Stream struct {
	resp  *http.Response
	lines chan map[string]any
	errc  chan error
}

// RPCStream posts a JSON-RPC request and returns the live stream.
func (s *Server) RPCStream(t testing.TB, ctx context.Context, sessionID, sessionKey string, body any) *Stream {
	t.Helper()
	return s.RPCStreamHeader(t, ctx, sessionID, sessionKey, body, nil)
}

// RPCStreamHeader is RPCStream with extra request headers.
func (s *Server) RPCStreamHeader(t testing.TB, ctx context.Context, sessionID, sessionKey string, body any, header http.Header) *Stream {
	t.Helper()
	buf, err := json.Marshal(body)
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.ClientURL+"/api/v1/sessions/"+sessionID+"/rpc", bytes.NewReader(buf))
	require.NoError(t, err)
	for k, vs := range header {
		req.Header[k] = vs
	}
	req.Header.Set("Authorization", "Bearer "+sessionKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	st := &Stream{resp: resp, lines: make(chan map[string]any, 1024), errc: make(chan error, 1)}
	go func() {
		defer close(st.lines)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				st.errc <- err
				return
			}
			st.lines <- m
		}
		st.errc <- sc.Err()
	}()
	return st
}

// Header is the stream response's header.
func (st *Stream) Header() http.Header { return st.resp.Header }

// Status is the HTTP status of the stream response.
func (st *Stream) Status() int { return st.resp.StatusCode }

// Next returns the next object, or nil when the stream ended or timeout hit.
func (st *Stream) Next(timeout time.Duration) map[string]any {
	select {
	case m, ok := <-st.lines:
		if !ok {
			return nil
		}
		return m
	case <-time.After(timeout):
		return nil
	}
}

// Lines returns the channel of decoded objects (closed at end of stream).
func (st *Stream) Lines() <-chan map[string]any { return st.lines }

// Close ends the stream.
func (st *Stream) Close() { st.resp.Body.Close() }

// RPC sends a request and collects every object until the stream ends.
func (s *Server) RPC(t testing.TB, sessionID, sessionKey string, body any) []map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st := s.RPCStream(t, ctx, sessionID, sessionKey, body)
	defer st.Close()
	require.Equal(t, http.StatusOK, st.Status())
	var out []map[string]any
	for m := range st.lines {
		out = append(out, m)
	}
	return out
}

// Call sends {jsonrpc, id:1, method, params} and returns all objects.
func (s *Server) Call(t testing.TB, sessionID, sessionKey, method string, params any) []map[string]any {
	t.Helper()
	if params == nil {
		params = map[string]any{}
	}
	return s.RPC(t, sessionID, sessionKey, map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
}

// Terminal returns the object carrying an id (the last one), failing if absent.
func Terminal(t testing.TB, objs []map[string]any) map[string]any {
	t.Helper()
	require.NotEmpty(t, objs)
	last := objs[len(objs)-1]
	_, hasID := last["id"]
	require.True(t, hasID, "last object has no id: %v", last)
	return last
}

// EventTypes lists event_type of every session.event notification.
func EventTypes(objs []map[string]any) []string {
	var out []string
	for _, o := range objs {
		if o["method"] == "session.event" {
			out = append(out, o["params"].(map[string]any)["event_type"].(string))
		}
	}
	return out
}
