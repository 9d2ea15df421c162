package config

import (
	"bytes"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/provider"
)

// fuzzSecret is what ${TOKEN} resolves to; it must never reach an error.
const fuzzSecret = "s3cr3t-fuzz-value"

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		``,
		`something_new = 1`,
		"[mcp]\n[providers]\n[telemetry]\n",
		"[[providers.entries]]\nname = \"a\"\nprovider = \"anthropic\"\nmodel = \"m\"\nauth_token = \"${TOKEN}\"\nmax_tokens = 8096\n",
		"[[providers.entries]]\nname = \"a\"\nprovider = \"openai\"\nmodel = \"m\"\nauth_token = \"t\"\nfuture = 1\n[[providers.entries]]\nname = \"a\"\nprovider = \"openai\"\nmodel = \"m\"\nauth_token = \"t\"\n",
		"[[providers.entries]]\nname = \" \"\nprovider = \"openai\"\nmodel = \"m\"\nauth_token = \"t\"\n",
		"[[providers.entries]]\nname = \"a\"\nprovider = \"openai\"\nmodel = \"m\"\nauth_token = \"t\"\nmax_tokens = -1\n",
		"[[providers.entries]]\nname = \"a\"\nprovider = \"openai\"\nmodel = \"m\"\nauth_token = \"t\"\nmax_tokens = 4294967296\n",
		"[[providers.entries]]\nname = \"a\"\nprovider = \"x\"\n",
		"[[providers.entries]]\nname = \"a\"\nprovider = \"openai\"\nmodel = 5\n",
		"[providers]\nentries = 3\n",
		"[[mcp.servers]]\nname = \"s\"\ntransport = \"stdio\"\ncommand = \"npx\"\nargs = [\"-y\"]\n[[mcp.servers]]\nname = \"h\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:9/mcp\"\nheaders = { Authorization = \"Bearer ${TOKEN}\" }\n",
		"[[mcp.servers]]\nname = \"s\"\ntransport = \"sse\"\nurl = \"https://x/sse\"\n[[mcp.servers]]\nname = \"s\"\ntransport = \"sse\"\nurl = \"https://y/sse\"\n",
		"[[mcp.servers]]\nname = \"\\t\"\ntransport = \"stdio\"\ncommand = \"c\"\n",
		"[[mcp.servers]]\nname = \"s\"\ntransport = \"stdio\"\ncommand = \"  \"\n",
		"[[mcp.servers]]\nname = \"s\"\ntransport = \"ws\"\n",
		"[[mcp.servers]]\nname = \"s\"\ntransport = \"stdio\"\ncommand = \"c\"\ntypo = 1\n",
		"[mcp]\nservers = [{ name = \"i\", transport = \"stdio\", command = \"c\" }]\n",
		"[telemetry]\nenabled = true\notlp_endpoint = \"https://otel:4317\"\notlp_headers = { Authorization = \"Bearer ${TOKEN}\" }\nsample_ratio = 0.25\n[telemetry.traces]\nenabled = false\n[telemetry.metrics]\ndisabled = [\"bae.events.total\"]\n",
		"[telemetry]\nenabled = true\notlp_endpoint = \"http://otel:4317\"\notlp_headers = { X = \"${NL}\" }\n",
		"[telemetry]\nenabled = true\notlp_endpoint = \"http://otel:4317\"\notlp_headers = { X = \"${UNSET\" }\n",
		"[telemetry]\nenabled = true\notlp_endpoint = \"http://otel:4317\"\nsample_ratio = nan\n",
		"[telemetry]\nenabled = true\notlp_endpoint = \"http://otel:4317\"\nsample_ratio = inf\n",
		"[telemetry]\nenabled = false\notlp_endpoint = \"not a URL\"\nsample_ratio = 2.0\n",
		"[telemetry]\nenabled = \"yes\"\n",
		"a = \"\"\"\nmulti\n\"\"\"\nb = '''lit'''\nc = 1979-05-27T07:32:00Z\nd = 0x_1\n",
		"[[a]]\n[a]\n",
		"[a.b]\n[a]\nb = 1\n",
		"x = [1, \"mixed\"]\ny = {a = {b = {c = [[]]}}}\n",
		"\"\\u0000\" = 1\n",
		"= 1\n",
		"[",
		"\xff\xfe",
	} {
		f.Add([]byte(s))
	}
	lookup := func(name string) (string, bool) {
		switch name {
		case "TOKEN":
			return fuzzSecret, true
		case "NL":
			return "line\r\nInjected: 1", true
		}
		return "", false
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(data, lookup)
		if err != nil {
			assert.Nil(t, file)
			_, isValidation := err.(*ValidationError)
			assert.True(t, isValidation, "error %T is not a *ValidationError: %v", err, err)
			assert.NotEmpty(t, err.Error())
			if !bytes.Contains(data, []byte(fuzzSecret)) {
				assert.NotContains(t, err.Error(), fuzzSecret, "a resolved value leaked into an error")
			}
			return
		}
		require.NotNil(t, file)

		seen := map[string]bool{}
		for _, p := range file.Providers.Entries {
			assert.NotEmpty(t, strings.TrimSpace(p.Name), "blank provider name")
			assert.False(t, seen[p.Name], "duplicate provider %q", p.Name)
			seen[p.Name] = true
			assert.Contains(t, []string{provider.KindAnthropic, provider.KindOpenAI}, p.Kind)
			assert.GreaterOrEqual(t, p.MaxTokens, 0)
			assert.LessOrEqual(t, int64(p.MaxTokens), int64(1<<32-1))
			got, ok := file.Provider(p.Name)
			assert.True(t, ok)
			assert.Equal(t, p, got)
		}
		seen = map[string]bool{}
		for _, s := range file.MCP.Servers {
			assert.NotEmpty(t, strings.TrimSpace(s.Name), "blank MCP server name")
			assert.False(t, seen[s.Name], "duplicate MCP server %q", s.Name)
			seen[s.Name] = true
			switch s.Transport {
			case TransportStdio:
				assert.NotEmpty(t, strings.TrimSpace(s.Command))
			case TransportSSE, TransportHTTP:
				assert.NotEmpty(t, strings.TrimSpace(s.URL))
			default:
				t.Errorf("MCP server %q has transport %q", s.Name, s.Transport)
			}
			assert.NotNil(t, s.Args)
			assert.NotNil(t, s.Headers)
		}

		tel := file.Telemetry
		if tel.Enabled {
			u, err := url.Parse(tel.OTLPEndpoint)
			require.NoError(t, err)
			assert.Contains(t, []string{"http", "https"}, u.Scheme)
			assert.NotEmpty(t, u.Host)
			assert.True(t, tel.SampleRatio >= 0 && tel.SampleRatio <= 1, "sample_ratio %v", tel.SampleRatio)
			for _, m := range tel.Metrics.Disabled {
				assert.True(t, slices.Contains(MetricNames(), m), "unknown metric %q", m)
			}
			_, err = tel.ResolveOTLPHeaders(lookup)
			assert.NoError(t, err, "validated headers must resolve")
		}
	})
}
