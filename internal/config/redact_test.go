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
   "args": ["••••••••", "••••••••", "••••••••"], "url": null, "headers": {},
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
