package provider_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/provider"
)

func f64(v float64) *float64 { return &v }
func i64(v int64) *int64     { return &v }
func boolp(v bool) *bool     { return &v }

// TestThinkingModesFamilyRule pins the documented model-family rule.
func TestThinkingModesFamilyRule(t *testing.T) {
	adaptive, both, budget := []string{"adaptive"}, []string{"adaptive", "enabled"}, []string{"enabled"}
	for model, want := range map[string][]string{
		"claude-opus-4-7": adaptive, "claude-opus-4-7-20260416": adaptive, "claude-mythos-preview": adaptive,
		"claude-sonnet-5": adaptive, "anthropic/claude-opus-4.7": adaptive, "claude-opus-4-8": adaptive,
		"claude-opus-4-6": both, "claude-sonnet-4-6": both,
		"claude-sonnet-4-5-20250929": budget, "claude-opus-4-1": budget, "claude-3-7-sonnet-20250219": budget,
		"claude-sonnet-4-20250514": budget, "claude-fake": budget, "my-gateway-model": budget,
	} {
		assert.Equal(t, want, provider.ThinkingModes(model), model)
	}
	assert.True(t, provider.ReasoningModel("o3-mini"))
	assert.True(t, provider.ReasoningModel("gpt-5"))
	assert.False(t, provider.ReasoningModel("gpt-5-chat-latest"))
	assert.False(t, provider.ReasoningModel("gpt-4o"))
}

// TestSettingsValidation: each rule refuses what the provider would, and
// names the field.
func TestSettingsValidation(t *testing.T) {
	type tc struct {
		kind, model string
		max         int
		s           provider.Settings
		field       string // "" = accepted
	}
	adaptive := &provider.Thinking{Type: "adaptive"}
	budget := func(n int64) *provider.Thinking { return &provider.Thinking{Type: "enabled", BudgetTokens: n} }
	for i, c := range []tc{
		{"anthropic", "claude-opus-4-7", 0, provider.Settings{Thinking: adaptive, Effort: "high"}, ""},
		{"anthropic", "claude-opus-4-7", 0, provider.Settings{Thinking: budget(2048)}, "thinking.type"},
		{"anthropic", "claude-sonnet-4-5", 0, provider.Settings{Thinking: adaptive}, "thinking.type"},
		{"anthropic", "claude-sonnet-4-5", 8000, provider.Settings{Thinking: budget(4000)}, ""},
		{"anthropic", "claude-sonnet-4-5", 8000, provider.Settings{Thinking: budget(1023)}, "thinking.budget_tokens"},
		{"anthropic", "claude-sonnet-4-5", 8000, provider.Settings{Thinking: budget(8000)}, "thinking.budget_tokens"},
		{"anthropic", "claude-sonnet-4-5", 8000, provider.Settings{Thinking: budget(16000), Headers: map[string]string{"anthropic-beta": provider.InterleavedThinkingBeta}}, ""},
		{"anthropic", "claude-sonnet-4-6", 0, provider.Settings{Thinking: &provider.Thinking{Type: "adaptive", Display: "loud"}}, "thinking.display"},
		{"anthropic", "claude-sonnet-4-6", 0, provider.Settings{Thinking: &provider.Thinking{Type: "sometimes"}}, "thinking.type"},
		{"anthropic", "claude-sonnet-4-6", 0, provider.Settings{Thinking: adaptive, Temperature: f64(0.5)}, "temperature"},
		{"anthropic", "claude-sonnet-4-6", 0, provider.Settings{Thinking: adaptive, Temperature: f64(1)}, ""},
		{"anthropic", "claude-sonnet-4-6", 0, provider.Settings{Thinking: adaptive, TopP: f64(0.9)}, "top_p"},
		{"anthropic", "claude-sonnet-4-6", 0, provider.Settings{Thinking: adaptive, TopP: f64(0.95)}, ""},
		{"anthropic", "claude-sonnet-4-6", 0, provider.Settings{Thinking: adaptive, TopK: i64(5)}, "top_k"},
		{"anthropic", "claude-sonnet-4-6", 0, provider.Settings{Thinking: adaptive, ToolChoice: "any"}, "tool_choice"},
		{"anthropic", "claude-sonnet-4-6", 0, provider.Settings{Thinking: adaptive, ToolChoice: "tool:x"}, "tool_choice"},
		{"anthropic", "claude-sonnet-4-6", 0, provider.Settings{Thinking: adaptive, ToolChoice: "auto"}, ""},
		{"anthropic", "claude-opus-4-7", 0, provider.Settings{Temperature: f64(0.2)}, "temperature"},
		{"anthropic", "claude-sonnet-4-6", 0, provider.Settings{Temperature: f64(0.2), TopK: i64(5), ToolChoice: "tool:x"}, ""},
		{"anthropic", "claude-sonnet-4-6", 0, provider.Settings{Effort: "extreme"}, "effort"},
		{"anthropic", "claude-sonnet-4-6", 0, provider.Settings{ReasoningEffort: "high"}, "reasoning_effort"},
		{"anthropic", "claude-sonnet-4-6", 0, provider.Settings{ServiceTier: "flex"}, "service_tier"},
		{"anthropic", "claude-sonnet-4-6", 0, provider.Settings{Headers: map[string]string{"x-api-key": "other"}}, "headers"},
		{"anthropic", "claude-sonnet-4-6", 0, provider.Settings{Headers: map[string]string{"x-trace id": "1"}}, "headers"},
		{"anthropic", "claude-sonnet-4-6", 0, provider.Settings{Headers: map[string]string{"x-trace:id": "1"}}, "headers"},
		{"anthropic", "claude-sonnet-4-6", 0, provider.Settings{Headers: map[string]string{"": "1"}}, "headers"},
		{"openai", "gpt-4o", 0, provider.Settings{Headers: map[string]string{"x-trace": "1\r\nx-api-key: stolen"}}, "headers"},
		{"openai", "gpt-4o", 0, provider.Settings{Headers: map[string]string{"X-Trace_Id.v2": "1"}}, ""},
		{"openai", "gpt-5", 0, provider.Settings{ReasoningEffort: "high", ParallelToolCalls: boolp(false), ServiceTier: "flex"}, ""},
		{"openai", "gpt-5", 0, provider.Settings{Temperature: f64(0.3)}, "temperature"},
		{"openai", "gpt-4o", 0, provider.Settings{Temperature: f64(0.3), TopP: f64(0.5), Stop: []string{"a"}}, ""},
		{"openai", "gpt-4o", 0, provider.Settings{ReasoningEffort: "medium", TopP: f64(0.5)}, "top_p"},
		{"openai", "gpt-4o", 0, provider.Settings{Thinking: adaptive}, "thinking"},
		{"openai", "gpt-4o", 0, provider.Settings{Effort: "high"}, "effort"},
		{"openai", "gpt-4o", 0, provider.Settings{TopK: i64(3)}, "top_k"},
		{"openai", "gpt-4o", 0, provider.Settings{Stop: []string{"a", "b", "c", "d", "e"}}, "stop"},
	} {
		err := c.s.Validate(c.kind, c.model, c.max)
		if c.field == "" {
			assert.NoError(t, err, "case %d", i)
			continue
		}
		var se *provider.SettingError
		if assert.True(t, errors.As(err, &se), "case %d: %v", i, err) {
			assert.Equal(t, c.field, se.Field, "case %d: %v", i, err)
			assert.False(t, se.Malformed)
		}
	}
}

// TestParseSettingsRefusesUnknownKeys: an unknown key or a wrong type is a
// malformed setting, never passed through.
func TestParseSettingsRefusesUnknownKeys(t *testing.T) {
	for _, raw := range []string{`{"temprature":1}`, `{"thinking":{"type":"adaptive","budget":3}}`, `{"temperature":"hot"}`, `[1]`} {
		_, err := provider.ParseSettings(json.RawMessage(raw))
		var se *provider.SettingError
		require.ErrorAs(t, err, &se, raw)
		assert.True(t, se.Malformed, raw)
	}
	s, err := provider.ParseSettings(json.RawMessage(`{"thinking":{"type":"adaptive","display":"summarized"},"effort":"high"}`))
	require.NoError(t, err)
	assert.Equal(t, "high", s.Effort)
}

// TestSettingsReachTheBody: the settings' fields, in each wire format's
// names, after the fields a request always has; tool_choice and
// parallel_tool_calls only when tools are declared; extra headers sent.
func TestSettingsReachTheBody(t *testing.T) {
	var body []byte
	var hdr http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ = io.ReadAll(r.Body)
		hdr = r.Header.Clone()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"content":[],"stop_reason":"end_turn","choices":[{"message":{"content":"x"},"finish_reason":"stop"}]}`)
	}))
	t.Cleanup(srv.Close)
	c := &provider.Client{}
	msgs := json.RawMessage(`[{"role":"user","content":"hi"}]`)
	tools := json.RawMessage(`[{"name":"t","input_schema":{"type":"object"}}]`)

	ep := provider.Endpoint{Kind: provider.KindAnthropic, BaseURL: srv.URL, Model: "claude-sonnet-4-6", MaxTokens: 4000, AuthToken: "k", Settings: provider.Settings{
		Thinking: &provider.Thinking{Type: "adaptive", Display: "summarized"}, Effort: "medium", ToolChoice: "auto", ParallelToolCalls: boolp(false),
		Stop: []string{"END"}, ServiceTier: "auto", Headers: map[string]string{"anthropic-beta": "x-beta"},
	}}
	_, err := c.Call(context.Background(), ep, msgs, tools)
	require.NoError(t, err)
	assert.Equal(t, `{"model":"claude-sonnet-4-6","max_tokens":4000,"messages":[{"role":"user","content":"hi"}],"tools":[{"input_schema":{"type":"object"},"name":"t"}],`+
		`"thinking":{"display":"summarized","type":"adaptive"},"output_config":{"effort":"medium"},"tool_choice":{"disable_parallel_tool_use":true,"type":"auto"},"service_tier":"auto","stop_sequences":["END"]}`, string(body))
	assert.Equal(t, "x-beta", hdr.Get("anthropic-beta"))
	assert.Equal(t, "k", hdr.Get("x-api-key"))

	_, err = c.Call(context.Background(), ep, msgs, nil)
	require.NoError(t, err)
	assert.NotContains(t, string(body), "tool_choice", "no tools, no tool_choice: the API refuses one without the other")

	ep = provider.Endpoint{Kind: provider.KindOpenAI, BaseURL: srv.URL, Model: "gpt-5", MaxTokens: 4000, AuthToken: "k", Settings: provider.Settings{
		ReasoningEffort: "low", ToolChoice: "tool:t", ParallelToolCalls: boolp(false), Stop: []string{"END"},
	}}
	_, err = c.CallStreaming(context.Background(), ep, msgs, tools, nil)
	require.NoError(t, err)
	assert.Equal(t, `{"model":"gpt-5","max_completion_tokens":4000,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"t","parameters":{"type":"object"}}}],`+
		`"reasoning_effort":"low","tool_choice":{"function":{"name":"t"},"type":"function"},"parallel_tool_calls":false,"stop":["END"],"stream":true,"stream_options":{"include_usage":true}}`, string(body))
}
