package schedule

import (
	"testing"
	"time"

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
	assert.Equal(t, Settings{ConfigPath: DefaultConfigPath, ShutdownTimeout: DefaultShutdownTimeout, CatchupWindow: DefaultCatchupWindow, TaskQueue: DefaultTaskQueue}, s)

	s, err = SettingsFromEnv(env("BAE_SCHEDULES_CATCHUP_WINDOW", "10", "BAE_SCHEDULES_SHUTDOWN_TIMEOUT", "0", "BAE_SCHEDULES_TASK_QUEUE", "nightly"))
	require.NoError(t, err)
	assert.Equal(t, 10*time.Second, s.CatchupWindow)
	assert.Zero(t, s.ShutdownTimeout)
	assert.Equal(t, "nightly", s.TaskQueue)

	for _, bad := range [][]string{
		{"BAE_SCHEDULES_CATCHUP_WINDOW", "9"},
		{"BAE_SCHEDULES_CATCHUP_WINDOW", "1h"},
		{"BAE_SCHEDULES_SHUTDOWN_TIMEOUT", "-3"},
	} {
		_, err := SettingsFromEnv(env(bad...))
		assert.Equal(t, launcher.ExitUsage, launcher.ExitCode(err), "%v: %v", bad, err)
	}
}
