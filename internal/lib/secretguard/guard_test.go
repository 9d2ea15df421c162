package secretguard

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/config"
)

func TestSecretsAreRedactedFromPayloads(t *testing.T) {
	f, err := config.Parse([]byte(`
[[providers.entries]]
name = "a"
provider = "anthropic"
model = "m"
auth_token = "${TOKEN_A}"

[[providers.entries]]
name = "b"
provider = "openai"
model = "m"
auth_token = "sk-literal-0123456789"

[[mcp.servers]]
name = "s"
transport = "http"
url = "http://x"
headers = { Authorization = "Bearer ${MCP_TOKEN}" }
`), func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	env := map[string]string{"TOKEN_A": "sk-env-abcdefghijkl", "MCP_TOKEN": "mcp-secret-xyz"}
	codec := FromConfig(f, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	dc := codec.DataConverter()

	p, err := dc.ToPayload(map[string]string{"leak": "prefix sk-env-abcdefghijkl and sk-literal-0123456789 and Bearer mcp-secret-xyz"})
	require.NoError(t, err)
	var out map[string]string
	require.NoError(t, dc.FromPayload(p, &out))
	assert.NotContains(t, out["leak"], "sk-env-abcdefghijkl")
	assert.NotContains(t, out["leak"], "sk-literal-0123456789")
	assert.NotContains(t, out["leak"], "mcp-secret-xyz")
	assert.Contains(t, out["leak"], config.Redacted)

	// Ordinary payloads pass unchanged.
	p, err = dc.ToPayload(map[string]string{"turn": "trn_123"})
	require.NoError(t, err)
	require.NoError(t, dc.FromPayload(p, &out))
	assert.Equal(t, "trn_123", out["turn"])
}

func TestShortValuesAreIgnored(t *testing.T) {
	c := New("", "abc", "longenough-secret")
	assert.Len(t, c.secrets, 1)
}
