package app

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
)

func TestTemporalCompression(t *testing.T) {
	env := func(v string) func(string) (string, bool) {
		return func(k string) (string, bool) {
			if k == "BAE_TEMPORAL_COMPRESSION" && v != "" {
				return v, true
			}
			return "", false
		}
	}
	for _, c := range []struct {
		addr, setting string
		none          bool
	}{
		{"127.0.0.1:7233", "", true},
		{"localhost:7233", "auto", true},
		{"[::1]:7233", "", true},
		{"temporal.internal:7233", "", false},
		{"10.0.0.5:7233", "", false},
		{"127.0.0.1:7233", "gzip", false},
		{"temporal.internal:7233", "none", true},
	} {
		comp, err := TemporalCompression(c.addr, env(c.setting))
		require.NoError(t, err, c)
		if c.none {
			assert.IsType(t, &client.GrpcCompressionNone{}, comp, c)
		} else {
			assert.Nil(t, comp, "%v: the SDK default (gzip)", c)
		}
	}
	_, err := TemporalCompression("127.0.0.1:7233", env("brotli"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "BAE_TEMPORAL_COMPRESSION")
}
