package sdk

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMessageDecodesBothContentForms(t *testing.T) {
	var m Message
	require.NoError(t, json.Unmarshal([]byte(`{"role":"user","content":"hello"}`), &m))
	assert.Equal(t, []Block{Text{Text: "hello"}}, m.Content)

	raw := `{"role":"assistant","content":[
		{"type":"text","text":"a"},
		{"type":"tool_use","id":"tu_1","name":"n","input":{"x":1},"dispatch":"mcp"},
		{"type":"tool_result","tool_use_id":"tu_0","content":"r","is_error":true},
		{"type":"image","source":{"type":"base64","data":"AA=="}}]}`
	require.NoError(t, json.Unmarshal([]byte(raw), &m))
	require.Len(t, m.Content, 4)
	assert.Equal(t, ToolUse{ID: "tu_1", Name: "n", Input: json.RawMessage(`{"x":1}`), Dispatch: DispatchMCP}, m.Content[1])
	assert.Equal(t, ToolResult{ToolUseID: "tu_0", Content: []Block{Text{Text: "r"}}, IsError: true}, m.Content[2])
	img, ok := m.Content[3].(RawBlock)
	require.True(t, ok)
	assert.Equal(t, "image", img.BlockType())

	// Round trip keeps unknown blocks verbatim.
	out, err := json.Marshal(m)
	require.NoError(t, err)
	assert.JSONEq(t, `{"role":"assistant","content":[
		{"type":"text","text":"a"},
		{"type":"tool_use","id":"tu_1","name":"n","input":{"x":1},"dispatch":"mcp"},
		{"type":"tool_result","tool_use_id":"tu_0","content":[{"type":"text","text":"r"}],"is_error":true},
		{"type":"image","source":{"type":"base64","data":"AA=="}}]}`, string(out))

	assert.Error(t, json.Unmarshal([]byte(`{"role":"user","content":42}`), &m))
}

func TestWireMessageStripsDispatch(t *testing.T) {
	m := Message{Role: RoleUser, Content: []Block{ToolUse{ID: "tu", Name: "n", Dispatch: DispatchClient}}}
	out, err := json.Marshal(wireMessage(m))
	require.NoError(t, err)
	assert.JSONEq(t, `{"role":"user","content":[{"type":"tool_use","id":"tu","name":"n","input":{}}]}`, string(out))
	assert.Equal(t, DispatchClient, m.Content[0].(ToolUse).Dispatch, "the caller's message is not modified")
}

func TestEmptyToolResultIsEmptyString(t *testing.T) {
	out, err := json.Marshal(ToolResult{ToolUseID: "tu"})
	require.NoError(t, err)
	assert.JSONEq(t, `{"type":"tool_result","tool_use_id":"tu","content":""}`, string(out))
}

func TestToContent(t *testing.T) {
	cases := []struct {
		in   any
		want []Block
	}{
		{nil, nil},
		{"", nil},
		{"hi", []Block{Text{Text: "hi"}}},
		{Text{Text: "b"}, []Block{Text{Text: "b"}}},
		{[]Block{Text{Text: "c"}}, []Block{Text{Text: "c"}}},
		{json.RawMessage(`{"a":1}`), []Block{Text{Text: `{"a":1}`}}},
		{map[string]int{"n": 2}, []Block{Text{Text: `{"n":2}`}}},
	}
	for _, c := range cases {
		got, err := toContent(c.in)
		require.NoError(t, err)
		assert.Equal(t, c.want, got, "%#v", c.in)
	}
	_, err := toContent(make(chan int))
	assert.Error(t, err)
}

func TestUserMessage(t *testing.T) {
	m, err := userMessage("x")
	require.NoError(t, err)
	assert.Equal(t, RoleUser, m.Role)
	_, err = userMessage("")
	assert.Error(t, err)
	_, err = userMessage(42)
	assert.Error(t, err)
	m, err = userMessage(&Message{Content: []Block{Text{Text: "y"}}})
	require.NoError(t, err)
	assert.Equal(t, RoleUser, m.Role)
}

// The server's event set (package events) is the SDK's: a type added there
// fails here until the SDK can describe it.
func TestEventTypesAreExhaustive(t *testing.T) {
	types := EventTypes()
	require.NotEmpty(t, types)
	seen := map[EventType]bool{}
	for _, typ := range types {
		assert.False(t, seen[typ], "duplicate %s", typ)
		seen[typ] = true
		assert.True(t, typ.Known(), "%s", typ)
		assert.NotEmpty(t, describeType(typ), "the SDK has no description for %s", typ)
		assert.NotContains(t, Describe(Event{Type: typ, Payload: json.RawMessage(`{}`)}), "unknown", "%s", typ)
	}
	assert.True(t, seen[EventSessionCompaction])
	assert.False(t, EventType("session.nope").Known())
	assert.Equal(t, "unknown event session.nope", Describe(Event{Type: "session.nope"}))
}

func TestConfigNormalized(t *testing.T) {
	c := Config{ServerURL: " http://x:1/// "}.normalized()
	assert.Equal(t, "http://x:1", c.ServerURL)
	assert.NotNil(t, c.HTTPClient)
	assert.NotNil(t, c.Logger)
	assert.Equal(t, DefaultServerURL, Config{}.normalized().ServerURL)
}

func TestConfigFromEnv(t *testing.T) {
	t.Setenv(EnvServerURL, "http://bae.example:9000")
	t.Setenv(EnvClientKey, " bae_k ")
	c := ConfigFromEnv()
	assert.Equal(t, "http://bae.example:9000", c.ServerURL)
	assert.Equal(t, "bae_k", c.ClientKey)
	t.Setenv(EnvServerURL, "")
	assert.Equal(t, DefaultServerURL, ConfigFromEnv().ServerURL)
}

func TestErrorHelpers(t *testing.T) {
	assert.True(t, IsToolNotAllowed(&RPCError{Code: CodeToolNotAllowed}))
	assert.True(t, IsToolNotAllowed(&ProblemError{Type: ProblemToolNotAllowed}))
	assert.True(t, IsSessionClosed(&ProblemError{Type: ProblemSessionClosed}))
	assert.False(t, IsSessionClosed(&RPCError{Code: CodeApplicationError, Message: "lagged"}))
	assert.True(t, IsProfileMismatch(&ProblemError{Type: ProblemProfileMismatch}))
	assert.True(t, IsSandboxNotRunning(&RPCError{Code: CodeSandboxNotRunning}))
	assert.True(t, IsSandboxImageNotAllowed(&RPCError{Code: CodeSandboxImageNotAllowed}))
	assert.True(t, IsNotFound(&ProblemError{Type: ProblemNotFound}))
	p := problemFrom(502, []byte("<html>bad gateway</html>"))
	assert.Equal(t, "unknown", p.Type)
	assert.Equal(t, 502, p.Status)
	assert.Equal(t, "Bad Gateway", p.Title)
	assert.Contains(t, p.Error(), "bad gateway")
}

// An event type this SDK does not know (as a BAE SDK meets
// server.message.interrupted) decodes and is described, not refused.
func TestUnknownEventTypePassesThrough(t *testing.T) {
	var ev Event
	require.NoError(t, json.Unmarshal([]byte(`{"id":"evt_1","session_id":"ses_1","client_key_id":"ck","event_type":"server.message.later","payload":{"x":1},"created_at":"2026-01-01T00:00:00.000Z"}`), &ev))
	assert.Equal(t, EventType("server.message.later"), ev.Type)
	assert.Equal(t, "unknown event server.message.later", Describe(ev))
}
