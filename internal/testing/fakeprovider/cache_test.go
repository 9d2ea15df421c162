package fakeprovider_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
)

var ephemeral = map[string]any{"type": "ephemeral"}

// cacheTools are declarations of about 2,000 tokens, the last one a
// breakpoint.
func cacheTools(marked bool) []any {
	var tools []any
	for i := range 4 {
		tools = append(tools, map[string]any{
			"name": fmt.Sprintf("tool_%d", i), "description": strings.Repeat(fmt.Sprintf("what tool %d does. ", i), 100),
			"input_schema": map[string]any{"type": "object"},
		})
	}
	if marked {
		tools[len(tools)-1].(map[string]any)["cache_control"] = ephemeral
	}
	return tools
}

// turns is a conversation of n user/assistant exchanges and a last user
// message, each a one-block message of ~150 tokens; the last message's
// block is a breakpoint.
func turns(n int) []any {
	var msgs []any
	text := func(role string, i int) map[string]any {
		return map[string]any{"role": role, "content": []any{map[string]any{"type": "text", "text": fmt.Sprintf("%s %d: ", role, i) + strings.Repeat("words ", 100)}}}
	}
	for i := range n {
		msgs = append(msgs, text("user", i), text("assistant", i))
	}
	last := text("user", n)
	last["content"].([]any)[0].(map[string]any)["cache_control"] = ephemeral
	return append(msgs, last)
}

func anthropicReq(t *testing.T, tools, msgs []any) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"model": "claude-x", "max_tokens": 100, "tools": tools, "messages": msgs})
	require.NoError(t, err)
	return string(b)
}

func cachingFake(t *testing.T) (*fakeprovider.Server, *time.Time) {
	t.Helper()
	f := fakeprovider.New(t)
	f.Caching(true)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.SetClock(func() time.Time { return now })
	return f, &now
}

func usageOf(t *testing.T, body map[string]any) map[string]int {
	t.Helper()
	u, _ := body["usage"].(map[string]any)
	out := map[string]int{}
	for k, v := range u {
		if n, ok := v.(float64); ok {
			out[k] = int(n)
		}
	}
	return out
}

func TestCacheAnthropicAppendReadsThePrefix(t *testing.T) {
	f, _ := cachingFake(t)
	ctx := context.Background()
	url := f.URL() + "/v1/messages"

	status, first := post(t, ctx, url, anthropicReq(t, cacheTools(true), turns(2)))
	require.Equal(t, http.StatusOK, status, first)
	u1 := usageOf(t, first)
	assert.Zero(t, u1["cache_read_input_tokens"], "nothing cached yet")
	assert.Greater(t, u1["cache_creation_input_tokens"], 2000, "the whole prefix is written")

	// The next request appends and moves the message breakpoint.
	_, second := post(t, ctx, url, anthropicReq(t, cacheTools(true), turns(3)))
	u2 := usageOf(t, second)
	assert.Equal(t, u1["cache_creation_input_tokens"], u2["cache_read_input_tokens"], "the previous request's prefix is read")
	assert.Positive(t, u2["cache_creation_input_tokens"])
	assert.Less(t, u2["cache_creation_input_tokens"], 400, "only the appended part is written")

	ledger := f.CacheLedger()
	require.Len(t, ledger, 2)
	assert.False(t, ledger[1].Rewrite)
	assert.Equal(t, 2, ledger[1].Breakpoints)
	assert.Less(t, ledger[1].Billed()/float64(ledger[1].Input), 0.3)
}

func TestCacheAnthropicByteChangeIsAMiss(t *testing.T) {
	f, _ := cachingFake(t)
	ctx := context.Background()
	url := f.URL() + "/v1/messages"
	_, first := post(t, ctx, url, anthropicReq(t, cacheTools(true), turns(2)))
	written := usageOf(t, first)["cache_creation_input_tokens"]

	// One byte of the first message differs: only the tools' prefix hits.
	msgs := turns(3)
	msgs[0].(map[string]any)["content"].([]any)[0].(map[string]any)["text"] = "user 0: " + strings.Repeat("words ", 99) + "Words "
	_, second := post(t, ctx, url, anthropicReq(t, cacheTools(true), msgs))
	u := usageOf(t, second)
	assert.Less(t, u["cache_read_input_tokens"], written-500, "the changed block and everything after it miss")
	assert.Greater(t, u["cache_creation_input_tokens"], 1000, "rewritten from the change on")
	assert.True(t, f.CacheLedger()[1].Rewrite)

	// A changed tool declaration misses from the start.
	tools := cacheTools(true)
	tools[0].(map[string]any)["description"] = "changed"
	_, third := post(t, ctx, url, anthropicReq(t, tools, turns(3)))
	assert.Zero(t, usageOf(t, third)["cache_read_input_tokens"])
}

func TestCacheAnthropicMarkerIsNotContent(t *testing.T) {
	f, _ := cachingFake(t)
	ctx := context.Background()
	url := f.URL() + "/v1/messages"
	_, first := post(t, ctx, url, anthropicReq(t, cacheTools(true), turns(2)))
	written := usageOf(t, first)["cache_creation_input_tokens"]
	// The same prefix with the breakpoint moved on: the old marker is gone,
	// the prefix still hits.
	_, second := post(t, ctx, url, anthropicReq(t, cacheTools(true), turns(3)))
	assert.Equal(t, written, usageOf(t, second)["cache_read_input_tokens"])
}

func TestCacheAnthropicLookback(t *testing.T) {
	f, _ := cachingFake(t)
	ctx := context.Background()
	url := f.URL() + "/v1/messages"
	_, first := post(t, ctx, url, anthropicReq(t, cacheTools(true), turns(2)))
	written := usageOf(t, first)["cache_creation_input_tokens"]

	// 12 more exchanges (24 blocks) after the cached breakpoint: beyond the
	// look-back, so only the tools hit.
	_, far := post(t, ctx, url, anthropicReq(t, cacheTools(true), turns(14)))
	assert.Less(t, usageOf(t, far)["cache_read_input_tokens"], written, "the cached breakpoint is beyond the look-back")

	// With a breakpoint on the previously cached message, it hits.
	f2, _ := cachingFake(t)
	url2 := f2.URL() + "/v1/messages"
	_, first = post(t, ctx, url2, anthropicReq(t, cacheTools(true), turns(2)))
	written = usageOf(t, first)["cache_creation_input_tokens"]
	msgs := turns(14)
	msgs[4].(map[string]any)["content"].([]any)[0].(map[string]any)["cache_control"] = ephemeral
	_, near := post(t, ctx, url2, anthropicReq(t, cacheTools(true), msgs))
	assert.Equal(t, written, usageOf(t, near)["cache_read_input_tokens"])
}

func TestCacheAnthropicTTLAndMinimum(t *testing.T) {
	f, now := cachingFake(t)
	ctx := context.Background()
	url := f.URL() + "/v1/messages"
	post(t, ctx, url, anthropicReq(t, cacheTools(true), turns(2)))
	*now = now.Add(4 * time.Minute)
	_, hit := post(t, ctx, url, anthropicReq(t, cacheTools(true), turns(2)))
	assert.Positive(t, usageOf(t, hit)["cache_read_input_tokens"], "within 5 minutes (and the hit refreshed it)")
	*now = now.Add(5*time.Minute + time.Second)
	_, miss := post(t, ctx, url, anthropicReq(t, cacheTools(true), turns(2)))
	assert.Zero(t, usageOf(t, miss)["cache_read_input_tokens"], "expired")

	// A prefix under 1,024 tokens is neither written nor read.
	small := []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "hi", "cache_control": ephemeral}}}}
	_, s1 := post(t, ctx, url, anthropicReq(t, nil, small))
	_, s2 := post(t, ctx, url, anthropicReq(t, nil, small))
	assert.Zero(t, usageOf(t, s1)["cache_creation_input_tokens"])
	assert.Zero(t, usageOf(t, s2)["cache_read_input_tokens"])
}

func TestCacheAnthropicAtMostFourBreakpoints(t *testing.T) {
	f, _ := cachingFake(t)
	msgs := turns(4)
	for i := range 4 {
		msgs[i].(map[string]any)["content"].([]any)[0].(map[string]any)["cache_control"] = ephemeral
	}
	status, body := post(t, context.Background(), f.URL()+"/v1/messages", anthropicReq(t, cacheTools(false), msgs))
	require.Equal(t, http.StatusBadRequest, status)
	assert.Equal(t, map[string]any{"type": "error", "error": map[string]any{
		"type": "invalid_request_error", "message": "A maximum of 4 blocks with cache_control may be provided. Found 5.",
	}}, body)
}

func TestCacheAnthropicStreamReportsCacheUsage(t *testing.T) {
	f, _ := cachingFake(t)
	ctx := context.Background()
	url := f.URL() + "/v1/messages"
	post(t, ctx, url, anthropicReq(t, cacheTools(true), turns(2)))
	var req map[string]any
	require.NoError(t, json.Unmarshal([]byte(anthropicReq(t, cacheTools(true), turns(3))), &req))
	req["stream"] = true
	b, _ := json.Marshal(req)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	require.NoError(t, err)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || !strings.Contains(line, `"message_start"`) {
			continue
		}
		var ev struct {
			Message struct {
				Usage map[string]int `json:"usage"`
			} `json:"message"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &ev))
		assert.Positive(t, ev.Message.Usage["cache_read_input_tokens"])
		assert.Positive(t, ev.Message.Usage["cache_creation_input_tokens"])
		assert.Contains(t, ev.Message.Usage, "input_tokens")
		return
	}
	t.Fatal("no message_start event")
}

func openAIReq(t *testing.T, key string, n int, change bool) string {
	t.Helper()
	var tools []any
	for _, tool := range cacheTools(false) {
		m := tool.(map[string]any)
		tools = append(tools, map[string]any{"type": "function", "function": map[string]any{"name": m["name"], "description": m["description"], "parameters": m["input_schema"]}})
	}
	var msgs []any
	for i := range n {
		text := fmt.Sprintf("message %d ", i) + strings.Repeat("words ", 100)
		if change && i == 0 {
			text = "changed"
		}
		msgs = append(msgs, map[string]any{"role": "user", "content": text}, map[string]any{"role": "assistant", "content": "ok"})
	}
	body := map[string]any{"model": "gpt-x", "max_tokens": 100, "tools": tools, "messages": msgs}
	if key != "" {
		body["prompt_cache_key"] = key
	}
	b, err := json.Marshal(body)
	require.NoError(t, err)
	return string(b)
}

func cachedTokens(body map[string]any) int {
	u, _ := body["usage"].(map[string]any)
	d, _ := u["prompt_tokens_details"].(map[string]any)
	n, _ := d["cached_tokens"].(float64)
	return int(n)
}

func TestCacheOpenAIPrefix(t *testing.T) {
	f, _ := cachingFake(t)
	ctx := context.Background()
	url := f.URL() + "/v1/chat/completions"
	_, first := post(t, ctx, url, openAIReq(t, "s1", 4, false))
	assert.Zero(t, cachedTokens(first))
	_, second := post(t, ctx, url, openAIReq(t, "s1", 6, false))
	c := cachedTokens(second)
	assert.GreaterOrEqual(t, c, fakeprovider.CacheMinTokens)
	assert.Zero(t, (c-fakeprovider.CacheMinTokens)%128, "counted in 128-token increments")
	l := f.CacheLedger()[1]
	assert.LessOrEqual(t, l.Prev-c, 128, "all of the previous prompt but the last increment")
	assert.False(t, l.Rewrite)

	// A different prompt_cache_key routes to another cache.
	_, other := post(t, ctx, url, openAIReq(t, "s2", 6, false))
	assert.Zero(t, cachedTokens(other))
	// A change in the first message: only the tools' prefix is shared.
	_, changed := post(t, ctx, url, openAIReq(t, "s1", 7, true))
	assert.Less(t, cachedTokens(changed), c-500)
	assert.True(t, f.CacheLedger()[3].Rewrite)
}

// thinkingReq is an anthropic request of model with thinking (nil: none)
// over msgs, the declarations of cacheTools marked.
func thinkingReq(t *testing.T, model string, thinking map[string]any, msgs []any) string {
	t.Helper()
	body := map[string]any{"model": model, "max_tokens": 4000, "tools": cacheTools(true), "messages": msgs}
	if thinking != nil {
		body["thinking"] = thinking
	}
	b, err := json.Marshal(body)
	require.NoError(t, err)
	return string(b)
}

// thinkingTurn is an assistant message with a ~300-token thinking block
// and then text, or a tool_use when tool is set.
func thinkingTurn(i int, tool bool) map[string]any {
	content := []any{map[string]any{"type": "thinking", "thinking": fmt.Sprintf("thought %d: ", i) + strings.Repeat("hmm ", 300), "signature": fmt.Sprintf("sig-%d", i)}}
	if tool {
		content = append(content, map[string]any{"type": "tool_use", "id": fmt.Sprintf("tu_%d", i), "name": "tool_0", "input": map[string]any{}})
	} else {
		content = append(content, map[string]any{"type": "text", "text": fmt.Sprintf("answer %d", i)})
	}
	return map[string]any{"role": "assistant", "content": content}
}

func userTurn(text string, marked bool) map[string]any {
	b := map[string]any{"type": "text", "text": text + strings.Repeat(" words", 100)}
	if marked {
		b["cache_control"] = ephemeral
	}
	return map[string]any{"role": "user", "content": []any{b}}
}

func toolResult(id string, marked bool) map[string]any {
	b := map[string]any{"type": "tool_result", "tool_use_id": id, "content": strings.Repeat("result ", 100)}
	if marked {
		b["cache_control"] = ephemeral
	}
	return map[string]any{"role": "user", "content": []any{b}}
}

// TestCacheAnthropicThinking: the documented caching rules with thinking.
// A model that keeps prior thinking (claude-sonnet-4-6) reads the whole
// previous request across a tool cycle and into the next turn; one that
// strips the thinking of ended turns (claude-sonnet-4-5) reads a cycle's
// prefix within the cycle, but the next turn sees the cycle without its
// thinking, so it reads only what was cached before the cycle (and bills
// none of the stripped thinking as input), though the request as sent
// only appended (no rewrite). Changing budget_tokens invalidates the
// messages' cache, not the tools'; cache_control on a thinking block is a
// 400.
func TestCacheAnthropicThinking(t *testing.T) {
	ctx := context.Background()
	adaptive := map[string]any{"type": "adaptive"}
	budget := map[string]any{"type": "enabled", "budget_tokens": 1024}
	for _, c := range []struct {
		model    string
		thinking map[string]any
		keeps    bool
	}{{"claude-sonnet-4-6", adaptive, true}, {"claude-opus-4-5-20251101", budget, true}, {"claude-sonnet-4-5", budget, false}, {"claude-3-7-sonnet-20250219", budget, false}, {"claude-haiku-4-5", budget, false}} {
		t.Run(c.model, func(t *testing.T) {
			f, _ := cachingFake(t)
			url := f.URL() + "/v1/messages"
			cycle := []any{userTurn("user 0", false), thinkingTurn(0, true)}
			// The cycle's first request, then its tool result.
			_, r1 := post(t, ctx, url, thinkingReq(t, c.model, c.thinking, []any{userTurn("user 0", true)}))
			u1 := usageOf(t, r1)
			_, r2 := post(t, ctx, url, thinkingReq(t, c.model, c.thinking, append(append([]any{}, cycle...), toolResult("tu_0", true))))
			u2 := usageOf(t, r2)
			assert.Equal(t, u1["cache_creation_input_tokens"], u2["cache_read_input_tokens"], "the cycle reads its first request")
			// The next turn, after the cycle ended with a text answer.
			next := append(append([]any{}, cycle...), toolResult("tu_0", false), thinkingTurn(1, false), userTurn("user 1", true))
			_, r3 := post(t, ctx, url, thinkingReq(t, c.model, c.thinking, next))
			u3 := usageOf(t, r3)
			l := f.CacheLedger()
			require.Len(t, l, 3)
			assert.False(t, l[2].Rewrite, "as sent, the next turn only appended")
			if c.keeps {
				assert.Equal(t, u2["cache_read_input_tokens"]+u2["cache_creation_input_tokens"], u3["cache_read_input_tokens"], "the whole cycle is read, its thinking included")
				assert.Zero(t, l[2].Ignored)
			} else {
				assert.Equal(t, u1["cache_creation_input_tokens"], u3["cache_read_input_tokens"], "only what preceded the cycle: its entries hold the stripped thinking")
				assert.Greater(t, l[2].Ignored, 500, "both thinking blocks are stripped")
				assert.Equal(t, fakeprovider.InputTokens([]byte(thinkingReq(t, c.model, c.thinking, next)))-l[2].Ignored, l[2].Input, "stripped thinking is no input")
			}
			// Another budget: the messages' cache is invalidated, the tools' is not.
			other := map[string]any{"type": "enabled", "budget_tokens": 2048}
			if c.thinking["type"] == "adaptive" {
				other = map[string]any{"type": "disabled"}
			}
			_, r4 := post(t, ctx, url, thinkingReq(t, c.model, other, append(append([]any{}, cycle[:1]...), userTurn("user 0b", true))))
			tools := usageOf(t, r4)["cache_read_input_tokens"]
			assert.Positive(t, tools, "the tools are still read")
			assert.Less(t, tools, u1["cache_creation_input_tokens"], "no message block is")
		})
	}
	t.Run("marked thinking", func(t *testing.T) {
		f, _ := cachingFake(t)
		turn := thinkingTurn(0, false)
		turn["content"].([]any)[0].(map[string]any)["cache_control"] = ephemeral
		status, body := post(t, ctx, f.URL()+"/v1/messages", thinkingReq(t, "claude-sonnet-4-6", adaptive, []any{userTurn("u", false), turn, userTurn("v", false)}))
		require.Equal(t, http.StatusBadRequest, status)
		assert.Contains(t, fmt.Sprint(body), "cache_control cannot be set for thinking blocks")
	})
}
