package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
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
