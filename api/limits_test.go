package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/testenv"
)

func TestBodyLimitIsConfigurable(t *testing.T) {
	// 1 KiB: far below the 4 MiB default, so a 2 KiB body shows the variable
	// is wired through.
	s := testenv.Start(t, testenv.Options{ConfigTOML: providersTOML, Env: map[string]string{"BAE_MAX_BODY_BYTES": "1024"}})
	pid := s.Profile(t, map[string]any{"name": "main", "primary_provider": "main"})
	_, key := s.Key(t, pid)
	big := map[string]any{"client_version": strings.Repeat("v", 2048)}

	r := s.Client(t, http.MethodPost, "/api/v1/sessions", key, big)
	assertTooLarge(t, r)

	sid, sk := s.Open(t, key, map[string]any{"client_version": strings.Repeat("v", 900)})
	r = s.Client(t, http.MethodPost, "/api/v1/sessions/"+sid+"/join", key, big)
	assertTooLarge(t, r)

	// /rpc answers an oversized body as HTTP too, before any NDJSON.
	r = s.Client(t, http.MethodPost, "/api/v1/sessions/"+sid+"/rpc", sk, map[string]any{
		"jsonrpc": "2.0", "id": 1, "method": "session.registerDriver", "params": map[string]any{"pad": strings.Repeat("p", 2048)},
	})
	assertTooLarge(t, r)

	// Nothing was registered by the rejected call; a small one still works.
	objs := s.Call(t, sid, sk, "session.registerDriver", nil)
	assert.Equal(t, map[string]any{"registered": true}, testenv.Terminal(t, objs)["result"])
}

func assertTooLarge(t *testing.T, r testenv.Response) {
	t.Helper()
	assert.Equal(t, http.StatusRequestEntityTooLarge, r.Status, string(r.Raw))
	assert.Equal(t, "payload_too_large", problemType(r))
	assert.EqualValues(t, http.StatusRequestEntityTooLarge, r.Body["status"])
	assert.Equal(t, "Request Entity Too Large", r.Body["title"])
	assert.Contains(t, r.Body["detail"], "1024 bytes")
}

// rawResponse is what a hand-written HTTP/1.1 client read back.
type rawResponse struct {
	status int
	ctype  string
	body   map[string]any
}

// slowPost sends headers announcing a body of contentLength bytes, then
// the prefix, then (if trickle) one more byte every 20ms, and returns the
// response the server sends before the body is complete. It fails if
// nothing arrives within 15s.
func slowPost(t *testing.T, baseURL, path, token, prefix string, contentLength int, trickle bool) rawResponse {
	t.Helper()
	u, err := url.Parse(baseURL)
	require.NoError(t, err)
	conn, err := net.Dial("tcp", u.Host)
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		path, u.Host, token, contentLength, prefix)
	require.NoError(t, err)

	stop := make(chan struct{})
	defer close(stop)
	if trickle {
		go func() {
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for range contentLength - len(prefix) {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				if _, err := conn.Write([]byte(" ")); err != nil {
					return // the server hung up, as it should
				}
			}
		}()
	}

	// A bound on the test, not a synchronisation: without a body deadline
	// the server never answers and this read times out.
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(15*time.Second)))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err, "server did not answer a stalled body")
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	// The half-read request cannot be followed by another: the server
	// hangs up rather than keep the connection.
	_, err = br.ReadByte()
	assert.ErrorIs(t, err, io.EOF, "connection left open after the body timed out")
	out := rawResponse{status: resp.StatusCode, ctype: resp.Header.Get("Content-Type")}
	require.NoError(t, json.Unmarshal(raw, &out.body), string(raw))
	return out
}

func TestSlowBodyIsCutOff(t *testing.T) {
	const timeout = 300 * time.Millisecond
	s := testenv.Start(t, testenv.Options{ConfigTOML: providersTOML, Env: map[string]string{"BAE_BODY_READ_TIMEOUT": timeout.String()}})
	pid := s.Profile(t, map[string]any{"name": "main", "primary_provider": "main"})
	_, key := s.Key(t, pid)
	sid, sk := s.Open(t, key, nil)

	cases := []struct {
		name, path, token, prefix string
		trickle                   bool
	}{
		{"rest stalled", "/api/v1/sessions", key, `{"client_version":`, false},
		{"rest trickled", "/api/v1/sessions", key, `{"client_version":`, true},
		{"rpc stalled", "/api/v1/sessions/" + sid + "/rpc", sk, `{"jsonrpc":"2.0",`, false},
		{"rpc trickled", "/api/v1/sessions/" + sid + "/rpc", sk, `{"jsonrpc":"2.0",`, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			// 10 000 bytes at one per 20ms would take 200s to arrive.
			r := slowPost(t, s.ClientURL, c.path, c.token, c.prefix, 10000, c.trickle)
			assert.Equal(t, http.StatusRequestTimeout, r.status)
			assert.Equal(t, "application/problem+json", r.ctype)
			assert.Equal(t, "request_timeout", r.body["type"])
			assert.GreaterOrEqual(t, time.Since(start), timeout, "cut off before the deadline")
		})
	}

	// The deadline covers the body only: an open stream outlives it. A
	// subscriber's connection stays open well past the timeout and still
	// receives a later event. (An unknown since_event_id replays from the
	// start, so the event arrives however late the subscription begins.)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sub := s.RPCStream(t, ctx, sid, sk, map[string]any{"jsonrpc": "2.0", "id": 1, "method": "session.subscribe",
		"params": map[string]any{"since_event_id": "evt_unknown"}})
	defer sub.Close()
	require.Equal(t, http.StatusOK, sub.Status())
	<-time.After(3 * timeout) // let the body deadline pass: the property under test
	objs := s.Call(t, sid, sk, "session.registerDriver", nil)
	require.Equal(t, map[string]any{"registered": true}, testenv.Terminal(t, objs)["result"])
	for {
		m := sub.Next(30 * time.Second)
		require.NotNil(t, m, "subscription ended or went silent after the body deadline")
		if m["method"] == "session.event" && m["params"].(map[string]any)["event_type"] == "session.driver.register" {
			break
		}
	}
}

func TestClientDisconnectMidTurn(t *testing.T) {
	fake := fakeprovider.New(t)
	s := testenv.Start(t, testenv.Options{ConfigTOML: fmt.Sprintf(`
[[providers.entries]]
name = "fake"
provider = "anthropic"
base_url = %q
model = "fake-model"
auth_token = "not-a-secret"
`, fake.URL())})
	pid := s.Profile(t, map[string]any{"name": "main", "primary_provider": "fake"})
	_, key := s.Key(t, pid)
	sid, sk := s.Open(t, key, nil)
	s.Call(t, sid, sk, "session.registerDriver", nil)
	fake.Enqueue(fakeprovider.Text("first answer").UntilReleased(), fakeprovider.Text("second answer"))

	send := func(id int, text string) map[string]any {
		return map[string]any{"jsonrpc": "2.0", "id": id, "method": "session.sendMessage",
			"params": map[string]any{"message": map[string]any{"role": "user", "content": text}}}
	}
	ctx, cancel := context.WithCancel(context.Background())
	st := s.RPCStream(t, ctx, sid, sk, send(1, "first"))
	require.Equal(t, http.StatusOK, st.Status())
	select {
	case <-fake.Started(): // the turn is in flight upstream
	case <-time.After(30 * time.Second):
		require.FailNow(t, "provider was never called")
	}
	cancel() // the client goes away mid-turn
	st.Close()
	fake.Release()

	// FIFO: this call runs only after the abandoned turn finished, so its
	// answer proves the session was not left blocked.
	objs := s.RPC(t, sid, sk, send(2, "second"))
	term := testenv.Terminal(t, objs)
	require.Nil(t, term["error"], "%v", term)
	assert.Equal(t, "second answer", assistantText(t, term["result"].(map[string]any)["message"]))

	r := s.Client(t, http.MethodGet, "/api/v1/sessions/"+sid+"/events?limit=200", sk, nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	var answers []string
	for _, it := range r.Body["items"].([]any) {
		ev := it.(map[string]any)
		if ev["event_type"] == "server.message.send" {
			answers = append(answers, assistantText(t, ev["payload"]))
		}
	}
	assert.Equal(t, []string{"first answer", "second answer"}, answers, "the disconnected turn still completed, in order")
	assert.Equal(t, 2, fake.RequestCount())
}

// assistantText is the first text block of an assistant message.
func assistantText(t *testing.T, msg any) string {
	t.Helper()
	m, ok := msg.(map[string]any)
	require.True(t, ok, "message %v", msg)
	blocks, ok := m["content"].([]any)
	require.True(t, ok, "content %v", m["content"])
	for _, b := range blocks {
		if b.(map[string]any)["type"] == "text" {
			return b.(map[string]any)["text"].(string)
		}
	}
	return ""
}
