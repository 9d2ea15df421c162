package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
)

// anthropicWire is the Messages API: canonical in, canonical out.
type anthropicWire struct{}

type anthropicRequest struct {
	Model     string           `json:"model"`
	MaxTokens int              `json:"max_tokens"`
	Messages  []any            `json:"messages"`
	Tools     []map[string]any `json:"tools,omitempty"`
}

func (anthropicWire) path() string { return "/v1/messages" }

// passThrough reports whether canonical messages can go to an
// Anthropic-kind endpoint as they are: the canonical shape is that API's,
// so only the internal tool_use fields would need taking out. A long
// conversation is then copied into the body, not decoded and encoded again.
func passThrough(kind string, messages json.RawMessage) (json.RawMessage, bool) {
	raw := bytes.TrimSpace(messages)
	if kind != KindAnthropic || len(raw) == 0 || raw[0] != '[' {
		return nil, false
	}
	for _, f := range internalBlockFields {
		if bytes.Contains(raw, []byte(`"`+f+`"`)) {
			return nil, false
		}
	}
	return raw, json.Valid(raw)
}

// anthropicBody is anthropicRequest's encoding with the messages as given.
func anthropicBody(ep Endpoint, messages json.RawMessage, tools []map[string]any) ([]byte, error) {
	model, err := marshalJSON(ep.Model)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, len(messages)+len(model)+64)
	b = append(b, `{"model":`...)
	b = append(b, model...)
	b = append(b, `,"max_tokens":`...)
	b = strconv.AppendInt(b, int64(ep.MaxTokens), 10)
	b = append(b, `,"messages":`...)
	b = append(b, messages...)
	if len(tools) > 0 {
		t, err := marshalJSON(tools)
		if err != nil {
			return nil, err
		}
		b = append(b, `,"tools":`...)
		b = append(b, t...)
	}
	return append(b, '}'), nil
}

func (anthropicWire) body(ep Endpoint, messages []any, tools []map[string]any) any {
	return anthropicRequest{Model: ep.Model, MaxTokens: ep.MaxTokens, Messages: messages, Tools: tools}
}

func (anthropicWire) authorize(h http.Header, token string) {
	h.Set("x-api-key", token)
	h.Set("anthropic-version", AnthropicVersion)
}

func (anthropicWire) canonical(raw []byte, _ *slog.Logger) (Canonical, error) {
	var resp struct {
		Content    json.RawMessage `json:"content"`
		StopReason *string         `json:"stop_reason"`
	}
	if err := json.Unmarshal(raw, &resp); err != nil {
		return Canonical{}, fmt.Errorf("provider response is not a JSON object: %w", err)
	}
	if c := bytes.TrimSpace(resp.Content); len(c) == 0 || c[0] != '[' {
		return Canonical{}, errors.New("provider response has no content array")
	}
	var stop string
	if resp.StopReason != nil {
		stop = *resp.StopReason
	}
	return Canonical{Content: resp.Content, StopReason: stop}, nil
}
