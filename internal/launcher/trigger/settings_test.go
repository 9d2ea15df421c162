package trigger

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/launcher"
)

func TestSettingsFromEnv(t *testing.T) {
	env := func(kv ...string) func(string) (string, bool) {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	s, err := SettingsFromEnv(env())
	require.NoError(t, err)
	assert.Equal(t, Settings{ConfigPath: DefaultConfigPath, ShutdownTimeout: DefaultShutdownTimeout}, s)

	for v, want := range map[string]bool{"1": true, "true": true, " TRUE ": true, "0": false, "no": false, "": false} {
		s, err := SettingsFromEnv(env("BAE_LAUNCHER_WEBAPP", v))
		require.NoError(t, err)
		assert.Equal(t, want, s.WebApp, "BAE_LAUNCHER_WEBAPP=%q", v)
	}
	s, err = SettingsFromEnv(env("BAE_LAUNCHER_API_ADDR", " 127.0.0.1:1 ", "BAE_LAUNCHER_API_TOKEN", "t", "BAE_LAUNCHER_WEBAPP_STATIC_DIR", "/srv"))
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:1", s.Addr)
	assert.Equal(t, "t", s.Token)
	assert.Equal(t, "/srv", s.StaticDir)

	_, err = SettingsFromEnv(env("BAE_LAUNCHER_API_SHUTDOWN_TIMEOUT", "30s"))
	assert.Equal(t, launcher.ExitUsage, launcher.ExitCode(err))
}
