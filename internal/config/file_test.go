package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/compaction"
	"github.com/bae-go/bae-go/internal/provider"
	"github.com/bae-go/bae-go/internal/sandbox"
)

func noEnv(string) (string, bool) { return "", false }

func envMap(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func requireValidation(t *testing.T, err error, contains string) {
	t.Helper()
	require.Error(t, err)
	var ve *ValidationError
	require.ErrorAs(t, err, &ve)
	assert.Contains(t, err.Error(), contains)
}

func TestLoadFileNoPathIsEmpty(t *testing.T) {
	f, err := LoadFile("")
	require.NoError(t, err)
	assert.Empty(t, f.MCP.Servers)
	assert.Empty(t, f.Providers.Entries)
	assert.Equal(t, DefaultTelemetry(), f.Telemetry)
}

func TestLoadFileMissingNamedFileIsError(t *testing.T) {
	p := filepath.Join(t.TempDir(), "nope.toml")
	_, err := LoadFile(p)
	requireValidation(t, err, "config file \""+p+"\" does not exist")
}

func TestLoadFileUnreadableIsError(t *testing.T) {
	// A directory exists but cannot be read as a file; works even as root,
	// where chmod 000 would not stop the read.
	_, err := LoadFile(t.TempDir())
	requireValidation(t, err, "cannot read config file")

	if os.Geteuid() != 0 {
		p := filepath.Join(t.TempDir(), "c.toml")
		require.NoError(t, os.WriteFile(p, []byte(""), 0o000))
		_, err = LoadFile(p)
		requireValidation(t, err, "cannot read config file")
	}
}

func TestLoadFileParsesExample(t *testing.T) {
	p := filepath.Join(t.TempDir(), "bae-config.toml")
	require.NoError(t, os.WriteFile(p, []byte(`
something_new = 1
[logging]
level = "debug"

[[mcp.servers]]
name = "search"
transport = "sse"
url = "https://mcp.example.com/sse"
headers = { Authorization = "Bearer ${SEARCH_MCP_TOKEN}" }

[[mcp.servers]]
name = "filesystem"
transport = "stdio"
command = "npx"
args = ["-y", "@modelcontextprotocol/server-filesystem", "/data"]

[[mcp.servers]]
name = "remote"
transport = "http"
url = "http://127.0.0.1:9/mcp"

[[providers.entries]]
name = "anthropic-sonnet"
provider = "anthropic"
model = "claude-sonnet-4-6"
auth_token = "${ANTHROPIC_API_KEY}"
max_tokens = 8096

[[providers.entries]]
name = "gw"
provider = "openai"
base_url = "https://llm-gateway.internal.example.com"
model = "gpt-5"
auth_token = "${GW}"
`), 0o600))
	f, err := LoadFile(p)
	require.NoError(t, err)

	fs, ok := f.MCPServer("filesystem")
	require.True(t, ok)
	assert.Equal(t, MCPServer{Name: "filesystem", Transport: "stdio", Command: "npx",
		Args: []string{"-y", "@modelcontextprotocol/server-filesystem", "/data"}, Headers: map[string]string{}, Env: map[string]string{}}, fs)
	search, ok := f.MCPServer("search")
	require.True(t, ok)
	assert.Equal(t, "Bearer ${SEARCH_MCP_TOKEN}", search.Headers["Authorization"], "tokens stay raw")
	_, ok = f.MCPServer("missing")
	assert.False(t, ok)

	a, ok := f.Provider("anthropic-sonnet")
	require.True(t, ok)
	assert.Equal(t, ProviderEntry{Name: "anthropic-sonnet", Kind: "anthropic", Model: "claude-sonnet-4-6",
		AuthToken: "${ANTHROPIC_API_KEY}", MaxTokens: 8096, ContextWindow: 200_000}, a, "a claude model's window by default")
	assert.Equal(t, "https://api.anthropic.com", a.EffectiveBaseURL())
	gw, ok := f.Provider("gw")
	require.True(t, ok)
	assert.Equal(t, provider.DefaultMaxTokens, gw.MaxTokens)
	assert.Equal(t, "https://llm-gateway.internal.example.com", gw.EffectiveBaseURL())
	_, ok = f.Provider("missing")
	assert.False(t, ok)

	var names []string
	for _, s := range f.SortedMCPServers() {
		names = append(names, s.Name)
	}
	assert.Equal(t, []string{"filesystem", "remote", "search"}, names)
	names = nil
	for _, p := range f.SortedProviders() {
		names = append(names, p.Name)
	}
	assert.Equal(t, []string{"anthropic-sonnet", "gw"}, names)
	assert.Equal(t, "search", f.MCP.Servers[0].Name, "sorting must not reorder the file")
	assert.False(t, f.Telemetry.Enabled)
}

func TestEffectiveBaseURLDefaults(t *testing.T) {
	assert.Equal(t, "https://api.anthropic.com", ProviderEntry{Kind: provider.KindAnthropic}.EffectiveBaseURL())
	assert.Equal(t, "https://api.openai.com", ProviderEntry{Kind: provider.KindOpenAI}.EffectiveBaseURL())
	assert.Equal(t, "http://x", ProviderEntry{Kind: provider.KindOpenAI, BaseURL: "http://x"}.EffectiveBaseURL())
}

func TestParseEmptyAndSectionOnly(t *testing.T) {
	for _, src := range []string{"", "[mcp]\n", "[providers]\n", "[mcp]\n[providers]\n[telemetry]\n"} {
		f, err := Parse([]byte(src), noEnv)
		require.NoError(t, err, src)
		assert.Empty(t, f.MCP.Servers)
		assert.Empty(t, f.Providers.Entries)
		assert.Equal(t, DefaultTelemetry(), f.Telemetry)
	}
}

func TestNamesMayCollideAcrossSections(t *testing.T) {
	f, err := Parse([]byte(`
[[mcp.servers]]
name = "shared"
transport = "stdio"
command = "npx"
[[providers.entries]]
name = "shared"
provider = "anthropic"
model = "m"
auth_token = "t"
`), noEnv)
	require.NoError(t, err)
	_, ok := f.MCPServer("shared")
	assert.True(t, ok)
	_, ok = f.Provider("shared")
	assert.True(t, ok)
}

func TestParseValidationErrors(t *testing.T) {
	const prov = "\nprovider = \"anthropic\"\nmodel = \"m\"\nauth_token = \"t\"\n"
	cases := map[string]struct{ src, want string }{
		"malformed":           {"this is not = = toml", "invalid TOML"},
		"duplicate key":       {"[mcp]\nservers = []\nservers = []\n", "invalid TOML"},
		"wrong type":          {"[[mcp.servers]]\nname = 1\n", "invalid TOML"},
		"mcp duplicate":       {"[[mcp.servers]]\nname = \"dup\"\ntransport = \"stdio\"\ncommand = \"a\"\n[[mcp.servers]]\nname = \"dup\"\ntransport = \"stdio\"\ncommand = \"b\"\n", `duplicate MCP server name "dup"`},
		"mcp blank name":      {"[[mcp.servers]]\nname = \"  \"\ntransport = \"stdio\"\ncommand = \"a\"\n", "empty name"},
		"mcp missing name":    {"[[mcp.servers]]\ntransport = \"stdio\"\ncommand = \"a\"\n", "empty name"},
		"stdio no command":    {"[[mcp.servers]]\nname = \"x\"\ntransport = \"stdio\"\n", `missing required field "command"`},
		"stdio blank command": {"[[mcp.servers]]\nname = \"x\"\ntransport = \"stdio\"\ncommand = \" \"\n", `missing required field "command"`},
		"sse no url":          {"[[mcp.servers]]\nname = \"x\"\ntransport = \"sse\"\n", `missing required field "url"`},
		"http no url":         {"[[mcp.servers]]\nname = \"x\"\ntransport = \"http\"\n", `missing required field "url"`},
		"bad transport":       {"[[mcp.servers]]\nname = \"x\"\ntransport = \"carrier-pigeon\"\n", `unsupported transport "carrier-pigeon"`},
		"missing transport":   {"[[mcp.servers]]\nname = \"x\"\ncommand = \"a\"\n", `missing required field "transport"`},
		"mcp unknown field":   {"[[mcp.servers]]\nname = \"x\"\ntransport = \"stdio\"\ncommand = \"a\"\ncwd = \"/tmp\"\n", "unknown field"},
		"mcp env not stdio":   {"[[mcp.servers]]\nname = \"x\"\ntransport = \"http\"\nurl = \"http://h\"\nenv = {A = \"b\"}\n", `sets "env", which only a stdio server has`},
		"mcp env bad name":    {"[[mcp.servers]]\nname = \"x\"\ntransport = \"stdio\"\ncommand = \"a\"\nenv = {\"A=B\" = \"b\"}\n", "invalid env name"},
		"providers unknown":   {"[providers]\nfoo = 1\n", "unknown field"},
		"provider duplicate":  {"[[providers.entries]]\nname = \"dup\"" + prov + "[[providers.entries]]\nname = \"dup\"" + prov, `duplicate provider name "dup"`},
		"provider blank name": {"[[providers.entries]]\nname = \" \"" + prov, "empty name"},
		"provider bad kind":   {"[[providers.entries]]\nname = \"x\"\nprovider = \"cohere\"\nmodel = \"m\"\nauth_token = \"t\"\n", `unsupported provider kind "cohere"`},
		"provider no kind":    {"[[providers.entries]]\nname = \"x\"\nmodel = \"m\"\nauth_token = \"t\"\n", "unsupported provider kind"},
		"provider no model":   {"[[providers.entries]]\nname = \"x\"\nprovider = \"openai\"\nauth_token = \"t\"\n", `missing required field "model"`},
		"provider no token":   {"[[providers.entries]]\nname = \"x\"\nprovider = \"openai\"\nmodel = \"m\"\n", `missing required field "auth_token"`},
		"provider neg tokens": {"[[providers.entries]]\nname = \"x\"" + prov + "max_tokens = -1\n", "max_tokens"},
		"window too small":    {"[[providers.entries]]\nname = \"x\"" + prov + "context_window = 100\n", "out-of-range context_window 100"},
		"window below output": {"[[providers.entries]]\nname = \"x\"" + prov + "context_window = 4000\nmax_tokens = 4000\n", "context_window 4000 not larger than max_tokens 4000"},
		"prompt_cache type":   {"[[providers.entries]]\nname = \"x\"" + prov + "prompt_cache = \"no\"\n", "invalid TOML"},
		"telemetry unknown":   {"[telemetry]\nenabled = false\nbogus = 1\n", "unknown field"},
		"traces unknown":      {"[telemetry.traces]\nenabld = true\n", "unknown field"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(tc.src), noEnv)
			requireValidation(t, err, tc.want)
		})
	}
}

func TestProviderContextWindow(t *testing.T) {
	f, err := Parse([]byte(`
[[providers.entries]]
name = "small"
provider = "openai"
model = "local-model"
auth_token = "t"
context_window = 10000
max_tokens = 1000

[[providers.entries]]
name = "unknown"
provider = "openai"
model = "local-model"
auth_token = "t"
`), noEnv)
	require.NoError(t, err)
	small, _ := f.Provider("small")
	assert.Equal(t, 10000, small.ContextWindow)
	assert.Equal(t, 9000, small.Budget(), "the window minus the output reserve")
	unknown, _ := f.Provider("unknown")
	assert.Equal(t, compaction.DefaultContextWindow, unknown.ContextWindow, "an unknown family gets the conservative default")
}

func TestProviderPromptCache(t *testing.T) {
	f, err := Parse([]byte(`
[[providers.entries]]
name = "default"
provider = "anthropic"
model = "m"
auth_token = "t"

[[providers.entries]]
name = "gateway"
provider = "anthropic"
model = "m"
auth_token = "t"
prompt_cache = false
`), noEnv)
	require.NoError(t, err)
	def, _ := f.Provider("default")
	assert.False(t, def.NoPromptCache, "prompt caching is on unless an entry turns it off")
	gw, _ := f.Provider("gateway")
	assert.True(t, gw.NoPromptCache)
}

func TestLoadFileMalformedIsValidationError(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.toml")
	require.NoError(t, os.WriteFile(p, []byte("this is not = = toml"), 0o600))
	_, err := LoadFile(p)
	requireValidation(t, err, p)
}

func TestProviderEntriesTolerateExtraKeys(t *testing.T) {
	_, err := Parse([]byte("[[providers.entries]]\nname = \"x\"\nprovider = \"openai\"\nmodel = \"m\"\nauth_token = \"t\"\nfuture = 1\n"), noEnv)
	require.NoError(t, err)
}

const telemetryBase = "[telemetry]\nenabled = true\notlp_endpoint = \"http://otel-collector:4317\"\n"

func TestTelemetryParsesAllFields(t *testing.T) {
	f, err := Parse([]byte(`
[telemetry]
enabled = true
otlp_endpoint = "https://otel.example.test:4317"
otlp_headers = { Authorization = "Bearer ${OTEL_TOKEN}" }
sample_ratio = 0.25
service_name = "baesrv-prod-1"
[telemetry.traces]
enabled = false
[telemetry.metrics]
enabled = true
disabled = ["bae.events.total", "bae.tool.latency"]
`), envMap(map[string]string{"OTEL_TOKEN": "s3cr3t"}))
	require.NoError(t, err)
	assert.Equal(t, Telemetry{
		Enabled:      true,
		OTLPEndpoint: "https://otel.example.test:4317",
		OTLPHeaders:  map[string]string{"Authorization": "Bearer ${OTEL_TOKEN}"},
		SampleRatio:  0.25,
		ServiceName:  "baesrv-prod-1",
		Traces:       TracesSettings{Enabled: false},
		Metrics:      MetricsSettings{Enabled: true, Disabled: []string{"bae.events.total", "bae.tool.latency"}},
	}, f.Telemetry)
	assert.Equal(t, "baesrv-prod-1", f.Telemetry.EffectiveServiceName())

	resolved, err := f.Telemetry.ResolveOTLPHeaders(envMap(map[string]string{"OTEL_TOKEN": "s3cr3t"}))
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"Authorization": "Bearer s3cr3t"}, resolved)
}

func TestTelemetryDefaultsWhenEnabled(t *testing.T) {
	f, err := Parse([]byte(telemetryBase+"sample_ratio = 1\n"), noEnv)
	require.NoError(t, err)
	assert.Equal(t, 1.0, f.Telemetry.SampleRatio, "integer literal accepted")
	assert.True(t, f.Telemetry.Traces.Enabled)
	assert.True(t, f.Telemetry.Metrics.Enabled)
	assert.Equal(t, DefaultServiceName, f.Telemetry.EffectiveServiceName())
}

func TestTelemetryValidationWhenEnabled(t *testing.T) {
	cases := map[string]struct{ src, want string }{
		"no endpoint":        {"[telemetry]\nenabled = true\n", "requires a non-empty otlp_endpoint"},
		"empty endpoint":     {"[telemetry]\nenabled = true\notlp_endpoint = \"\"\n", "requires a non-empty otlp_endpoint"},
		"not a url":          {"[telemetry]\nenabled = true\notlp_endpoint = \"not a URL\"\n", "must be a valid http"},
		"ftp":                {"[telemetry]\nenabled = true\notlp_endpoint = \"ftp://otel:4317\"\n", "must be a valid http"},
		"no host":            {"[telemetry]\nenabled = true\notlp_endpoint = \"http://\"\n", "must be a valid http"},
		"ratio low":          {telemetryBase + "sample_ratio = -0.01\n", "sample_ratio"},
		"ratio high":         {telemetryBase + "sample_ratio = 1.01\n", "sample_ratio"},
		"ratio nan":          {telemetryBase + "sample_ratio = nan\n", "sample_ratio"},
		"unknown metric":     {telemetryBase + "[telemetry.metrics]\ndisabled = [\"bae.typo\"]\n", `unknown metric "bae.typo"`},
		"unset header env":   {telemetryBase + "otlp_headers = { Authorization = \"Bearer ${OTEL_TOKEN}\" }\n", `"OTEL_TOKEN" is not set`},
		"unterminated":       {telemetryBase + "otlp_headers = { Authorization = \"Bearer ${OTEL\" }\n", "unterminated"},
		"bad header name":    {telemetryBase + "otlp_headers = { \"Bad Name\" = \"v\" }\n", `invalid header name "Bad Name"`},
		"empty header name":  {telemetryBase + "otlp_headers = { \"\" = \"v\" }\n", "invalid header name"},
		"bad header value":   {telemetryBase + "otlp_headers = { X = \"a\\nb\" }\n", `header "X" has an invalid value`},
		"bad resolved value": {telemetryBase + "otlp_headers = { X = \"${NL}\" }\n", `header "X" has an invalid value`},
	}
	env := envMap(map[string]string{"NL": "line\r\nInjected: 1"})
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(tc.src), env)
			requireValidation(t, err, tc.want)
			assert.NotContains(t, err.Error(), "Injected", "values never appear in errors")
		})
	}
}

func TestTelemetryParkedConfigIsNotValidated(t *testing.T) {
	f, err := Parse([]byte(`
[telemetry]
enabled = false
otlp_endpoint = "not a URL"
otlp_headers = { Authorization = "${UNSET}" }
sample_ratio = 2.0
[telemetry.metrics]
disabled = ["bae.typo"]
`), noEnv)
	require.NoError(t, err)
	assert.False(t, f.Telemetry.Enabled)
	assert.Equal(t, "not a URL", f.Telemetry.OTLPEndpoint)
	assert.Equal(t, 2.0, f.Telemetry.SampleRatio)
}

func TestMetricNamesIsClosedSetCopy(t *testing.T) {
	names := MetricNames()
	assert.Len(t, names, 20)
	assert.Contains(t, names, "bae.events.total")
	names[0] = "mutated"
	assert.Equal(t, "bae.sessions.open", MetricNames()[0], "callers cannot mutate the set")
}

func TestNilFileHelpers(t *testing.T) {
	var f *File
	_, ok := f.Provider("x")
	assert.False(t, ok)
	_, ok = f.MCPServer("x")
	assert.False(t, ok)
	assert.Equal(t, []MCPServer{}, f.SortedMCPServers())
	assert.Equal(t, []ProviderEntry{}, f.SortedProviders())
	assert.Equal(t, DefaultTelemetry(), f.TelemetryConfig())
}

func TestSandboxSection(t *testing.T) {
	f, err := Parse([]byte(`
[sandbox]
memory_mib = 1024
cpus = 2.5
pids = 512
cap_add = ["chown", "CAP_SETUID"]
no_new_privileges = false
user = "1000:1000"
network = "bridge"
exec_timeout_secs = 30
`), noEnv)
	require.NoError(t, err)
	assert.Equal(t, sandbox.Policy{
		MemoryMiB: 1024, CPUs: 2.5, Pids: 512, CapAdd: []string{"CHOWN", "SETUID"}, AllowNewPrivileges: true,
		User: "1000:1000", Network: "bridge", ExecTimeout: 30 * time.Second,
	}, f.Sandbox)

	// A profile's settings apply on top; what neither sets is the default.
	f, err = Parse([]byte("[sandbox]\nmemory_mib = 256\nnetwork = \"bridge\"\n"), noEnv)
	require.NoError(t, err)
	none := "none"
	assert.Equal(t, sandbox.Policy{MemoryMiB: 256, CPUs: 1, Pids: 256, Network: "none", ExecTimeout: 120 * time.Second},
		f.SandboxPolicy(sandbox.Settings{Network: &none}))

	for _, src := range []string{"", "[mcp]\n"} {
		f, err := Parse([]byte(src), noEnv)
		require.NoError(t, err)
		assert.Equal(t, sandbox.Policy{}.Resolved(), f.Sandbox, "no [sandbox] means the defaults")
	}
	empty, err := LoadFile("")
	require.NoError(t, err)
	assert.Equal(t, sandbox.Policy{}.Resolved(), empty.Sandbox)
	assert.Equal(t, sandbox.Policy{}.Resolved(), (*File)(nil).SandboxPolicy(sandbox.Settings{}))
}

func TestSandboxSectionValidation(t *testing.T) {
	cases := map[string]struct{ src, want string }{
		"unknown key":    {"[sandbox]\nmemory = \"1g\"\n", "unknown field \"sandbox.memory\""},
		"wrong type":     {"[sandbox]\npids = \"many\"\n", "invalid TOML"},
		"tiny memory":    {"[sandbox]\nmemory_mib = 1\n", "[sandbox] memory_mib must be between"},
		"zero cpus":      {"[sandbox]\ncpus = 0.0\n", "[sandbox] cpus must be between"},
		"few pids":       {"[sandbox]\npids = 4\n", "[sandbox] pids must be between"},
		"cap all":        {"[sandbox]\ncap_add = [\"ALL\"]\n", "[sandbox] cap_add"},
		"unknown cap":    {"[sandbox]\ncap_add = [\"FLY\"]\n", "not a Linux capability"},
		"host network":   {"[sandbox]\nnetwork = \"host\"\n", "[sandbox] network must not be \"host\""},
		"long timeout":   {"[sandbox]\nexec_timeout_secs = 3600\n", "[sandbox] exec_timeout_secs must be between 1 and 240"},
		"zero timeout":   {"[sandbox]\nexec_timeout_secs = 0\n", "[sandbox] exec_timeout_secs"},
		"shell in user":  {"[sandbox]\nuser = \"$(id)\"\n", "[sandbox] user"},
		"negative pids":  {"[sandbox]\npids = -1\n", "[sandbox] pids"},
		"network syntax": {"[sandbox]\nnetwork = \"container:x\"\n", "[sandbox] network"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(tc.src), noEnv)
			requireValidation(t, err, tc.want)
		})
	}
}

// TestProviderModelSettings: model_settings reach the entry; unknown keys
// in it, a setting written beside the entry's keys, and a setting the
// model family refuses stop the load with a message naming the entry and
// the field.
func TestProviderModelSettings(t *testing.T) {
	entry := "[[providers.entries]]\nname = \"x\"\nprovider = \"anthropic\"\nmodel = \"claude-sonnet-4-5\"\nauth_token = \"t\"\nmax_tokens = 16000\n"
	f, err := Parse([]byte(entry+`[providers.entries.model_settings]
thinking = { type = "enabled", budget_tokens = 4096, display = "summarized" }
temperature = 1
stop = ["END"]
headers = { anthropic-beta = "interleaved-thinking-2025-05-14" }
`), noEnv)
	require.NoError(t, err)
	s := f.Providers.Entries[0].Settings
	require.NotNil(t, s.Thinking)
	assert.Equal(t, int64(4096), s.Thinking.BudgetTokens)
	assert.Equal(t, 1.0, *s.Temperature)
	assert.Equal(t, []string{"END"}, s.Stop)

	for src, want := range map[string]string{
		entry + "[providers.entries.model_settings]\ntemprature = 0.5\n":                              `unknown model setting "temprature"`,
		entry + "[providers.entries.model_settings]\nthinking = { type = \"adaptive\", budgt = 1 }\n": `unknown model setting "thinking.budgt"`,
		entry + "temperature = 0.5\n": `"temperature" is a model setting`,
		entry + "[providers.entries.model_settings]\nthinking = { type = \"adaptive\" }\n":                     `provider "x" has an invalid model_settings.thinking.type`,
		entry + "[providers.entries.model_settings]\nthinking = { type = \"enabled\", budget_tokens = 512 }\n": `model_settings.thinking.budget_tokens: must be at least 1024`,
		entry + "[providers.entries.model_settings]\nreasoning_effort = \"high\"\n":                            `model_settings.reasoning_effort: is an openai setting`,
	} {
		_, err := Parse([]byte(src), noEnv)
		var ve *ValidationError
		require.ErrorAs(t, err, &ve, src)
		assert.Contains(t, err.Error(), want)
	}
}

// TestModelSettingsHeaderTokens: ${VAR} tokens in model_settings headers
// must resolve at load (an unset variable or an unterminated token stops
// it, naming the entry, the header and the variable but no value); the
// entry keeps the tokens, and ResolveHeaders resolves them for a call
// (refusing a value that resolves to a control character).
func TestModelSettingsHeaderTokens(t *testing.T) {
	src := "[[providers.entries]]\nname = \"x\"\nprovider = \"anthropic\"\nmodel = \"claude-sonnet-4-5\"\nauth_token = \"t\"\n" +
		"[providers.entries.model_settings]\nheaders = { anthropic-beta = \"interleaved-thinking-2025-05-14\", x-gateway-key = \"Bearer ${GW_KEY}\" }\n"
	env := envMap(map[string]string{"GW_KEY": "gw-secret-123", "BAD": "a\r\nb"})
	f, err := Parse([]byte(src), env)
	require.NoError(t, err)
	s := f.Providers.Entries[0].Settings
	assert.Equal(t, "Bearer ${GW_KEY}", s.Headers["x-gateway-key"], "the entry keeps the token")
	r, err := ResolveHeaders(s, env)
	require.NoError(t, err)
	assert.Equal(t, "Bearer gw-secret-123", r.Headers["x-gateway-key"])
	assert.Equal(t, "interleaved-thinking-2025-05-14", r.Headers["anthropic-beta"])
	assert.Equal(t, "Bearer ${GW_KEY}", s.Headers["x-gateway-key"], "resolving does not touch the entry's map")

	_, err = Parse([]byte(src), noEnv)
	requireValidation(t, err, `provider "x" has an invalid model_settings.headers: header "x-gateway-key": environment variable "GW_KEY" is not set`)
	_, err = Parse([]byte(strings.Replace(src, "${GW_KEY}", "${GW_KEY", 1)), env)
	requireValidation(t, err, `header "x-gateway-key": unterminated ${`)
	_, err = ResolveHeaders(provider.Settings{Headers: map[string]string{"x-k": "${BAD}"}}, env)
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "a\r\nb")
	assert.Contains(t, err.Error(), "control character")
}
