package provider_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/provider"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
)

// cacheTools are canonical declarations of about 2,500 tokens.
func cacheTools() json.RawMessage {
	var tools []map[string]any
	for i := range 8 {
		tools = append(tools, map[string]any{
			"name":        fmt.Sprintf("tool_%d", i),
			"description": strings.Repeat(fmt.Sprintf("Tool %d reads and writes things. ", i), 36),
			"input_schema": map[string]any{"type": "object", "properties": map[string]any{
				"path": map[string]any{"type": "string"}, "limit": map[string]any{"type": "integer"},
			}},
		})
	}
	b, _ := json.Marshal(tools)
	return b
}

// conversation builds canonical history the way the store renders it:
// {"role","content"} objects, user text as strings.
type conversation struct{ msgs []string }

func (c *conversation) user(text string) {
	b, _ := json.Marshal(text)
	c.msgs = append(c.msgs, `{"role":"user","content":`+string(b)+`}`)
}

func (c *conversation) raw(role, content string) {
	c.msgs = append(c.msgs, `{"role":"`+role+`","content":`+content+`}`)
}

func (c *conversation) json() json.RawMessage {
	return json.RawMessage("[" + strings.Join(c.msgs, ",") + "]")
}

// replyOf appends the assistant content of a response to the history.
func (c *conversation) replyOf(resp *provider.Response) {
	c.raw("assistant", string(resp.Canonical.Content))
}

func cacheEndpoint(f *fakeprovider.Server, kind string, on bool) provider.Endpoint {
	return provider.Endpoint{Kind: kind, BaseURL: f.URL(), Model: "m", MaxTokens: 100, AuthToken: "t", PromptCache: on, CacheKey: "sess-1"}
}

// stripMarkers removes what a breakpoint adds, in either encoding.
func stripMarkers(b []byte) []byte {
	b = bytes.ReplaceAll(b, []byte(`,"cache_control":{"type":"ephemeral"}`), nil)
	return bytes.ReplaceAll(b, []byte(`"cache_control":{"type":"ephemeral"},`), nil)
}

// messagesOf is the "messages" array of a request body, as sent.
func messagesOf(t *testing.T, body []byte) []byte {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(body, &m))
	return m["messages"]
}

// requireAppendOnly checks that each request's messages, markers removed,
// start with the previous request's (its closing bracket aside): the rolling
// breakpoint changes nothing but the marker.
func requireAppendOnly(t *testing.T, reqs []fakeprovider.Recorded) {
	t.Helper()
	for i := 1; i < len(reqs); i++ {
		prev := stripMarkers(messagesOf(t, reqs[i-1].RawBody))
		cur := stripMarkers(messagesOf(t, reqs[i].RawBody))
		require.Truef(t, bytes.HasPrefix(cur, prev[:len(prev)-1]), "request %d rewrote the prefix of request %d:\n%s\n%s", i+1, i, prev, cur)
	}
}

func TestPromptCacheAnthropicSessionReadsItsPrefix(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			f := fakeprovider.New(t)
			f.Caching(true)
			ep := cacheEndpoint(f, provider.KindAnthropic, true)
			c := &provider.Client{}
			var conv conversation
			for i := range 12 {
				conv.user(fmt.Sprintf("message %d: %s", i, strings.Repeat("some words ", 50)))
				var resp *provider.Response
				var err error
				if stream {
					resp, err = c.CallStreaming(context.Background(), ep, conv.json(), cacheTools(), nil)
				} else {
					resp, err = c.Call(context.Background(), ep, conv.json(), cacheTools())
				}
				require.NoError(t, err)
				if i > 0 {
					assert.Positive(t, provider.InputTokens(provider.KindAnthropic, resp.Raw))
					assert.Contains(t, string(resp.Raw), `"cache_read_input_tokens"`)
				}
				conv.replyOf(resp)
			}
			requireAppendOnly(t, f.Requests())
			var billed, input float64
			for i, b := range f.CacheLedger() {
				assert.False(t, b.Rewrite, "request %d", i+1)
				assert.Equal(t, 2, b.Breakpoints, "the tools and the newest message")
				if i > 0 {
					assert.Greater(t, b.Read, b.Prev-20, "request %d reads what the one before wrote", i+1)
				}
				billed += b.Billed()
				input += float64(b.Input)
			}
			assert.Less(t, billed/input, 0.35, "12 short turns already bill well under the uncached price")
		})
	}
}

func TestPromptCacheAnthropicToolLoopKeepsWithinLookback(t *testing.T) {
	f := fakeprovider.New(t)
	f.Caching(true)
	ep := cacheEndpoint(f, provider.KindAnthropic, true)
	c := &provider.Client{}
	var conv conversation
	conv.user("start: " + strings.Repeat("context ", 200))
	for i := range 4 {
		// Each step calls 8 tools at once: 16 blocks appended per request,
		// beyond what one rolling breakpoint's look-back covers... twice.
		var uses, results []string
		for j := range 8 {
			id := fmt.Sprintf("toolu_%d_%d", i, j)
			// Internal tags as stored: the conversation is decoded, not copied.
			uses = append(uses, fmt.Sprintf(`{"type":"tool_use","id":%q,"name":"tool_%d","input":{"path":"/x"},"dispatch":"client"}`, id, j))
			results = append(results, fmt.Sprintf(`{"type":"tool_result","tool_use_id":%q,"content":%q}`, id, strings.Repeat("result ", 30)))
		}
		resp, err := c.Call(context.Background(), ep, conv.json(), cacheTools())
		require.NoError(t, err)
		_ = resp
		conv.raw("assistant", "["+strings.Join(uses, ",")+"]")
		conv.raw("user", "["+strings.Join(results, ",")+"]")
	}
	_, err := c.Call(context.Background(), ep, conv.json(), cacheTools())
	require.NoError(t, err)
	reqs := f.Requests()
	requireAppendOnly(t, reqs)
	for _, r := range reqs {
		assert.NotContains(t, string(r.RawBody), `"dispatch"`, "internal fields are cut out of the copied history")
	}
	for i, b := range f.CacheLedger() {
		assert.LessOrEqual(t, b.Breakpoints, 4)
		if i > 0 {
			assert.Equal(t, 3, b.Breakpoints, "request %d: tools, the previous request's last message, the newest", i+1)
			assert.Greater(t, b.Read, b.Prev-20, "request %d reads the previous prefix despite the look-back", i+1)
		}
	}
}

func TestPromptCacheOffSendsNoCacheFields(t *testing.T) {
	for _, kind := range []string{provider.KindAnthropic, provider.KindOpenAI} {
		t.Run(kind, func(t *testing.T) {
			f := fakeprovider.New(t)
			f.Caching(true)
			var conv conversation
			conv.user("hello " + strings.Repeat("x ", 3000))
			c := &provider.Client{}
			_, err := c.Call(context.Background(), cacheEndpoint(f, kind, false), conv.json(), cacheTools())
			require.NoError(t, err)
			_, err = c.CallStreaming(context.Background(), cacheEndpoint(f, kind, false), conv.json(), cacheTools(), nil)
			require.NoError(t, err)
			_, err = c.Call(context.Background(), cacheEndpoint(f, kind, true), conv.json(), cacheTools())
			require.NoError(t, err)
			reqs := f.Requests()
			for _, r := range reqs[:2] {
				assert.NotContains(t, string(r.RawBody), "cache_control")
				assert.NotContains(t, string(r.RawBody), "prompt_cache_key")
			}
			on := string(reqs[2].RawBody)
			if kind == provider.KindOpenAI {
				assert.Equal(t, "sess-1", reqs[2].Body["prompt_cache_key"])
				assert.NotContains(t, on, "cache_control")
			} else {
				assert.Equal(t, 2, strings.Count(on, `"cache_control":{"type":"ephemeral"}`))
				assert.NotContains(t, on, "prompt_cache_key")
			}
		})
	}
}

func TestPromptCacheOpenAIPrefixIsStable(t *testing.T) {
	f := fakeprovider.New(t)
	f.Caching(true)
	ep := cacheEndpoint(f, provider.KindOpenAI, true)
	c := &provider.Client{}
	var conv conversation
	for i := range 8 {
		conv.user(fmt.Sprintf("message %d: %s", i, strings.Repeat("some words ", 20)))
		call := c.Call
		if i%2 == 1 { // the streamed answer's usage carries the cached tokens too
			call = func(ctx context.Context, ep provider.Endpoint, m, tl json.RawMessage) (*provider.Response, error) {
				return c.CallStreaming(ctx, ep, m, tl, nil)
			}
		}
		resp, err := call(context.Background(), ep, conv.json(), cacheTools())
		require.NoError(t, err)
		conv.replyOf(resp)
		var u struct {
			Usage struct {
				Details struct {
					Cached int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		require.NoError(t, json.Unmarshal(resp.Raw, &u))
		if i > 0 {
			assert.GreaterOrEqual(t, u.Usage.Details.Cached, fakeprovider.CacheMinTokens)
		}
	}
	for i, b := range f.CacheLedger() {
		assert.False(t, b.Rewrite, "request %d", i+1)
		if i > 0 {
			assert.GreaterOrEqual(t, float64(b.Shared)/float64(b.Prompt), 0.9, "request %d", i+1)
		}
	}
}

func TestPromptCacheAnthropicRejectsNothingTheFakeRefuses(t *testing.T) {
	// A one-message conversation with no tools still gets a valid request.
	f := fakeprovider.New(t)
	f.Caching(true)
	f.Strict(true)
	resp, err := (&provider.Client{}).Call(context.Background(), cacheEndpoint(f, provider.KindAnthropic, true), json.RawMessage(`[{"role":"user","content":"hi"}]`), nil)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.Status)
	assert.JSONEq(t, `[{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]}]`, string(messagesOf(t, f.Requests()[0].RawBody)))
}
