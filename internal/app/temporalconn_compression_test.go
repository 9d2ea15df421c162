package app

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/bae-go/bae-go/internal/config"
)

func TestTemporalCompression(t *testing.T) {
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
		mode, err := config.ParseTemporalCompression(c.setting)
		require.NoError(t, err, c)
		comp := TemporalCompression(c.addr, mode)
		if c.none {
			assert.IsType(t, &client.GrpcCompressionNone{}, comp, c)
		} else {
			assert.Nil(t, comp, "%v: the SDK default (gzip)", c)
		}
	}
	_, err := config.ParseTemporalCompression("brotli")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "BAE_TEMPORAL_COMPRESSION")
}
