package provider_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/provider"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
)

// withoutCreated drops what differs between two calls to the fake (Chat
// Completions' "created", a clock reading, and the id, numbered by
// request) so two bodies can be compared.
func withoutCreated(t *testing.T, raw json.RawMessage) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m))
	delete(m, "created")
	delete(m, "id")
	return m
}

// TestStreamingAssemblesTheNonStreamingResponse: in both wire formats a
// streamed answer (text, tool_use input) assembles into the body, canonical
// content and stop reason the same answer has without streaming, and its
// deltas, joined, are that content.
func TestStreamingAssemblesTheNonStreamingResponse(t *testing.T) {
	replies := map[string]fakeprovider.Reply{
		"text":      fakeprovider.Text("Hello there, streaming <world> ünïcode!").Streamed(7, 0),
		"words":     fakeprovider.Text("one two three four"),
		"tool_use":  fakeprovider.ToolUse("toolu_1", "lookup", map[string]any{"q": "weather in Paris", "n": 3}),
		"text+tool": fakeprovider.Text("Let me check.").WithToolUse("toolu_a", "a", map[string]any{"x": []any{1, 2}}).WithToolUse("toolu_b", "b", nil),
	}
	for _, kind := range []string{provider.KindAnthropic, provider.KindOpenAI} {
		for name, reply := range replies {
			t.Run(kind+"/"+name, func(t *testing.T) {
				fake := fakeprovider.New(t)
				fake.Enqueue(reply, reply)
				ep := provider.Endpoint{Kind: kind, BaseURL: fake.URL(), Model: "m", AuthToken: "k"}
				c := &provider.Client{HTTP: &http.Client{}}
				msgs := json.RawMessage(`[{"role":"user","content":"hi"}]`)
				plain, err := c.Call(context.Background(), ep, msgs, nil)
				require.NoError(t, err)
				var deltas []provider.Delta
				streamed, err := c.CallStreaming(context.Background(), ep, msgs, nil, func(d provider.Delta) { deltas = append(deltas, d) })
				require.NoError(t, err)

				reqs := fake.Requests()
				require.Len(t, reqs, 2)
				assert.False(t, reqs[0].Stream())
				assert.True(t, reqs[1].Stream(), "the streaming call asks for a stream")
				if kind == provider.KindOpenAI {
					assert.Equal(t, map[string]any{"include_usage": true}, reqs[1].Body["stream_options"])
				}
				assert.Equal(t, withoutCreated(t, plain.Raw), withoutCreated(t, streamed.Raw), "the assembled body is the non-streaming body")
				assert.Equal(t, string(plain.Canonical.Content), string(streamed.Canonical.Content))
				assert.Equal(t, plain.Canonical.StopReason, streamed.Canonical.StopReason)
				assert.Equal(t, plain.Status, streamed.Status)

				// The deltas, joined per block, are the canonical content.
				var blocks []map[string]any
				require.NoError(t, json.Unmarshal(plain.Canonical.Content, &blocks))
				joined := map[int]*strings.Builder{}
				starts := map[int]map[string]any{}
				pieces := 0
				for _, d := range deltas {
					switch d.Kind {
					case provider.DeltaBlockStart:
						var b map[string]any
						require.NoError(t, json.Unmarshal(d.Block, &b))
						starts[d.Index] = b
						joined[d.Index] = &strings.Builder{}
					case provider.DeltaText, provider.DeltaInputJSON:
						require.Contains(t, joined, d.Index, "a block starts before its deltas")
						joined[d.Index].WriteString(d.Text)
						pieces++
					}
				}
				require.Len(t, starts, len(blocks))
				for i, b := range blocks {
					assert.Equal(t, b["type"], starts[i]["type"])
					switch b["type"] {
					case "text":
						assert.Equal(t, b["text"], joined[i].String())
					case "tool_use":
						assert.Equal(t, b["id"], starts[i]["id"])
						assert.Equal(t, b["name"], starts[i]["name"])
						in, _ := json.Marshal(b["input"])
						assert.JSONEq(t, string(in), joined[i].String())
					}
				}
				if name == "text" {
					assert.Equal(t, 7, pieces, "Tokens sets the number of text pieces")
				}
			})
		}
	}
}

// TestStreamingFailuresAreRetryable: an answer cut mid-stream, by an error
// event or a dropped connection, is a retryable failure without a status,
// like a transport failure; its partial output is not returned.
func TestStreamingFailuresAreRetryable(t *testing.T) {
	for _, kind := range []string{provider.KindAnthropic, provider.KindOpenAI} {
		for name, reply := range map[string]fakeprovider.Reply{
			"error event": fakeprovider.Text("a b c d e f").CutStream(3, "Overloaded"),
			"dropped":     fakeprovider.Text("a b c d e f").CutStream(3, ""),
		} {
			t.Run(kind+"/"+name, func(t *testing.T) {
				fake := fakeprovider.New(t)
				fake.Enqueue(reply)
				ep := provider.Endpoint{Kind: kind, BaseURL: fake.URL(), Model: "m", AuthToken: "k"}
				c := &provider.Client{HTTP: &http.Client{}}
				n := 0
				resp, err := c.CallStreaming(context.Background(), ep, json.RawMessage(`[{"role":"user","content":"hi"}]`), nil, func(d provider.Delta) {
					if d.Kind == provider.DeltaText {
						n++
					}
				})
				assert.Nil(t, resp)
				ce := callError(t, err)
				assert.True(t, ce.Retryable)
				assert.Nil(t, ce.Status)
				assert.Equal(t, 3, n, "the pieces before the cut were delivered")
				if name == "error event" {
					assert.Contains(t, ce.Detail, "Overloaded")
				}
			})
		}
	}
}

// TestStreamingFallsBackToJSON: a server that ignores stream:true and
// answers with JSON is read as a non-streaming answer.
func TestStreamingFallsBackToJSON(t *testing.T) {
	srv, _ := stub(t, 200, `{"content":[{"type":"text","text":"plain"}],"stop_reason":"end_turn"}`)
	c := &provider.Client{HTTP: &http.Client{}}
	resp, err := c.CallStreaming(context.Background(), provider.Endpoint{Kind: provider.KindAnthropic, BaseURL: srv.URL, Model: "m"}, json.RawMessage(`[]`), nil, nil)
	require.NoError(t, err)
	assert.JSONEq(t, `[{"type":"text","text":"plain"}]`, string(resp.Canonical.Content))
}
