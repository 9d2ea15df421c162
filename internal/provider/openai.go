package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
)

// openAIWire is Chat Completions, translated to and from canonical.
type openAIWire struct{}

type openAIRequest struct {
	Model     string      `json:"model"`
	MaxTokens int         `json:"max_tokens"`
	Messages  []oaMessage `json:"messages"`
	Tools     []oaTool    `json:"tools,omitempty"`
	// PromptCacheKey routes a session's requests to one prompt cache.
	PromptCacheKey string `json:"prompt_cache_key,omitempty"`
}

// oaMessage is one Chat Completions message. Content is a pointer because
// an assistant message carrying tool_calls sends null content.
type oaMessage struct {
	Role       string       `json:"role"`
	Content    *string      `json:"content"`
	ToolCalls  []oaToolCall `json:"tool_calls,omitempty"`
	ToolCallID string       `json:"tool_call_id,omitempty"`
}

type oaToolCall struct {
	ID       string     `json:"id"`
	Type     string     `json:"type"`
	Function oaFunction `json:"function"`
}

type oaFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type oaTool struct {
	Type     string    `json:"type"`
	Function oaToolDef `json:"function"`
}

type oaToolDef struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	Parameters  any    `json:"parameters"`
}

func (openAIWire) path() string { return "/v1/chat/completions" }

func (openAIWire) body(ep Endpoint, messages []any, tools []map[string]any) any {
	req := openAIRequest{Model: ep.Model, MaxTokens: ep.MaxTokens, Messages: toOpenAIMessages(messages), Tools: toOpenAITools(tools)}
	if ep.PromptCache {
		req.PromptCacheKey = ep.CacheKey
	}
	return req
}

func (openAIWire) authorize(h http.Header, token string) {
	h.Set("Authorization", "Bearer "+token)
}

func strPtr(s string) *string { return &s }

// toOpenAITools maps canonical tools (already normalised by parseTools) to
// the function-calling shape; nil when there are none, because OpenAI
// rejects an empty tools array.
func toOpenAITools(tools []map[string]any) []oaTool {
	if len(tools) == 0 {
		return nil
	}
	out := make([]oaTool, 0, len(tools))
	for _, t := range tools {
		out = append(out, oaTool{Type: "function", Function: oaToolDef{
			Name:        stringField(t, "name"),
			Description: stringField(t, "description"),
			Parameters:  t["input_schema"],
		}})
	}
	return out
}

// toOpenAIMessages translates canonical history:
//   - string content passes through;
//   - assistant blocks become text plus tool_calls (arguments as a JSON
//     string);
//   - other roles' tool_result blocks become role "tool" messages, emitted
//     first because OpenAI requires them to follow the assistant tool_calls
//     message directly, then any remaining text as one message.
func toOpenAIMessages(messages []any) []oaMessage {
	out := make([]oaMessage, 0, len(messages))
	for _, m := range messages {
		msg, ok := m.(map[string]any)
		if !ok {
			continue
		}
		role := stringField(msg, "role")
		if role == "" {
			role = "user"
		}
		switch content := msg["content"].(type) {
		case string:
			out = append(out, oaMessage{Role: role, Content: strPtr(content)})
		case []any:
			if role == "assistant" {
				out = append(out, assistantMessage(content))
				continue
			}
			for _, b := range content {
				if block, ok := b.(map[string]any); ok && block["type"] == "tool_result" {
					out = append(out, oaMessage{Role: "tool", ToolCallID: stringField(block, "tool_use_id"), Content: strPtr(toolResultText(block["content"]))})
				}
			}
			if text := joinedText(content); text != "" {
				out = append(out, oaMessage{Role: role, Content: strPtr(text)})
			}
		default:
			out = append(out, oaMessage{Role: role, Content: strPtr("")})
		}
	}
	return out
}

func assistantMessage(blocks []any) oaMessage {
	m := oaMessage{Role: "assistant"}
	for _, b := range blocks {
		block, ok := b.(map[string]any)
		if !ok || block["type"] != "tool_use" {
			continue
		}
		args := "{}"
		if in, ok := block["input"]; ok && in != nil {
			if enc, err := marshalJSON(in); err == nil {
				args = string(enc)
			}
		}
		m.ToolCalls = append(m.ToolCalls, oaToolCall{ID: stringField(block, "id"), Type: "function", Function: oaFunction{Name: stringField(block, "name"), Arguments: args}})
	}
	// Content may only be null when tool_calls carry the turn.
	if text := joinedText(blocks); text != "" || len(m.ToolCalls) == 0 {
		m.Content = strPtr(text)
	}
	return m
}

// toolResultText flattens tool_result content to the string a "tool"
// message requires: text blocks joined, or the JSON of non-text blocks so
// nothing is silently dropped.
func toolResultText(content any) string {
	switch c := content.(type) {
	case nil:
		return ""
	case string:
		return c
	case []any:
		if text := joinedText(c); text != "" || len(c) == 0 {
			return text
		}
	}
	enc, err := marshalJSON(content)
	if err != nil {
		return ""
	}
	return string(enc)
}

type oaResponse struct {
	Choices []struct {
		Message *struct {
			Content   json.RawMessage `json:"content"`
			ToolCalls []struct {
				ID       string `json:"id"`
				Function struct {
					Name      string          `json:"name"`
					Arguments json.RawMessage `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
}

type textBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type toolUseBlock struct {
	Type  string          `json:"type"`
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

func (openAIWire) canonical(raw []byte, log *slog.Logger) (Canonical, error) {
	var resp oaResponse
	if err := json.Unmarshal(raw, &resp); err != nil {
		return Canonical{}, fmt.Errorf("provider response is not a chat completion: %w", err)
	}
	if len(resp.Choices) == 0 || resp.Choices[0].Message == nil {
		return Canonical{}, errors.New("provider response has no choices[0].message")
	}
	choice := resp.Choices[0]
	blocks := []any{}
	if text := messageText(choice.Message.Content); text != "" {
		blocks = append(blocks, textBlock{Type: "text", Text: text})
	}
	for _, call := range choice.Message.ToolCalls {
		input, ok := toolArguments(call.Function.Arguments)
		if !ok {
			// A broken argument string still yields a tool_use, so the tool
			// reports the bad input and the model can correct itself.
			log.Warn("provider returned unparsable tool arguments; using {}", "tool", call.Function.Name, "tool_call_id", call.ID)
		}
		blocks = append(blocks, toolUseBlock{Type: "tool_use", ID: call.ID, Name: call.Function.Name, Input: input})
	}
	content, err := marshalJSON(blocks)
	if err != nil {
		return Canonical{}, fmt.Errorf("encode canonical content: %w", err)
	}
	var stop string
	if choice.FinishReason != nil {
		stop = StopReasonFromOpenAI(*choice.FinishReason)
	}
	return Canonical{Content: content, StopReason: stop}, nil
}

// StopReasonFromOpenAI maps a Chat Completions finish_reason to the
// canonical stop_reason; unknown values pass through.
func StopReasonFromOpenAI(finish string) string {
	switch finish {
	case "tool_calls":
		return "tool_use"
	case "stop":
		return "end_turn"
	}
	return finish
}

// messageText reads choices[0].message.content: a string, null, or (from
// some compatible servers) an array of {"type":"text","text"} parts.
func messageText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []any
	if json.Unmarshal(raw, &parts) == nil {
		return joinedText(parts)
	}
	return ""
}

// toolArguments turns function.arguments (a JSON string, or an object from
// lenient servers) into a canonical input object, reporting false when it
// had to fall back to {}.
func toolArguments(raw json.RawMessage) (json.RawMessage, bool) {
	empty := json.RawMessage(`{}`)
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return empty, true
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return empty, false
		}
		raw = bytes.TrimSpace([]byte(s))
		if len(raw) == 0 {
			return empty, true
		}
	}
	if raw[0] != '{' || !json.Valid(raw) {
		return empty, false
	}
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		return empty, false
	}
	return json.RawMessage(buf.Bytes()), true
}
