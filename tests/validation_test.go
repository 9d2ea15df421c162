package tests

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/testenv"
)

// A driver's malformed message or tool declaration is refused with -32602
// (or 400 at open/join): nothing reaches the log or the provider, and the
// shared session keeps working for everyone.
func TestBadInputCannotBreakASharedSession(t *testing.T) {
	e := newEnv(t, envOpts{})
	a := e.open()
	b := e.join(a)
	// A plain message that is not a tool continuation (nothing is paused).
	badContents := []any{
		[]any{1, 2},
		[]any{map[string]any{"type": "video", "url": "x"}},
		[]any{map[string]any{"type": "tool_use", "id": "tu_1", "name": "get_time", "input": map[string]any{}}},
		[]any{map[string]any{"type": "text"}},
		"",
		[]any{},
	}
	for _, content := range badContents {
		objs := e.srv.RPC(t, b.sid, b.sk, b.request(content))
		require.Len(t, objs, 1, "%v", objs)
		errObj, _ := objs[0]["error"].(map[string]any)
		require.NotNil(t, errObj, "content %v accepted: %v", content, objs)
		assert.EqualValues(t, -32602, errObj["code"])
	}
	deep := strings.Repeat("[", 9000) + strings.Repeat("]", 9000)
	body := `{"jsonrpc":"2.0","id":1,"method":"session.sendMessage","params":{"message":{"role":"user","content":[{"type":"text","text":"a","x":` + deep + `}]}}}`
	r := testenv.Do(t, http.MethodPost, e.srv.ClientURL+"/api/v1/sessions/"+b.sid+"/rpc", b.sk, body)
	require.Equal(t, http.StatusOK, r.Status)
	assert.Contains(t, string(r.Raw), `"code":-32602`)
	for _, role := range []string{"system", "assistant"} {
		req := b.request("hi")
		req["params"].(map[string]any)["message"].(map[string]any)["role"] = role
		objs := e.srv.RPC(t, b.sid, b.sk, req)
		require.Len(t, objs, 1)
		assert.EqualValues(t, -32602, objs[0]["error"].(map[string]any)["code"], "role %s", role)
	}
	// A tool_result with no paused turn to answer would be refused by the
	// provider (no matching tool_use): refused here, before anything runs.
	objs := e.srv.RPC(t, b.sid, b.sk, b.request([]any{map[string]any{"type": "tool_result", "tool_use_id": "tu_nope", "content": "x"}}))
	require.NotEmpty(t, objs)
	last := objs[len(objs)-1]
	require.NotNil(t, last["error"], "%v", objs)
	assert.EqualValues(t, -32602, last["error"].(map[string]any)["code"])

	// Tool declarations: a non-object input_schema, duplicates, no name.
	for _, tools := range [][]any{
		{map[string]any{"name": "get_time", "input_schema": 5}},
		{tool("get_time"), tool("get_time")},
		{map[string]any{"description": "nameless"}},
	} {
		objs := e.srv.Call(t, b.sid, b.sk, "session.updateClientTools", map[string]any{"tools": tools})
		require.Len(t, objs, 1)
		require.NotNil(t, objs[0]["error"], "tools %v accepted", tools)
		assert.EqualValues(t, -32602, objs[0]["error"].(map[string]any)["code"])
	}
	_, key := e.srv.Key(t, e.pid)
	for _, decl := range []map[string]any{
		{"tools": []any{tool("get_time"), tool("get_time")}},
		{"sandbox_tools": []any{map[string]any{"name": "run", "input_schema": []any{}}}},
		{"tools": []any{tool("get_time")}, "sandbox_tools": []any{tool("get_time")}},
		{"sandbox_tools": []any{map[string]any{"name": "has space"}}},
	} {
		r := e.srv.Client(t, http.MethodPost, "/api/v1/sessions/"+a.sid+"/join", key, decl)
		assert.Equal(t, http.StatusBadRequest, r.Status, "join %v: %s", decl, r.Raw)
		r = e.srv.Client(t, http.MethodPost, "/api/v1/sessions", key, decl)
		assert.Equal(t, http.StatusBadRequest, r.Status, "open %v: %s", decl, r.Raw)
	}

	// Nothing was stored and the provider was never called.
	assert.Zero(t, e.fake.RequestCount())
	for _, ev := range a.allEvents() {
		assert.NotEqual(t, "client.message.send", ev["event_type"])
		assert.NotEqual(t, "session.error", ev["event_type"])
	}
	// The next good turn works, for both drivers.
	e.fake.Lane("primary").Enqueue(fakeprovider.Text("fine"), fakeprovider.Text("still fine"))
	_, term := b.send("hello")
	assert.Equal(t, "fine", firstText(message(term)))
	_, term = a.send([]any{map[string]any{"type": "text", "text": "and you?"}})
	assert.Equal(t, "still fine", firstText(message(term)))
}
