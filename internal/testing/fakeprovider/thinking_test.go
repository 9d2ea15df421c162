package fakeprovider

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func post(t *testing.T, url string, body any, header map[string]string) (int, map[string]any) {
	t.Helper()
	b, err := json.Marshal(body)
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(b))
	require.NoError(t, err)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	require.NoError(t, json.Unmarshal(raw, &out), string(raw))
	return resp.StatusCode, out
}

// TestStrictThinking: the strict fake answers Anthropic's 400s (in
// Anthropic's error shape) for budget_tokens on an adaptive-only model, a
// budget not below max_tokens without the interleaved beta, sampling
// thinking refuses, and a tool cycle whose thinking block was dropped,
// altered or moved; it accepts the blocks returned verbatim, and bills the
// thinking as output. OpenAI reasoning: max_tokens and temperature
// refused, reasoning_tokens reported inside completion_tokens.
func TestStrictThinking(t *testing.T) {
	s := New(t)
	s.Strict(true)
	url := s.URL() + "/v1/messages"
	user := map[string]any{"role": "user", "content": "hi"}
	adaptive := map[string]any{"type": "adaptive"}
	for _, c := range []struct {
		body   map[string]any
		header map[string]string
		want   string
	}{
		{map[string]any{"model": "claude-opus-4-7", "max_tokens": 4000, "thinking": map[string]any{"type": "enabled", "budget_tokens": 2000}, "messages": []any{user}}, nil, "not supported for this model"},
		{map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 4000, "thinking": map[string]any{"type": "enabled", "budget_tokens": 4000}, "messages": []any{user}}, nil, "`max_tokens` must be greater than `thinking.budget_tokens`"},
		{map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 4000, "thinking": map[string]any{"type": "enabled", "budget_tokens": 512}, "messages": []any{user}}, nil, "greater than or equal to 1024"},
		{map[string]any{"model": "claude-sonnet-4-6", "max_tokens": 4000, "thinking": adaptive, "temperature": 0.5, "messages": []any{user}}, nil, "`temperature` may only be set to 1"},
		{map[string]any{"model": "claude-sonnet-4-6", "max_tokens": 4000, "thinking": adaptive, "tool_choice": map[string]any{"type": "any"}, "messages": []any{user}}, nil, "tool_choice forces tool use"},
		{map[string]any{"model": "claude-opus-4-7", "max_tokens": 4000, "top_k": 3, "messages": []any{user}}, nil, "does not support `top_k`"},
	} {
		status, out := post(t, url, c.body, c.header)
		assert.Equal(t, http.StatusBadRequest, status, "%v", c.body)
		assert.Equal(t, "error", out["type"])
		e, _ := out["error"].(map[string]any)
		assert.Equal(t, "invalid_request_error", e["type"])
		assert.Contains(t, e["message"], c.want)
	}
	ok, _ := post(t, url, map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 4000, "thinking": map[string]any{"type": "enabled", "budget_tokens": 8000}, "messages": []any{user}}, map[string]string{"anthropic-beta": "interleaved-thinking-2025-05-14"})
	assert.Equal(t, http.StatusOK, ok, "interleaved thinking lets the budget pass max_tokens")

	// A tool cycle: the answer's thinking must come back in front of its
	// tool_use, unaltered.
	s.Enqueue(ToolUse("tu_1", "t", nil).WithThinking("reasoning").WithRedactedThinking())
	req := map[string]any{"model": "claude-sonnet-4-6", "max_tokens": 4000, "thinking": adaptive, "messages": []any{user}}
	status, answer := post(t, url, req, nil)
	require.Equal(t, http.StatusOK, status)
	content := answer["content"].([]any)
	require.Len(t, content, 3)
	assert.Equal(t, "thinking", content[0].(map[string]any)["type"])
	assert.Equal(t, "redacted_thinking", content[1].(map[string]any)["type"])
	usage := answer["usage"].(map[string]any)
	assert.Greater(t, usage["output_tokens"].(float64), 2.0+16, "the thinking is billed as output")
	cycle := func(asst []any) map[string]any {
		return map[string]any{"model": "claude-sonnet-4-6", "max_tokens": 4000, "thinking": adaptive, "messages": []any{user,
			map[string]any{"role": "assistant", "content": asst},
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": "tu_1", "content": "x"}}}}}
	}
	altered := map[string]any{}
	for k, v := range content[0].(map[string]any) {
		altered[k] = v
	}
	altered["thinking"] = "reasoning, edited"
	for name, asst := range map[string][]any{
		"dropped":   {content[2]},
		"reordered": {content[1], content[0], content[2]},
		"altered":   {altered, content[1], content[2]},
		"truncated": {content[0], content[2]},
	} {
		status, out := post(t, url, cycle(asst), nil)
		assert.Equal(t, http.StatusBadRequest, status, name)
		assert.Equal(t, "invalid_request_error", out["error"].(map[string]any)["type"], name)
	}
	status, _ = post(t, url, cycle(content), nil)
	assert.Equal(t, http.StatusOK, status, "verbatim thinking is accepted")

	oa := s.URL() + "/v1/chat/completions"
	status, out := post(t, oa, map[string]any{"model": "gpt-5", "max_tokens": 100, "reasoning_effort": "low", "messages": []any{user}}, nil)
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, out["error"].(map[string]any)["message"], "max_completion_tokens")
	status, _ = post(t, oa, map[string]any{"model": "gpt-5", "max_completion_tokens": 100, "reasoning_effort": "low", "temperature": 0.2, "messages": []any{user}}, nil)
	assert.Equal(t, http.StatusBadRequest, status)
	s.Enqueue(Text("ok").WithThinking("a long chain of thought"))
	status, out = post(t, oa, map[string]any{"model": "gpt-5", "max_completion_tokens": 100, "reasoning_effort": "low", "messages": []any{user}}, nil)
	require.Equal(t, http.StatusOK, status)
	u := out["usage"].(map[string]any)
	reasoning := u["completion_tokens_details"].(map[string]any)["reasoning_tokens"].(float64)
	assert.Positive(t, reasoning)
	assert.Greater(t, u["completion_tokens"].(float64), reasoning)
}
