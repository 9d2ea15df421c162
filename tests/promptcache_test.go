package tests

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
)

// TestPromptCacheThroughTheServer: a session's requests carry the cache
// markers (anthropic) or the session's prompt_cache_key (openai) by
// default and each reads the previous one's prefix from the fake's cache;
// an entry with prompt_cache = false sends neither; and the provider.request
// events a client sees carry no marker.
func TestPromptCacheThroughTheServer(t *testing.T) {
	for _, kind := range []string{"anthropic", "openai"} {
		t.Run(kind, func(t *testing.T) {
			fake := fakeprovider.New(t)
			fake.Caching(true)
			on, off := fake.Lane("on"), fake.Lane("off")
			e := newEnvOnFake(t, fake, fmt.Sprintf(`
[[providers.entries]]
name = "cached"
provider = %[1]q
base_url = %[2]q
model = "m"
auth_token = "literal-token"

[[providers.entries]]
name = "uncached"
provider = %[1]q
base_url = %[3]q
model = "m"
auth_token = "literal-token"
prompt_cache = false
`, kind, on.URL(), off.URL()))
			// Declarations long enough to be cached (over 1,024 tokens).
			var tools []any
			var names []string
			for i := range 4 {
				name := fmt.Sprintf("tool_%d", i)
				names = append(names, name)
				tools = append(tools, map[string]any{"name": name, "description": strings.Repeat("Does a thing with the workspace. ", 40), "input_schema": map[string]any{"type": "object"}})
			}
			for _, entry := range []string{"cached", "uncached"} {
				pid := e.srv.Profile(t, map[string]any{"name": entry, "primary_provider": entry, "allowed_tools": names})
				d := e.openOn(pid, map[string]any{"tools": tools})
				d.register()
				for i := range 3 {
					_, term := d.send(userText(i))
					require.Nil(t, term["error"], "turn %d", i)
					if entry == "cached" {
						for _, ev := range resultEvents(term) {
							if ev["event_type"] == "provider.request" {
								assert.NotContains(t, fmt.Sprint(ev["payload"]), "cache_control", "clients see the canonical request")
							}
						}
					}
				}
				if entry == "cached" {
					requireSessionKey(t, fake, "on", kind, d.sid)
				}
			}
			var reads int
			for _, r := range fake.Requests() {
				body := string(r.RawBody)
				switch r.Lane {
				case "on":
					if kind == "anthropic" {
						assert.Equal(t, 2, strings.Count(body, `"cache_control":{"type":"ephemeral"}`), "after the tools and on the newest message")
					}
					require.NotNil(t, r.Cache)
					reads += r.Cache.Read
				case "off":
					assert.NotContains(t, body, "cache_control")
					assert.NotContains(t, body, "prompt_cache_key")
				}
			}
			for _, l := range fake.CacheLedger() {
				if l.Lane == "on" {
					assert.False(t, l.Rewrite, "request %d appends to the one before", l.Seq)
				}
			}
			assert.Positive(t, reads, "later requests read the cached prefix")
		})
	}
}

// requireSessionKey checks the openai requests of lane name the session
// as prompt_cache_key, and the anthropic ones send none.
func requireSessionKey(t *testing.T, fake *fakeprovider.Server, lane, kind, sid string) {
	t.Helper()
	for _, r := range fake.Requests() {
		if r.Lane != lane {
			continue
		}
		if kind == "openai" {
			assert.Equal(t, sid, r.Body["prompt_cache_key"])
		} else {
			assert.NotContains(t, r.Body, "prompt_cache_key")
		}
	}
}

// TestPromptCacheWithThinking: with thinking on, every request of a
// three-step tool loop, and the first request of the next turn, reads
// what the request before it cached, against the strict fake (which
// refuses a cycle without its thinking) with the prompt cache emulated by
// the documented rules. Anthropic: adaptive thinking on claude-sonnet-4-6
// (which keeps every prior thinking block, so the next turn reads the
// whole cycle), and a budget on claude-sonnet-4-5 (which strips the
// thinking of ended turns: the next turn reads what preceded the cycle);
// OpenAI: reasoning_effort (no reasoning enters the prompt). No request,
// as sent, rewrites the one before it.
func TestPromptCacheWithThinking(t *testing.T) {
	for _, c := range []struct {
		name, kind, model, settings string
		keeps                       bool
	}{
		{"anthropic/adaptive", "anthropic", "claude-sonnet-4-6", `thinking = { type = "adaptive" }
effort = "medium"`, true},
		{"anthropic/budget", "anthropic", "claude-sonnet-4-5", `thinking = { type = "enabled", budget_tokens = 1024 }`, false},
		{"openai/reasoning", "openai", "gpt-5", `reasoning_effort = "low"`, true},
	} {
		for _, stream := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/stream=%t", c.name, stream), func(t *testing.T) {
				fake := fakeprovider.New(t)
				fake.Strict(true)
				fake.Caching(true)
				lane := fake.Lane("think")
				lane.Respond(thinkingLoop("tool_0"))
				e := newEnvOnFake(t, fake, fmt.Sprintf(`
[[providers.entries]]
name = "thinker"
provider = %q
base_url = %q
model = %q
auth_token = "literal-token"
max_tokens = 2000
stream = %t

[providers.entries.model_settings]
%s
`, c.kind, lane.URL(), c.model, stream, c.settings))
				// Declarations long enough to be cached (over 1,024 tokens).
				var tools []any
				var names []string
				for i := range 4 {
					name := fmt.Sprintf("tool_%d", i)
					names = append(names, name)
					tools = append(tools, map[string]any{"name": name, "description": strings.Repeat("Does a thing with the workspace. ", 40), "input_schema": map[string]any{"type": "object"}})
				}
				pid := e.srv.Profile(t, map[string]any{"name": "thinking", "primary_provider": "thinker", "allowed_tools": names})
				d := e.openOn(pid, map[string]any{"tools": tools})
				d.register()
				for turn := range 3 {
					term := runCycle(t, d, userText(turn), func(step int) string {
						return strings.Repeat(fmt.Sprintf("result %d ", step), 100)
					})
					require.Equal(t, "done after 3 steps", firstText(message(term)), "turn %d", turn)
				}
				require.Zero(t, fake.StrictRefusals(), "every request kept its cycle's thinking")
				ledger := fake.CacheLedger()
				require.Len(t, ledger, 12, "3 turns of 4 requests")
				for i, l := range ledger {
					if i == 0 {
						continue
					}
					prev := ledger[i-1]
					assert.False(t, l.Rewrite, "request %d only appends to the one before", l.Seq)
					assert.Equal(t, l.Prev, l.Shared, "request %d starts with the one before", l.Seq)
					first := i%4 == 0 // a turn's first request
					switch {
					case c.kind == "openai":
						assert.Greater(t, l.Read, l.Prev-128, "request %d reads the previous prompt (in 128-token steps)", l.Seq)
					case !first || c.keeps:
						assert.Equal(t, prev.Read+prev.Write, l.Read, "request %d reads all the previous request cached", l.Seq)
					default:
						// The ended cycle is seen without its thinking: what
						// the turn's first request cached is read.
						start := ledger[i-4]
						assert.Equal(t, start.Read+start.Write, l.Read, "request %d reads up to the previous turn's start", l.Seq)
						assert.Positive(t, l.Ignored, "request %d: the ended turns' thinking is stripped", l.Seq)
					}
					if c.kind == "anthropic" {
						assert.Positive(t, l.Write, "request %d writes what it appended", l.Seq)
					}
				}
			})
		}
	}
}
