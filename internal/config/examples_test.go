package config

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestExampleConfigsLoad loads every file in examples/bae-config the way
// baesrv does, so an example never drifts from the schema.
func TestExampleConfigsLoad(t *testing.T) {
	files, err := filepath.Glob("../../examples/bae-config/*.toml")
	require.NoError(t, err)
	mcp := map[string][]string{}
	for _, p := range files {
		f, err := LoadFileWithEnv(p, func(string) (string, bool) { return "", false })
		require.NoError(t, err, p)
		var names []string
		for _, m := range f.MCPServersView() {
			names = append(names, m.Name)
		}
		mcp[filepath.Base(p)] = names
		assert.NotEmpty(t, f.ProvidersView(), "%s has a provider to name in a profile", p)
	}
	assert.Equal(t, []string{"fetch"}, mcp["mcp-fetch.toml"])
	assert.Equal(t, []string{"github"}, mcp["mcp-github.toml"])
	assert.ElementsMatch(t, []string{"filesystem", "fetch", "git", "remote-search"}, mcp["mcp-multi-server.toml"])
	assert.Equal(t, []string{"filesystem"}, mcp["mcp-filesystem.toml"])
}
