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
