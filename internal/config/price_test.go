package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/provider"
)

// TestProviderPrice: the price table is read per entry, turns usage into
// nano-dollars, and a negative or absurd price is refused at startup.
func TestProviderPrice(t *testing.T) {
	f, err := Parse([]byte(`
[[providers.entries]]
name = "priced"
provider = "anthropic"
model = "claude-sonnet-4"
auth_token = "t"
price = { input = 3.0, output = 15.0, cache_read = 0.30, cache_write = 3.75 }

[[providers.entries]]
name = "free"
provider = "openai"
model = "local-model"
auth_token = "t"
`), noEnv)
	require.NoError(t, err)
	priced, _ := f.Provider("priced")
	require.NotNil(t, priced.Price)
	// 1000 input at $3/M = $0.003, 100 output at $15/M = $0.0015,
	// 10000 cache reads at $0.30/M = $0.003, 2000 writes at $3.75/M = $0.0075.
	assert.Equal(t, int64(15_000_000), priced.Price.Cost(provider.Usage{Input: 1000, Output: 100, CacheRead: 10000, CacheWrite: 2000}))
	free, _ := f.Provider("free")
	assert.Nil(t, free.Price)
	assert.Zero(t, free.Price.Cost(provider.Usage{Input: 1000}))

	for _, bad := range []string{`price = { input = -1.0 }`, `price = { output = 1e9 }`, `price = { cache_read = nan }`} {
		_, err := Parse([]byte(`
[[providers.entries]]
name = "p"
provider = "anthropic"
model = "m"
auth_token = "t"
`+bad), noEnv)
		require.Error(t, err, bad)
		assert.Contains(t, err.Error(), "price.", bad)
	}
}
