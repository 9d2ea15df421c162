package provider_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/provider"
)

// TestUsageOfWholeBodies: the four parts are read from both formats, the
// OpenAI cached tokens taken out of the prompt tokens.
func TestUsageOfWholeBodies(t *testing.T) {
	anth := json.RawMessage(`{"usage":{"input_tokens":12,"output_tokens":34,"cache_read_input_tokens":560,"cache_creation_input_tokens":78}}`)
	assert.Equal(t, provider.Usage{Input: 12, Output: 34, CacheRead: 560, CacheWrite: 78}, provider.UsageOf(provider.KindAnthropic, anth))
	oai := json.RawMessage(`{"usage":{"prompt_tokens":1000,"completion_tokens":50,"total_tokens":1050,"prompt_tokens_details":{"cached_tokens":896}}}`)
	assert.Equal(t, provider.Usage{Input: 104, Output: 50, CacheRead: 896}, provider.UsageOf(provider.KindOpenAI, oai))
	assert.Equal(t, provider.Usage{Input: 7, Output: 3}, provider.UsageOf(provider.KindOpenAI, json.RawMessage(`{"usage":{"prompt_tokens":7,"completion_tokens":3}}`)))
	assert.Equal(t, provider.Usage{}, provider.UsageOf(provider.KindAnthropic, json.RawMessage(`{"content":[]}`)))
	assert.Equal(t, provider.Usage{}, provider.UsageOf(provider.KindAnthropic, json.RawMessage(`not json`)))
	assert.Equal(t, int64(12+34+560+78), provider.UsageOf(provider.KindAnthropic, anth).Total())
}

// TestUsageOfStreamedAnswers: a streamed answer's usage (Anthropic's
// message_start and message_delta, the Chat Completions usage chunk) ends
// up in the assembled body, cache fields included.
func TestUsageOfStreamedAnswers(t *testing.T) {
	streams := map[string][]string{
		provider.KindAnthropic: {
			`event: message_start` + "\n" + `data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"usage":{"input_tokens":5,"cache_read_input_tokens":2048,"cache_creation_input_tokens":300,"output_tokens":1}}}`,
			`event: content_block_start` + "\n" + `data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
			`event: content_block_delta` + "\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}`,
			`event: content_block_stop` + "\n" + `data: {"type":"content_block_stop","index":0}`,
			`event: message_delta` + "\n" + `data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":42}}`,
			`event: message_stop` + "\n" + `data: {"type":"message_stop"}`,
		},
		provider.KindOpenAI: {
			`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"hi"},"finish_reason":null}]}`,
			`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
			`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":3000,"completion_tokens":42,"total_tokens":3042,"prompt_tokens_details":{"cached_tokens":2048}}}`,
			`data: [DONE]`,
		},
	}
	want := map[string]provider.Usage{
		provider.KindAnthropic: {Input: 5, Output: 42, CacheRead: 2048, CacheWrite: 300},
		provider.KindOpenAI:    {Input: 952, Output: 42, CacheRead: 2048},
	}
	for kind, lines := range streams {
		t.Run(kind, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				for _, l := range lines {
					fmt.Fprintf(w, "%s\n\n", l)
				}
			}))
			defer srv.Close()
			c := &provider.Client{HTTP: srv.Client()}
			resp, err := c.CallStreaming(context.Background(), provider.Endpoint{Kind: kind, BaseURL: srv.URL, Model: "m", AuthToken: "k"},
				json.RawMessage(`[{"role":"user","content":"hi"}]`), nil, nil)
			require.NoError(t, err)
			assert.Equal(t, want[kind], provider.UsageOf(kind, resp.Raw), "%s", resp.Raw)
		})
	}
}
