package trigger

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The example configs load as written (sdk/itest runs bae-api.toml).
func TestExampleConfigsLoad(t *testing.T) {
	for _, name := range []string{"bae-api.toml", "bae-app.toml"} {
		f, found, err := Load("../../../examples/launchers/" + name)
		require.NoError(t, err, name)
		require.True(t, found, name)
		require.Len(t, f.Agents, 1, name)
		assert.Equal(t, "ask", f.Agents[0].Name)
	}
}
