package api_test

import (
	"bytes"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/testing/testenv"
)

func rawRPC(t *testing.T, s *testenv.Server, sid, key, body string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.ClientURL+"/api/v1/sessions/"+sid+"/rpc", bytes.NewBufferString(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

func TestRPCEnvelope(t *testing.T) {
	s := testenv.Start(t, testenv.Options{ConfigTOML: providersTOML})
	pid := s.Profile(t, map[string]any{"name": "main", "primary_provider": "main"})
	keyID, key := s.Key(t, pid)
	sid, sk := s.Open(t, key, nil)

	cases := []struct{ name, body, want string }{
		{"parse error", `{"jsonrpc":`, `{"error":{"code":-32700,"message":"Parse error"},"id":null,"jsonrpc":"2.0"}`},
		{"batch", `[{"jsonrpc":"2.0","id":1,"method":"session.registerDriver"}]`, `{"error":{"code":-32600,"message":"Invalid Request: batch requests are not supported"},"id":null,"jsonrpc":"2.0"}`},
		{"not an object", `42`, `{"error":{"code":-32600,"message":"Invalid Request"},"id":null,"jsonrpc":"2.0"}`},
		{"wrong version", `{"jsonrpc":"1.0","id":7,"method":"session.subscribe"}`, `{"error":{"code":-32600,"message":"Invalid Request: missing or wrong \"jsonrpc\" version"},"id":7,"jsonrpc":"2.0"}`},
		{"missing method", `{"jsonrpc":"2.0","id":"a"}`, `{"error":{"code":-32600,"message":"Invalid Request: missing \"method\""},"id":"a","jsonrpc":"2.0"}`},
		{"unknown method", `{"jsonrpc":"2.0","id":3,"method":"session.nope","params":{}}`, `{"error":{"code":-32601,"message":"Method not found: session.nope"},"id":3,"jsonrpc":"2.0"}`},
		{"params not object", `{"jsonrpc":"2.0","id":3,"method":"session.registerDriver","params":[1]}`, `{"error":{"code":-32602,"message":"Invalid params: params must be an object"},"id":3,"jsonrpc":"2.0"}`},
		{"send before register", `{"jsonrpc":"2.0","id":4,"method":"session.sendMessage","params":{}}`, `{"error":{"code":-32001,"message":"call session.registerDriver before session.sendMessage"},"id":4,"jsonrpc":"2.0"}`},
		{"null id is echoed", `{"jsonrpc":"2.0","id":null,"method":"session.nope"}`, `{"error":{"code":-32601,"message":"Method not found: session.nope"},"id":null,"jsonrpc":"2.0"}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, ctype, body := rawRPC(t, s, sid, sk, c.body)
			assert.Equal(t, 200, status)
			assert.Equal(t, "application/x-ndjson", ctype)
			assert.JSONEq(t, c.want, body)
			assert.Equal(t, byte('\n'), body[len(body)-1])
		})
	}

	// Notifications (no id) get no terminal response, errors included.
	_, _, body := rawRPC(t, s, sid, sk, `{"jsonrpc":"2.0","method":"session.nope"}`)
	assert.Empty(t, body)
	_, _, body = rawRPC(t, s, sid, sk, `{"jsonrpc":"2.0","method":"session.registerDriver","params":{}}`)
	assert.Empty(t, body)

	// ...but the side effect happened; registering again is idempotent.
	objs := s.Call(t, sid, sk, "session.registerDriver", nil)
	assert.Equal(t, map[string]any{"registered": true}, testenv.Terminal(t, objs)["result"])
	r := s.Client(t, http.MethodGet, "/api/v1/sessions/"+sid+"/participants", sk, nil)
	assert.Equal(t, map[string]any{"drivers": []any{keyID}}, r.Body)
	ev := s.Client(t, http.MethodGet, "/api/v1/sessions/"+sid+"/events", sk, nil)
	var regs int
	for _, it := range ev.Body["items"].([]any) {
		if it.(map[string]any)["event_type"] == "session.driver.register" {
			regs++
			assert.Equal(t, keyID, it.(map[string]any)["client_key_id"])
		}
	}
	assert.Equal(t, 1, regs)

	// sendMessage params are validated after registration.
	for _, params := range []any{map[string]any{}, map[string]any{"message": map[string]any{"role": "user"}}, map[string]any{"message": map[string]any{"content": 5}}} {
		objs = s.Call(t, sid, sk, "session.sendMessage", params)
		assert.EqualValues(t, -32602, testenv.Terminal(t, objs)["error"].(map[string]any)["code"])
	}

	// A closed session refuses registration and sends with -32000.
	require.Equal(t, 200, s.Client(t, http.MethodDelete, "/api/v1/sessions/"+sid, sk, nil).Status)
	objs = s.Call(t, sid, sk, "session.registerDriver", nil)
	assert.EqualValues(t, -32000, testenv.Terminal(t, objs)["error"].(map[string]any)["code"])
	objs = s.Call(t, sid, sk, "session.sendMessage", map[string]any{"message": map[string]any{"content": "hi"}})
	assert.EqualValues(t, -32000, testenv.Terminal(t, objs)["error"].(map[string]any)["code"])
}
