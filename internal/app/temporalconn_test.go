package app

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
)

func TestTemporalConnectionSettings(t *testing.T) {
	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	var o client.Options
	require.NoError(t, temporalConnection(&o, env(nil)))
	assert.Nil(t, o.ConnectionOptions.TLS, "plain by default")

	o = client.Options{}
	require.NoError(t, temporalConnection(&o, env(map[string]string{"BAE_TEMPORAL_API_KEY": "k"})))
	assert.NotNil(t, o.ConnectionOptions.TLS, "an API key implies TLS")
	assert.NotNil(t, o.Credentials)

	o = client.Options{}
	assert.Error(t, temporalConnection(&o, env(map[string]string{"BAE_TEMPORAL_TLS_CERT": "/nope.pem"})), "cert without key")
	assert.Error(t, temporalConnection(&o, env(map[string]string{"BAE_TEMPORAL_TLS_CA": "/nope.pem"})))
}
