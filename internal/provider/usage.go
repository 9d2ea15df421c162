package provider

import "encoding/json"

// Usage is what one provider call consumed, in tokens, split the way the
// providers bill it: Input is the input not read from or written to a
// prompt cache, CacheRead the input read from it, CacheWrite the input
// written to it, Output the answer.
type Usage struct {
	Input      int64 `json:"input_tokens"`
	Output     int64 `json:"output_tokens"`
	CacheRead  int64 `json:"cache_read_tokens"`
	CacheWrite int64 `json:"cache_write_tokens"`
}

// Total is every token of the call, the unit of token budgets.
func (u Usage) Total() int64 { return u.Input + u.Output + u.CacheRead + u.CacheWrite }

// Add returns the sum of u and v.
func (u Usage) Add(v Usage) Usage {
	return Usage{Input: u.Input + v.Input, Output: u.Output + v.Output, CacheRead: u.CacheRead + v.CacheRead, CacheWrite: u.CacheWrite + v.CacheWrite}
}

// UsageOf reads the usage a successful response body reports (a streamed
// answer's assembled body carries the usage of its message_start and
// message_delta events, or of the Chat Completions usage chunk). Anthropic
// reports input_tokens apart from cache_read_input_tokens and
// cache_creation_input_tokens; OpenAI's prompt_tokens include the
// prompt_tokens_details.cached_tokens, which are taken out of Input here so
// the four parts never overlap. A body without usage is all zeros; a
// negative count is read as zero.
func UsageOf(kind string, raw json.RawMessage) Usage {
	var body struct {
		Usage struct {
			InputTokens      int64 `json:"input_tokens"`
			OutputTokens     int64 `json:"output_tokens"`
			CacheRead        int64 `json:"cache_read_input_tokens"`
			CacheWrite       int64 `json:"cache_creation_input_tokens"`
			PromptTokens     int64 `json:"prompt_tokens"`
			CompletionTokens int64 `json:"completion_tokens"`
			PromptDetails    struct {
				CachedTokens int64 `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if json.Unmarshal(raw, &body) != nil {
		return Usage{}
	}
	u := body.Usage
	var out Usage
	if kind == KindOpenAI {
		cached := min(max(u.PromptDetails.CachedTokens, 0), max(u.PromptTokens, 0))
		out = Usage{Input: u.PromptTokens - cached, Output: u.CompletionTokens, CacheRead: cached}
	} else {
		out = Usage{Input: u.InputTokens, Output: u.OutputTokens, CacheRead: u.CacheRead, CacheWrite: u.CacheWrite}
	}
	out.Input, out.Output, out.CacheRead, out.CacheWrite = max(out.Input, 0), max(out.Output, 0), max(out.CacheRead, 0), max(out.CacheWrite, 0)
	return out
}
