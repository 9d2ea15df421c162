package provider_test

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/provider"
)

var updateBodies = flag.Bool("update-bae-bodies", false, "rewrite testdata/baebodies from this build")

// TestBAEProfileBodiesUnchanged: a request without model settings is byte
// for byte the body recorded before settings existed (testdata/baebodies,
// written by the code of that time), for both wire formats, streamed and
// whole, with and without prompt caching: a BAE profile's provider sees
// exactly what it saw.
func TestBAEProfileBodiesUnchanged(t *testing.T) {
	cases := []struct {
		name   string
		ep     provider.Endpoint
		stream bool
	}{
		{"anthropic-cached-stream", provider.Endpoint{Kind: provider.KindAnthropic, Model: "claude-sonnet-4-6", MaxTokens: 8096, PromptCache: true}, true},
		{"anthropic-cached-whole", provider.Endpoint{Kind: provider.KindAnthropic, Model: "claude-sonnet-4-6", MaxTokens: 8096, PromptCache: true}, false},
		{"anthropic-uncached-whole", provider.Endpoint{Kind: provider.KindAnthropic, Model: "claude-sonnet-4-6"}, false},
		{"openai-cached-stream", provider.Endpoint{Kind: provider.KindOpenAI, Model: "gpt-5", MaxTokens: 2048, PromptCache: true, CacheKey: "ses_1"}, true},
		{"openai-uncached-whole", provider.Endpoint{Kind: provider.KindOpenAI, Model: "gpt-4o"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := make(chan []byte, 1)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				got <- b
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, `{"content":[],"stop_reason":"end_turn","choices":[{"message":{"content":"x"},"finish_reason":"stop"}]}`)
			}))
			t.Cleanup(srv.Close)
			tc.ep.BaseURL, tc.ep.AuthToken = srv.URL, "k"
			c := &provider.Client{}
			var err error
			if tc.stream {
				_, err = c.CallStreaming(context.Background(), tc.ep, json.RawMessage(historyWithTags), json.RawMessage(toolsJSON), nil)
			} else {
				_, err = c.Call(context.Background(), tc.ep, json.RawMessage(historyWithTags), json.RawMessage(toolsJSON))
			}
			require.NoError(t, err)
			body := <-got
			path := filepath.Join("testdata", "baebodies", tc.name+".json")
			if *updateBodies {
				require.NoError(t, os.WriteFile(path, body, 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Equal(t, string(want), string(body))
		})
	}
}
