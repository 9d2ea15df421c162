package config

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const fullFixture = `
[[mcp.servers]]
name = "search"
transport = "sse"
url = "https://svc:mcp-url-pass@mcp.example.com/sse?api_key=url-query-secret#frag"
headers = { Authorization = "Bearer ${SEARCH_MCP_TOKEN}", X-Literal = "literal-mcp-secret-xyz", X-Empty = "" }

[[mcp.servers]]
name = "filesystem"
transport = "stdio"
command = "npx"
args = ["-y", "@modelcontextprotocol/server-filesystem", "--token=literal-arg-secret"]
env = { FS_TOKEN = "${FS_SECRET}", LITERAL = "literal-env-secret" }

[[providers.entries]]
name = "openai-default"
provider = "openai"
model = "gpt-4o"
auth_token = "literal-auth-token-abc"

[[providers.entries]]
name = "anthropic-sonnet"
provider = "anthropic"
model = "claude-sonnet-4-6"
base_url = "https://gw-user:gw-pass@gateway.example.com/v1?key=base-query-secret"
auth_token = "${ANTHROPIC_API_KEY}"

[telemetry]
enabled = true
otlp_endpoint = "http://otel:otel-pass@otel-collector:4317"
otlp_headers = { Authorization = "literal-otel-secret-123", X-Env = "${OTEL_TOKEN}" }
sample_ratio = 0.25
service_name = "custom-service"

[telemetry.metrics]
disabled = ["bae.events.total"]

[sandbox]
memory_mib = 2048
cap_add = ["net_raw"]
network = "bridge"
`

func marshal(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

func TestConfigViewFullShape(t *testing.T) {
	f, err := Parse([]byte(fullFixture), envMap(map[string]string{"OTEL_TOKEN": "env-otel-secret"}))
	require.NoError(t, err)
	got := marshal(t, f.ConfigView())
	want := `{
 "mcp": {"servers": [
  {"name": "filesystem", "transport": "stdio", "command": "npx",
   "args": ["-y", "@modelcontextprotocol/server-filesystem", "--token=••••••••"], "url": null, "headers": {},
   "env": {"FS_TOKEN": "••••••••", "LITERAL": "••••••••"}},
  {"name": "search", "transport": "sse", "command": null, "args": [], "url": "https://mcp.example.com/sse",
   "headers": {"Authorization": "••••••••", "X-Empty": "••••••••", "X-Literal": "••••••••"}}
 ]},
 "providers": {"entries": [
  {"name": "anthropic-sonnet", "provider": "anthropic", "model": "claude-sonnet-4-6",
   "base_url": "https://gateway.example.com/v1", "auth_token": "••••••••"},
  {"name": "openai-default", "provider": "openai", "model": "gpt-4o",
   "base_url": "https://api.openai.com", "auth_token": "••••••••"}
 ]},
 "telemetry": {"enabled": true, "otlp_endpoint": "http://otel-collector:4317",
  "otlp_headers": {"Authorization": "••••••••", "X-Env": "••••••••"},
  "sample_ratio": 0.25, "service_name": "custom-service",
  "traces": {"enabled": true}, "metrics": {"enabled": true, "disabled": ["bae.events.total"]}},
 "sandbox": {"memory_mib": 2048, "cpus": 1, "pids": 256, "cap_add": ["NET_RAW"], "no_new_privileges": true,
  "user": "", "network": "bridge", "exec_timeout_secs": 120}
}`
	assert.JSONEq(t, want, got)
	for _, secret := range []string{"literal-mcp-secret-xyz", "literal-auth-token-abc", "literal-otel-secret-123",
		"SEARCH_MCP_TOKEN", "ANTHROPIC_API_KEY", "OTEL_TOKEN", "env-otel-secret",
		"mcp-url-pass", "url-query-secret", "frag", "literal-arg-secret", "FS_SECRET", "literal-env-secret",
		"gw-pass", "gw-user", "base-query-secret", "otel-pass"} {
		assert.NotContains(t, got, secret)
	}
	assert.Equal(t, got, marshal(t, f.ConfigView()), "output is deterministic")
	assert.Equal(t, "Bearer ${SEARCH_MCP_TOKEN}", f.MCP.Servers[0].Headers["Authorization"], "redaction must not touch the config")
}

// baeFullFixture is BAE's FULL_FIXTURE_TOML (server/tests/admin_config.rs)
// verbatim; TestConfigViewBAEFullConfigShape holds what its
// full_config_shape scenario asserts.
const baeFullFixture = `
[[mcp.servers]]
name = "filesystem"
transport = "stdio"
command = "npx"
args = ["-y", "@modelcontextprotocol/server-filesystem", "/data"]

[[mcp.servers]]
name = "search"
transport = "sse"
url = "https://mcp.example.com/sse"
headers = { Authorization = "Bearer ${SEARCH_MCP_TOKEN}" }

[[providers.entries]]
name = "anthropic-sonnet"
provider = "anthropic"
model = "claude-sonnet-4-6"
base_url = "https://gateway.example.com"
auth_token = "${ANTHROPIC_API_KEY}"

[[providers.entries]]
name = "openai-default"
provider = "openai"
model = "gpt-4o"
auth_token = "${OPENAI_API_KEY}"

[telemetry]
enabled = true
otlp_endpoint = "http://otel-collector:4317"
otlp_headers = { Authorization = "Bearer ${OTEL_TOKEN}" }
sample_ratio = 0.25
service_name = "custom-service"

[telemetry.metrics]
disabled = ["bae.events.total"]
`

func TestConfigViewBAEFullConfigShape(t *testing.T) {
	f, err := Parse([]byte(baeFullFixture), envMap(map[string]string{"OTEL_TOKEN": "env-otel-secret"}))
	require.NoError(t, err)
	var body map[string]any
	require.NoError(t, json.Unmarshal([]byte(marshal(t, f.ConfigView())), &body))
	servers := body["mcp"].(map[string]any)["servers"].([]any)
	require.Len(t, servers, 2)
	fs, search := servers[0].(map[string]any), servers[1].(map[string]any)
	assert.Equal(t, "filesystem", fs["name"])
	assert.Equal(t, "stdio", fs["transport"])
	assert.Equal(t, "npx", fs["command"])
	assert.Equal(t, []any{"-y", "@modelcontextprotocol/server-filesystem", "/data"}, fs["args"])
	assert.Nil(t, fs["url"])
	assert.Equal(t, map[string]any{}, fs["headers"])
	assert.Equal(t, "search", search["name"])
	assert.Equal(t, "sse", search["transport"])
	assert.Nil(t, search["command"])
	assert.Equal(t, []any{}, search["args"])
	assert.Equal(t, "https://mcp.example.com/sse", search["url"])
	assert.Equal(t, map[string]any{"Authorization": Redacted}, search["headers"])

	entries := body["providers"].(map[string]any)["entries"].([]any)
	require.Len(t, entries, 2)
	assert.Equal(t, map[string]any{"name": "anthropic-sonnet", "provider": "anthropic", "model": "claude-sonnet-4-6",
		"base_url": "https://gateway.example.com", "auth_token": Redacted}, entries[0])
	assert.Equal(t, map[string]any{"name": "openai-default", "provider": "openai", "model": "gpt-4o",
		"base_url": "https://api.openai.com", "auth_token": Redacted}, entries[1])

	tel := body["telemetry"].(map[string]any)
	assert.Equal(t, true, tel["enabled"])
	assert.Equal(t, "http://otel-collector:4317", tel["otlp_endpoint"])
	assert.Equal(t, 0.25, tel["sample_ratio"])
	assert.Equal(t, "custom-service", tel["service_name"])
	assert.Equal(t, map[string]any{"enabled": true}, tel["traces"])
	assert.Equal(t, map[string]any{"enabled": true, "disabled": []any{"bae.events.total"}}, tel["metrics"])
	assert.Equal(t, map[string]any{"Authorization": Redacted}, tel["otlp_headers"])
}

func TestDisplayArgs(t *testing.T) {
	for _, c := range []struct{ in, want []string }{
		{[]string{"-y", "@modelcontextprotocol/server-filesystem", "/data"}, []string{"-y", "@modelcontextprotocol/server-filesystem", "/data"}},
		{[]string{"--root", "${DATA_DIR}", "--token=${GH_TOKEN}", "--api-key", "${API_KEY}"}, []string{"--root", "${DATA_DIR}", "--token=${GH_TOKEN}", "--api-key", "${API_KEY}"}},
		{[]string{"--token", "ghp_literal", "--api-key=sk-literal", "API_TOKEN=abc", "--password", "pw"}, []string{"--token", Redacted, "--api-key=" + Redacted, "API_TOKEN=" + Redacted, "--password", Redacted}},
		{[]string{"--token=prefix-${X}"}, []string{"--token=" + Redacted}},
		{[]string{"--url", "https://u:p@db.example.com:5432/x?sslkey=s#f", "postgres://app:pw@db/app"}, []string{"--url", "https://db.example.com:5432/x", "postgres://db/app"}},
		{[]string{"--header", "Bearer sk-literal", "Bearer ${TOKEN}"}, []string{"--header", "Bearer " + Redacted, "Bearer ${TOKEN}"}},
		{[]string{"--keyfile", "/etc/key.pem", "--path", "/srv", "--verbose"}, []string{"--keyfile", "/etc/key.pem", "--path", "/srv", "--verbose"}},
		{[]string{}, []string{}},
	} {
		assert.Equal(t, c.want, DisplayArgs(c.in), "%q", c.in)
	}
}

func TestConfigViewEmpty(t *testing.T) {
	f, err := LoadFile("")
	require.NoError(t, err)
	got := marshal(t, f.ConfigView())
	assert.JSONEq(t, `{
 "mcp": {"servers": []},
 "providers": {"entries": []},
 "telemetry": {"enabled": false, "otlp_endpoint": null, "otlp_headers": {}, "sample_ratio": 1,
  "service_name": "baesrv", "traces": {"enabled": true}, "metrics": {"enabled": true, "disabled": []}},
 "sandbox": {"memory_mib": 512, "cpus": 1, "pids": 256, "cap_add": [], "no_new_privileges": true,
  "user": "", "network": "none", "exec_timeout_secs": 120}
}`, got)
	assert.NotContains(t, got, Redacted)
}

func TestListViews(t *testing.T) {
	f, err := Parse([]byte(fullFixture), envMap(map[string]string{"OTEL_TOKEN": "x"}))
	require.NoError(t, err)
	assert.JSONEq(t, `[{"name":"filesystem","transport":"stdio"},{"name":"search","transport":"sse"}]`,
		marshal(t, f.MCPServersView()))
	got := marshal(t, f.ProvidersView())
	assert.JSONEq(t, `[
 {"name":"anthropic-sonnet","provider":"anthropic","model":"claude-sonnet-4-6","base_url":"https://gateway.example.com/v1"},
 {"name":"openai-default","provider":"openai","model":"gpt-4o","base_url":"https://api.openai.com"}]`, got)
	assert.NotContains(t, got, "auth_token")

	empty, err := Parse(nil, noEnv)
	require.NoError(t, err)
	assert.Equal(t, "[]", marshal(t, empty.MCPServersView()))
	assert.Equal(t, "[]", marshal(t, empty.ProvidersView()))
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"":                                 "",
		"https://api.openai.com":           "https://api.openai.com",
		"https://u:p@gw.internal:8443/v1":  "https://gw.internal:8443/v1",
		"https://u@gw/v1?api_key=s&x=1#f":  "https://gw/v1",
		"http://gw/v1?":                    "http://gw/v1",
		"http://[::1]:4317/p?token=secret": "http://[::1]:4317/p",
		"http://gw/%zz":                    Redacted, // does not parse: masked whole
	} {
		assert.Equal(t, want, RedactURL(in), in)
	}
}

// TestViewsShowModelSettingsMasked: the config and provider views show an
// entry's model settings, every header value but the beta lists masked;
// an entry without them shows none.
func TestViewsShowModelSettingsMasked(t *testing.T) {
	f, err := Parse([]byte(`
[[providers.entries]]
name = "a"
provider = "anthropic"
model = "claude-sonnet-4-6"
auth_token = "t"
model_settings = { effort = "low", headers = { anthropic-beta = "b1", x-gateway-key = "secret-value" } }

[[providers.entries]]
name = "b"
provider = "openai"
model = "gpt-4o"
auth_token = "t"
`), func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	view := f.ConfigView()
	s := view.Providers.Entries[0].ModelSettings
	require.NotNil(t, s)
	assert.Equal(t, "low", s.Effort)
	assert.Equal(t, map[string]string{"anthropic-beta": "b1", "x-gateway-key": Redacted}, s.Headers)
	assert.Nil(t, view.Providers.Entries[1].ModelSettings)
	assert.Equal(t, "secret-value", f.Providers.Entries[0].Settings.Headers["x-gateway-key"], "the entry itself keeps the value")
	assert.Equal(t, s, f.ProvidersView()[0].ModelSettings)
}
