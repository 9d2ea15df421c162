package fakeprovider_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
)

const anthropicTools = `"tools":[
	{"name":"get_current_time","input_schema":{"type":"object","properties":{"timezone":{"type":"string"}},"required":["timezone"]}},
	{"name":"count_words","input_schema":{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}}]`

func demoServer(t *testing.T) *fakeprovider.Server {
	s := fakeprovider.New(t)
	s.Respond(fakeprovider.Demo)
	return s
}

func TestDemoAnthropicToolRoundTrip(t *testing.T) {
	s := demoServer(t)
	ctx := context.Background()

	status, body := post(t, ctx, anthropicURL(s.URL()), `{"model":"m","messages":[{"role":"user","content":"What time is it in Tokyo?"}],`+anthropicTools+`}`)
	require.Equal(t, 200, status)
	assert.Equal(t, "tool_use", body["stop_reason"])
	content := body["content"].([]any)
	require.Len(t, content, 2)
	call := content[1].(map[string]any)
	assert.Equal(t, "get_current_time", call["name"])
	assert.Equal(t, map[string]any{"timezone": "UTC"}, call["input"])
	id := call["id"].(string)
	assert.Regexp(t, `^toolu_demo_\d+$`, id)

	assistant, err := json.Marshal(map[string]any{"role": "assistant", "content": content})
	require.NoError(t, err)
	second := `{"model":"m","messages":[{"role":"user","content":"What time is it in Tokyo?"},` + string(assistant) +
		`,{"role":"user","content":[{"type":"tool_result","tool_use_id":"` + id + `","content":[{"type":"text","text":"2026-01-02T03:04:05Z"}]}]}],` + anthropicTools + `}`
	status, body = post(t, ctx, anthropicURL(s.URL()), second)
	require.Equal(t, 200, status)
	assert.Equal(t, "end_turn", body["stop_reason"])
	assert.Equal(t, "The get_current_time tool returned: 2026-01-02T03:04:05Z", firstText(body))
}

func TestDemoNamedToolWinsAndFillsInput(t *testing.T) {
	s := demoServer(t)
	status, body := post(t, context.Background(), anthropicURL(s.URL()),
		`{"model":"m","messages":[{"role":"user","content":"use count_words on: what time is it"}],`+anthropicTools+`}`)
	require.Equal(t, 200, status)
	call := body["content"].([]any)[1].(map[string]any)
	assert.Equal(t, "count_words", call["name"], "a named tool beats the time heuristic")
	assert.Equal(t, map[string]any{"text": "what time is it"}, call["input"], "the text after the colon")
}

func TestDemoOpenAIToolRoundTrip(t *testing.T) {
	s := demoServer(t)
	ctx := context.Background()
	tools := `"tools":[{"type":"function","function":{"name":"get_current_time","parameters":{"type":"object","properties":{}}}}]`
	status, body := post(t, ctx, openAIURL(s.URL()), `{"model":"m","messages":[{"role":"user","content":"what time is it?"}],`+tools+`}`)
	require.Equal(t, 200, status)
	choice := body["choices"].([]any)[0].(map[string]any)
	assert.Equal(t, "tool_calls", choice["finish_reason"])
	msg := choice["message"].(map[string]any)
	call := msg["tool_calls"].([]any)[0].(map[string]any)
	assert.Equal(t, "get_current_time", call["function"].(map[string]any)["name"])
	assert.Equal(t, "{}", call["function"].(map[string]any)["arguments"])

	assistant, err := json.Marshal(msg)
	require.NoError(t, err)
	second := `{"model":"m","messages":[{"role":"user","content":"what time is it?"},` + string(assistant) +
		`,{"role":"tool","tool_call_id":"` + call["id"].(string) + `","content":"noon"}],` + tools + `}`
	status, body = post(t, ctx, openAIURL(s.URL()), second)
	require.Equal(t, 200, status)
	choice = body["choices"].([]any)[0].(map[string]any)
	assert.Equal(t, "stop", choice["finish_reason"])
	assert.Equal(t, "The get_current_time tool returned: noon", choice["message"].(map[string]any)["content"])
}

// TestDemoKeepsEcho: anything else is the plain echo, including tool
// results for calls the Demo did not make and time questions with no time
// tool declared.
func TestDemoKeepsEcho(t *testing.T) {
	s := demoServer(t)
	ctx := context.Background()
	for name, c := range map[string]struct{ body, want string }{
		"plain":    {`{"model":"m","messages":[{"role":"user","content":"hello"}],` + anthropicTools + `}`, "echo: hello"},
		"no tools": {`{"model":"m","messages":[{"role":"user","content":"what time is it?"}]}`, "echo: what time is it?"},
		"foreign results": {`{"model":"m","messages":[{"role":"user","content":"hello"},{"role":"assistant","content":[{"type":"tool_use","id":"tu_1","name":"count_words","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"tu_1","content":"3"}]}],` + anthropicTools + `}`,
			"echo: hello"},
	} {
		status, out := post(t, ctx, anthropicURL(s.URL()), c.body)
		require.Equal(t, 200, status, name)
		assert.Equal(t, c.want, firstText(out), name)
	}
}
