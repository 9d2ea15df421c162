package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestResolveEnvTokens(t *testing.T) {
	env := envMap(map[string]string{"A": "alpha", "B": "beta", "EMPTY": "", "DOLLAR": "${A}"})
	cases := map[string]string{
		"":                        "",
		"plain":                   "plain",
		"${A}":                    "alpha",
		"Bearer ${A}":             "Bearer alpha",
		"Bearer ${A}_${B}":        "Bearer alpha_beta",
		"${A}${B}":                "alphabeta",
		"x${EMPTY}y":              "xy",
		"cost $5 and $":           "cost $5 and $",
		"$$ {A} $A":               "$$ {A} $A",
		"$${A}":                   "$alpha",
		"${DOLLAR}":               "${A}", // values are not re-expanded
		"ünï${A}cödé":             "ünïalphacödé",
		"trailing } brace ${B} }": "trailing } brace beta }",
	}
	for in, want := range cases {
		got, err := ResolveEnvTokens(in, env)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
}

func TestResolveEnvTokensUnterminated(t *testing.T) {
	for _, in := range []string{"${", "Bearer ${A", "${A} ${B"} {
		_, err := ResolveEnvTokens(in, envMap(map[string]string{"A": "a"}))
		require.ErrorIs(t, err, ErrUnterminatedToken, in)
	}
}

func TestResolveEnvTokensUnsetNamesVariableOnly(t *testing.T) {
	env := envMap(map[string]string{"SET": "topsecret"})
	_, err := ResolveEnvTokens("${SET}:${MISSING_VAR}", env)
	var me *MissingEnvError
	require.ErrorAs(t, err, &me)
	assert.Equal(t, "MISSING_VAR", me.Name)
	assert.Contains(t, err.Error(), "MISSING_VAR")
	assert.NotContains(t, err.Error(), "topsecret")
}
