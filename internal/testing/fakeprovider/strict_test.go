package fakeprovider

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
)

func rec(t *testing.T, format Format, body string) Recorded {
	t.Helper()
	r := Recorded{Format: format}
	if err := json.Unmarshal([]byte(body), &r.Body); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestConversationError: what a real provider refuses about tool calls,
// in both wire formats.
func TestConversationError(t *testing.T) {
	ok := []struct {
		f    Format
		body string
	}{
		{Anthropic, `{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"t","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":"x"}]},{"role":"assistant","content":[{"type":"text","text":"done"}]},{"role":"user","content":"next"}]}`},
		{OpenAI, `{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"t","arguments":"{}"}}]},{"role":"tool","tool_call_id":"a","content":"x"},{"role":"assistant","content":"done"},{"role":"user","content":"next"}]}`},
	}
	for _, c := range ok {
		assert.NoError(t, ConversationError(rec(t, c.f, c.body)), c.body)
	}
	bad := []struct {
		f    Format
		body string
	}{
		// a tool_use with no result after it
		{Anthropic, `{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"t","input":{}}]},{"role":"user","content":"next"}]}`},
		// a result that answers nothing
		{Anthropic, `{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"z","content":"x"}]}]}`},
		// a blank text block
		{Anthropic, `{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"text","text":" "}]},{"role":"user","content":"next"}]}`},
		{OpenAI, `{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"t","arguments":"{}"}}]},{"role":"user","content":"next"}]}`},
		{OpenAI, `{"messages":[{"role":"user","content":"hi"},{"role":"tool","tool_call_id":"a","content":"x"}]}`},
	}
	for _, c := range bad {
		assert.Error(t, ConversationError(rec(t, c.f, c.body)), c.body)
	}
}
