package app

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/bae-go/bae-go/internal/config"
)

func TestTemporalConnectionSettings(t *testing.T) {
	conn := func(m map[string]string) config.TemporalConn {
		s, err := config.ServerFromEnv(func(k string) (string, bool) { v, ok := m[k]; return v, ok })
		require.NoError(t, err)
		return s.Temporal
	}
	var o client.Options
	require.NoError(t, temporalConnection(&o, conn(nil)))
	assert.Nil(t, o.ConnectionOptions.TLS, "plain by default")

	o = client.Options{}
	require.NoError(t, temporalConnection(&o, conn(map[string]string{"BAE_TEMPORAL_API_KEY": "k"})))
	assert.NotNil(t, o.ConnectionOptions.TLS, "an API key implies TLS")
	assert.NotNil(t, o.Credentials)

	o = client.Options{}
	assert.Error(t, temporalConnection(&o, conn(map[string]string{"BAE_TEMPORAL_TLS_CA": "/nope.pem"})))
}
