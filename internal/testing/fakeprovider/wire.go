package fakeprovider

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// toolInput marshals a ToolUseSpec input; nil means {}.
func toolInput(in any) (json.RawMessage, error) {
	if in == nil {
		return json.RawMessage(`{}`), nil
	}
	b, err := json.Marshal(in)
	if err != nil {
		return nil, fmt.Errorf("marshal tool input: %w", err)
	}
	return b, nil
}

func toolID(rec Recorded, i int, spec ToolUseSpec) string {
	if spec.ID != "" {
		return spec.ID
	}
	return fmt.Sprintf("toolu_fake_%d_%d", rec.Seq, i+1)
}

func stopReason(reply Reply) string {
	switch {
	case reply.StopReason != "":
		return reply.StopReason
	case len(reply.ToolUses) > 0:
		return "tool_use"
	}
	return "end_turn"
}

// InputTokens is how many tokens the fake counts in a request body (about
// 4 bytes a token): the usage it reports and what its context window
// (Lane.ContextWindow) holds against. The stream options are left out, so
// a request counts the same whether or not it asked for a stream.
func InputTokens(body []byte) int {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) == nil {
		delete(m, "stream")
		delete(m, "stream_options")
		if b, err := json.Marshal(m); err == nil {
			body = b
		}
	}
	return len(body)/4 + 1
}

// tokens is a plausible, deterministic usage figure, the same whether or
// not the request asked for a stream.
// Thinking is billed as output.
func tokens(rec Recorded, reply Reply) (in, out int) {
	return InputTokens(rec.RawBody), len(reply.Text)/4 + len(reply.ToolUses) + 1 + thinkingTokens(rec, reply)
}

// writeTooLong refuses a request longer than the window, in each
// provider's own words.
func writeTooLong(w http.ResponseWriter, format Format, n, window int) {
	if format == OpenAI {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{
			"message": fmt.Sprintf("This model's maximum context length is %d tokens. However, your messages resulted in %d tokens. Please reduce the length of the messages.", window, n),
			"type":    "invalid_request_error", "param": "messages", "code": "context_length_exceeded",
		}})
		return
	}
	writeJSON(w, http.StatusBadRequest, map[string]any{"type": "error", "error": map[string]any{
		"type": "invalid_request_error", "message": fmt.Sprintf("prompt is too long: %d tokens > %d maximum", n, window),
	}})
}

// anthropicBody renders a Messages API response.
func anthropicBody(rec Recorded, reply Reply) (map[string]any, error) {
	content := append([]any{}, thinkingBlocks(rec, reply)...)
	if reply.Text != "" {
		content = append(content, map[string]any{"type": "text", "text": reply.Text})
	}
	for i, spec := range reply.ToolUses {
		input, err := toolInput(spec.Input)
		if err != nil {
			return nil, err
		}
		content = append(content, map[string]any{"type": "tool_use", "id": toolID(rec, i, spec), "name": spec.Name, "input": input})
	}
	in, out := tokens(rec, reply)
	return map[string]any{
		"id":            fmt.Sprintf("msg_fake_%d", rec.Seq),
		"type":          "message",
		"role":          "assistant",
		"model":         rec.Model(),
		"content":       content,
		"stop_reason":   stopReason(reply),
		"stop_sequence": nil,
		"usage":         anthropicUsage(rec, in, out),
	}, nil
}

// openAIBody renders a Chat Completions response.
func openAIBody(rec Recorded, reply Reply) (map[string]any, error) {
	message := map[string]any{"role": "assistant", "content": nil}
	if reply.Text != "" {
		message["content"] = reply.Text
	}
	if len(reply.ToolUses) > 0 {
		calls := make([]any, 0, len(reply.ToolUses))
		for i, spec := range reply.ToolUses {
			input, err := toolInput(spec.Input)
			if err != nil {
				return nil, err
			}
			calls = append(calls, map[string]any{
				"id": toolID(rec, i, spec), "type": "function",
				"function": map[string]any{"name": spec.Name, "arguments": string(input)},
			})
		}
		message["tool_calls"] = calls
	}
	finish := stopReason(reply)
	switch finish {
	case "tool_use":
		finish = "tool_calls"
	case "end_turn":
		finish = "stop"
	}
	in, out := tokens(rec, reply)
	return map[string]any{
		"id":      fmt.Sprintf("chatcmpl-fake-%d", rec.Seq),
		"object":  "chat.completion",
		"created": time.Now().Unix(),
		"model":   rec.Model(),
		"choices": []any{map[string]any{"index": 0, "message": message, "finish_reason": finish}},
		"usage":   openAIUsage(rec, in, out, thinkingTokens(rec, reply)),
	}, nil
}

// anthropicUsage is the usage object, with the cache's counts when the
// cache is emulated (input_tokens is then what was neither read nor
// written).
func anthropicUsage(rec Recorded, in, out int) map[string]any {
	if rec.Cache == nil {
		return map[string]any{"input_tokens": in, "output_tokens": out}
	}
	c := rec.Cache
	return map[string]any{
		"input_tokens": c.Uncached, "output_tokens": out,
		"cache_read_input_tokens": c.Read, "cache_creation_input_tokens": c.Write,
	}
}

// openAIUsage is the usage object, with prompt_tokens_details.cached_tokens
// when the cache is emulated.
// A reasoning request's reasoning tokens are part of completion_tokens,
// and also reported apart.
func openAIUsage(rec Recorded, in, out, reasoning int) map[string]any {
	u := map[string]any{"prompt_tokens": in, "completion_tokens": out, "total_tokens": in + out}
	if reasoningOn(rec) {
		u["completion_tokens_details"] = map[string]any{"reasoning_tokens": reasoning}
	}
	if rec.Cache != nil {
		u["prompt_tokens_details"] = map[string]any{"cached_tokens": rec.Cache.Read}
	}
	return u
}

// writeError renders an error in the endpoint's own shape; both carry the
// message at error.message.
func writeError(w http.ResponseWriter, format Format, status int, message string) {
	if message == "" {
		message = http.StatusText(status)
	}
	if format == OpenAI {
		writeJSON(w, status, map[string]any{"error": map[string]any{
			"message": message, "type": openAIErrorType(status), "param": nil, "code": nil,
		}})
		return
	}
	writeJSON(w, status, map[string]any{"type": "error", "error": map[string]any{
		"type": anthropicErrorType(status), "message": message,
	}})
}

func anthropicErrorType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case 529:
		return "overloaded_error"
	}
	return "api_error"
}

func openAIErrorType(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return "rate_limit_exceeded"
	case status == http.StatusUnauthorized:
		return "invalid_api_key"
	case status >= 500:
		return "server_error"
	}
	return "invalid_request_error"
}
