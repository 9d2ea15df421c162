package fakeprovider

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
)

// ThinkingSpec is one thinking block of a Reply, sent before its text and
// tool calls when the request turns thinking on (Anthropic "thinking" of
// type "enabled" or "adaptive"; OpenAI "reasoning_effort", which reports
// the thinking only as usage.completion_tokens_details.reasoning_tokens).
type ThinkingSpec struct {
	Text string
	// Redacted sends a redacted_thinking block (opaque data) instead.
	Redacted bool
}

// WithThinking prepends a thinking block to the reply.
func (r Reply) WithThinking(text string) Reply {
	r.Thinking = append(append([]ThinkingSpec(nil), r.Thinking...), ThinkingSpec{Text: text})
	return r
}

// WithRedactedThinking adds a redacted_thinking block to the reply.
func (r Reply) WithRedactedThinking() Reply {
	r.Thinking = append(append([]ThinkingSpec(nil), r.Thinking...), ThinkingSpec{Redacted: true})
	return r
}

// thinkingRequest is the thinking a request asked for.
type thinkingRequest struct {
	on      bool
	omitted bool // display "omitted": the thinking text is left empty
	typ     string
	budget  float64
}

func anthropicThinking(rec Recorded) thinkingRequest {
	t, _ := rec.Body["thinking"].(map[string]any)
	if t == nil {
		return thinkingRequest{}
	}
	typ, _ := t["type"].(string)
	display, _ := t["display"].(string)
	budget, _ := t["budget_tokens"].(float64)
	return thinkingRequest{on: typ == "enabled" || typ == "adaptive", omitted: display == "omitted", typ: typ, budget: budget}
}

// reasoningOn reports an OpenAI request that asks a reasoning model to
// reason.
func reasoningOn(rec Recorded) bool {
	_, ok := rec.Body["reasoning_effort"].(string)
	return ok
}

// signature is the fake's signature of a thinking block: bound to the
// text, so an altered block no longer matches it.
func signature(seq, i int, text string) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%d/%d/%s", seq, i, text)))
	return "EqQBCkYIBxgCKkA" + base64.StdEncoding.EncodeToString(sum[:])
}

// thinkingBlocks renders a reply's thinking blocks for rec.
func thinkingBlocks(rec Recorded, reply Reply) []any {
	tr := anthropicThinking(rec)
	if !tr.on {
		return nil
	}
	out := make([]any, 0, len(reply.Thinking))
	for i, t := range reply.Thinking {
		if t.Redacted {
			out = append(out, map[string]any{"type": "redacted_thinking", "data": "EmwKAhgBEgy" + signature(rec.Seq, i, "redacted")})
			continue
		}
		text := t.Text
		if tr.omitted {
			text = ""
		}
		out = append(out, map[string]any{"type": "thinking", "thinking": text, "signature": signature(rec.Seq, i, t.Text)})
	}
	return out
}

// thinkingTokens is how many output tokens the reply's thinking bills
// (thinking is billed as output, omitted or not).
func thinkingTokens(rec Recorded, reply Reply) int {
	if rec.Format == OpenAI && !reasoningOn(rec) || rec.Format == Anthropic && !anthropicThinking(rec).on {
		return 0
	}
	n := 0
	for _, t := range reply.Thinking {
		if t.Redacted {
			n += 16
		} else {
			n += len(t.Text)/4 + 1
		}
	}
	return n
}

// issuedThinking remembers the thinking blocks the fake sent, by
// signature (or redacted data), and each tool_use's blocks, so Strict can
// tell a block returned verbatim from one dropped, altered or moved.
type issuedThinking struct {
	text   map[string]string // signature → thinking text as issued (before display)
	data   map[string]bool   // redacted data issued
	byTool map[string][]map[string]any
}

func (it *issuedThinking) remember(content []any) {
	if it.text == nil {
		it.text, it.data, it.byTool = map[string]string{}, map[string]bool{}, map[string][]map[string]any{}
	}
	var blocks []map[string]any
	for _, c := range content {
		b, _ := c.(map[string]any)
		switch b["type"] {
		case "thinking":
			sig, _ := b["signature"].(string)
			text, _ := b["thinking"].(string)
			it.text[sig] = text
			blocks = append(blocks, b)
		case "redacted_thinking":
			data, _ := b["data"].(string)
			it.data[data] = true
			blocks = append(blocks, b)
		case "tool_use":
			id, _ := b["id"].(string)
			it.byTool[id] = blocks
		}
	}
}

// thinkingError is why Anthropic would refuse the request's thinking:
// its settings (type for the model, budget, sampling, tool_choice), a
// thinking block altered, unknown, or cache-marked, or an assistant
// message of the tool-use cycle in progress without the thinking blocks
// it was answered with, in order and in front.
func (it *issuedThinking) thinkingError(rec Recorded) string {
	tr := anthropicThinking(rec)
	model := strings.ToLower(rec.Model())
	if msg := thinkingSettingsError(rec, tr, model); msg != "" {
		return msg
	}
	msgs := rec.Messages()
	for i, m := range msgs {
		for j, b := range blocksOf(m["content"]) {
			switch b["type"] {
			case "thinking", "redacted_thinking":
				if m["role"] != "assistant" {
					return fmt.Sprintf("messages.%d.content.%d: thinking blocks may only appear in assistant messages", i, j)
				}
				if _, ok := b["cache_control"]; ok {
					return fmt.Sprintf("messages.%d.content.%d.thinking.cache_control: cache_control cannot be set for thinking blocks", i, j)
				}
				if b["type"] == "redacted_thinking" {
					data, _ := b["data"].(string)
					if !it.data[data] {
						return fmt.Sprintf("messages.%d.content.%d: Invalid `data` in `redacted_thinking` block", i, j)
					}
					continue
				}
				sig, _ := b["signature"].(string)
				text, _ := b["thinking"].(string)
				want, ok := it.text[sig]
				if !ok || text != want {
					return fmt.Sprintf("messages.%d.content.%d: Invalid `signature` in `thinking` block", i, j)
				}
			}
		}
	}
	if !tr.on {
		return ""
	}
	// The cycle in progress: the assistant messages after the last user
	// message that is no tool result.
	start := 0
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i]["role"] == "user" && !hasToolResult(msgs[i]) {
			start = i + 1
			break
		}
	}
	for i := start; i < len(msgs); i++ {
		if msgs[i]["role"] != "assistant" {
			continue
		}
		blocks := blocksOf(msgs[i]["content"])
		var want []map[string]any
		for _, b := range blocks {
			if b["type"] == "tool_use" {
				id, _ := b["id"].(string)
				want = it.byTool[id]
				break
			}
		}
		for k, w := range want {
			if k >= len(blocks) || !sameThinking(blocks[k], w) {
				found := "nothing"
				if k < len(blocks) {
					found = fmt.Sprintf("`%v`", blocks[k]["type"])
				}
				return fmt.Sprintf("messages.%d.content.%d.type: Expected `thinking` or `redacted_thinking`, but found %s. When `thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you include thinking blocks from previous turns. To avoid this requirement, disable `thinking`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking", i, k, found)
			}
		}
	}
	return ""
}

func hasToolResult(m map[string]any) bool {
	for _, b := range blocksOf(m["content"]) {
		if b["type"] == "tool_result" {
			return true
		}
	}
	return false
}

func sameThinking(got, want map[string]any) bool {
	if got["type"] != want["type"] {
		return false
	}
	if want["type"] == "redacted_thinking" {
		return got["data"] == want["data"]
	}
	return got["signature"] == want["signature"] && got["thinking"] == want["thinking"]
}

// thinkingSettingsError is Anthropic's refusal of a request's thinking
// settings: the model family (claude-opus-4-7 and later, claude-mythos:
// adaptive only; before 4.6: budget only), the budget's bounds, and what
// sampling and tool_choice thinking allows.
func thinkingSettingsError(rec Recorded, tr thinkingRequest, model string) string {
	adaptiveOnly := strings.HasPrefix(model, "claude-mythos") || strings.HasPrefix(model, "claude-opus-4-7") || strings.HasPrefix(model, "claude-opus-4-8") || strings.HasPrefix(model, "claude-opus-5") || strings.HasPrefix(model, "claude-sonnet-5")
	takesAdaptive := adaptiveOnly || strings.Contains(model, "-4-6")
	switch {
	case tr.typ == "enabled" && adaptiveOnly:
		return fmt.Sprintf("thinking.type.enabled: \"thinking.type.enabled\" is not supported for this model. Use \"thinking.type.adaptive\" and \"output_config.effort\" to control thinking behavior.")
	case tr.typ == "adaptive" && !takesAdaptive:
		return "thinking.type: adaptive thinking is not supported on this model"
	case tr.typ == "enabled" && tr.budget < 1024:
		return "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
	}
	if tr.typ == "enabled" {
		maxTokens, _ := rec.Body["max_tokens"].(float64)
		if tr.budget >= maxTokens && !strings.Contains(rec.Header.Get("anthropic-beta"), "interleaved-thinking-2025-05-14") {
			return fmt.Sprintf("`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking#max-tokens-and-context-window-size")
		}
	}
	if adaptiveOnly {
		for _, k := range []string{"temperature", "top_p", "top_k"} {
			if _, ok := rec.Body[k]; ok {
				return fmt.Sprintf("%s: this model does not support `%s`", k, k)
			}
		}
	}
	if !tr.on {
		return ""
	}
	if t, ok := rec.Body["temperature"].(float64); ok && t != 1 {
		return "`temperature` may only be set to 1 when thinking is enabled. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking#feature-compatibility"
	}
	if _, ok := rec.Body["top_k"]; ok {
		return "`top_k` must be unset when thinking is enabled. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking#feature-compatibility"
	}
	if p, ok := rec.Body["top_p"].(float64); ok && p < 0.95 {
		return "`top_p` must be greater than or equal to 0.95 or unset when thinking is enabled. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking#feature-compatibility"
	}
	if tc, ok := rec.Body["tool_choice"].(map[string]any); ok && (tc["type"] == "any" || tc["type"] == "tool") {
		return "Thinking may not be enabled when tool_choice forces tool use."
	}
	return ""
}

// reasoningError is OpenAI's refusal of a reasoning request's parameters.
func reasoningError(rec Recorded) string {
	effort, ok := rec.Body["reasoning_effort"].(string)
	if !ok {
		return ""
	}
	switch effort {
	case "none", "minimal", "low", "medium", "high", "xhigh":
	default:
		return fmt.Sprintf("Invalid value: '%s'. Supported values are: 'minimal', 'low', 'medium', and 'high'.", effort)
	}
	if _, ok := rec.Body["max_tokens"]; ok {
		return "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead."
	}
	for _, k := range []string{"temperature", "top_p"} {
		if v, ok := rec.Body[k].(float64); ok && v != 1 {
			return fmt.Sprintf("Unsupported value: '%s' does not support %v with this model. Only the default (1) value is supported.", k, v)
		}
	}
	return ""
}

// anthropicBody renders a Messages API response and remembers the
// thinking blocks it carries.
func (s *Server) anthropicBody(rec Recorded, reply Reply) (map[string]any, error) {
	body, err := anthropicBody(rec, reply)
	if err != nil {
		return nil, err
	}
	content, _ := body["content"].([]any)
	s.mu.Lock()
	s.thinking.remember(content)
	s.mu.Unlock()
	return body, nil
}

// settingsError is Strict's refusal of a request's thinking (Anthropic)
// or reasoning (OpenAI) parameters and blocks; called with s.mu held.
func (s *Server) settingsError(rec Recorded) error {
	var msg string
	if rec.Format == OpenAI {
		msg = reasoningError(rec)
	} else {
		msg = s.thinking.thinkingError(rec)
	}
	if msg == "" {
		return nil
	}
	return fmt.Errorf("%s", msg)
}

// keepsPriorThinking reports a model that keeps the thinking blocks of
// turns that ended in its context (Anthropic's extended-thinking guide,
// "Thinking block preservation"): Claude Opus 4.5 and later, Sonnet 4.6
// and later, claude-mythos; Haiku through 4.5 and older Opus and Sonnet
// models keep only the cycle in progress. A name the rule cannot read
// (not a Claude model) keeps them: the request is then hashed as sent.
func keepsPriorThinking(model string) bool {
	m := strings.ToLower(model)
	if i := strings.LastIndex(m, "/"); i >= 0 {
		m = m[i+1:]
	}
	m = strings.TrimPrefix(m, "anthropic.")
	if strings.HasPrefix(m, "claude-mythos") {
		return true
	}
	tier, version, ok := claudeTierVersion(m)
	switch {
	case !ok:
		return !strings.HasPrefix(m, "claude-")
	case tier == "opus":
		return version >= 45
	case tier == "sonnet":
		return version >= 46
	case tier == "haiku":
		return version > 45
	}
	return false
}

// claudeTierVersion reads claude-<tier>-<major>[-<minor>] and
// claude-<major>[-<minor>]-<tier> (an 8-digit date is no minor); version
// is major*10 + minor.
func claudeTierVersion(m string) (tier string, version int, ok bool) {
	parts := strings.Split(m, "-")
	if len(parts) < 3 || parts[0] != "claude" {
		return "", 0, false
	}
	num := func(s string) (int, bool) {
		n, err := strconv.Atoi(s)
		return n, err == nil && len(s) <= 2
	}
	rest := parts[1:]
	if _, isNum := num(rest[0]); !isNum {
		tier, rest = rest[0], rest[1:]
	}
	major, isNum := num(rest[0])
	if !isNum {
		return "", 0, false
	}
	rest = rest[1:]
	minor := 0
	if len(rest) > 0 {
		if n, isNum := num(rest[0]); isNum {
			minor, rest = n, rest[1:]
		}
	}
	if tier == "" && len(rest) > 0 {
		tier = rest[0]
	}
	return tier, major*10 + minor, tier != ""
}

// thinkingStripped reports, by message index, the messages whose thinking
// blocks the model of body does not see: with thinking off every one
// ("thinking content passed to the API is simply ignored"); with it on,
// for a model that does not keep prior thinking, those before the cycle in
// progress (up to the last user message that is no tool result).
func thinkingStripped(body map[string]any) func(int) bool {
	if !anthropicThinking(Recorded{Body: body}).on {
		return func(int) bool { return true }
	}
	if model, _ := body["model"].(string); keepsPriorThinking(model) {
		return func(int) bool { return false }
	}
	msgs, _ := body["messages"].([]any)
	start := 0
	for i := len(msgs) - 1; i >= 0; i-- {
		if m, _ := msgs[i].(map[string]any); m["role"] == "user" && !hasToolResult(m) {
			start = i + 1
			break
		}
	}
	return func(i int) bool { return i < start }
}

// messageCacheKey is what keys the message blocks' cache besides their
// content: the thinking parameters (type, budget_tokens) and tool_choice,
// whose changes invalidate the messages' cache but not the tools' or the
// system's.
func messageCacheKey(body map[string]any) []byte {
	t, _ := body["thinking"].(map[string]any)
	return encode(map[string]any{"thinking": map[string]any{"type": t["type"], "budget_tokens": t["budget_tokens"]}, "tool_choice": body["tool_choice"]})
}
