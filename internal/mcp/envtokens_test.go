package mcp

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestResolveEnvTokens(t *testing.T) {
	env := map[string]string{"TOKEN": "abc", "EMPTY": "", "HOST": "example.com"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }

	for in, want := range map[string]string{
		"":                             "",
		"plain":                        "plain",
		"Bearer ${TOKEN}":              "Bearer abc",
		"${TOKEN}${TOKEN}":             "abcabc",
		"https://${HOST}/x?t=${TOKEN}": "https://example.com/x?t=abc",
		"cost $5 and $ {TOKEN}":        "cost $5 and $ {TOKEN}",
		"trailing $":                   "trailing $",
		"[${EMPTY}]":                   "[]",
		"héllo ${TOKEN} wörld":         "héllo abc wörld",
	} {
		got, err := resolveEnvTokens(in, lookup)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}

	_, err := resolveEnvTokens("Bearer ${MISSING}", lookup)
	assert.ErrorContains(t, err, `"MISSING" is not set`)
	_, err = resolveEnvTokens("Bearer ${TOKEN", lookup)
	assert.ErrorContains(t, err, "unterminated")
	_, err = resolveEnvTokens("${}", lookup)
	assert.Error(t, err)
}
