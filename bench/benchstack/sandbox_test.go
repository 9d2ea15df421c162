package benchstack

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Each listed counter is its tag and run count; no counters is an empty
// map, and a count that is not a number is an error, not a zero.
func TestParseCounts(t *testing.T) {
	m, err := parseCounts("a 1\nb 2\n")
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"a": 1, "b": 2}, m)
	m, err = parseCounts("")
	require.NoError(t, err)
	assert.Empty(t, m)
	_, err = parseCounts("a x\n")
	assert.Error(t, err)
}
