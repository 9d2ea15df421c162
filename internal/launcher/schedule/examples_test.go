package schedule

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The example config loads as written.
func TestExampleConfigLoads(t *testing.T) {
	f, found, err := Load("../../../examples/launchers/bae-schedules.toml")
	require.NoError(t, err)
	require.True(t, found)
	require.Len(t, f.Agents, 1)
	assert.Equal(t, "morning-question", f.Agents[0].Name)
}
