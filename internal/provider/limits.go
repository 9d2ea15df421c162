package provider

import (
	"encoding/json"
	"net/http"
	"strings"
)

// TooLong reports whether a failed call is the provider refusing the
// request as longer than the model's context window, per kind:
//
//   - Anthropic: 400 invalid_request_error whose message starts "prompt is
//     too long" (413 request_too_large is the body size limit, also too
//     long);
//   - OpenAI: 400 with error.code "context_length_exceeded".
//
// This is the one place that knows those answers; a too-long refusal is
// compacted and retried instead of counting as the provider's failure.
func TooLong(kind string, ce *CallError) bool {
	if ce == nil || ce.Status == nil {
		return false
	}
	status := *ce.Status
	var body struct {
		Error struct {
			Type    string `json:"type"`
			Code    any    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if len(ce.Body) > 0 {
		_ = json.Unmarshal(ce.Body, &body)
	}
	switch kind {
	case KindAnthropic:
		if status == http.StatusRequestEntityTooLarge {
			return true
		}
		return status == http.StatusBadRequest && body.Error.Type == "invalid_request_error" &&
			strings.HasPrefix(strings.ToLower(body.Error.Message), "prompt is too long")
	case KindOpenAI:
		code, _ := body.Error.Code.(string)
		return status == http.StatusBadRequest && code == "context_length_exceeded"
	}
	return false
}

// InputTokens is the input token count a successful response reports
// (Anthropic usage.input_tokens plus cached input, OpenAI
// usage.prompt_tokens), 0 when it reports none.
func InputTokens(kind string, raw json.RawMessage) int {
	var body struct {
		Usage struct {
			InputTokens  int `json:"input_tokens"`
			CacheRead    int `json:"cache_read_input_tokens"`
			CacheWrite   int `json:"cache_creation_input_tokens"`
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if json.Unmarshal(raw, &body) != nil {
		return 0
	}
	u := body.Usage
	if kind == KindOpenAI {
		return u.PromptTokens
	}
	return u.InputTokens + u.CacheRead + u.CacheWrite
}

// OutputTokens is the output token count a successful response reports.
func OutputTokens(kind string, raw json.RawMessage) int {
	var body struct {
		Usage struct {
			OutputTokens     int `json:"output_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if json.Unmarshal(raw, &body) != nil {
		return 0
	}
	if kind == KindOpenAI {
		return body.Usage.CompletionTokens
	}
	return body.Usage.OutputTokens
}
