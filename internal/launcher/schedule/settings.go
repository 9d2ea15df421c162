package schedule

import (
	"time"

	"github.com/bae-go/bae-go/internal/launcher"
)

// Settings are baesched's environment (docs/launchers.md).
type Settings struct {
	ConfigPath      string        // BAE_SCHEDULES_CONFIG
	ShutdownTimeout time.Duration // BAE_SCHEDULES_SHUTDOWN_TIMEOUT, whole seconds
	CatchupWindow   time.Duration // BAE_SCHEDULES_CATCHUP_WINDOW, whole seconds
	TaskQueue       string        // BAE_SCHEDULES_TASK_QUEUE
}

// SettingsFromEnv reads baesched's settings through lookup. A value that is
// not a whole number of seconds is a usage error (exit 2), as in BAE.
func SettingsFromEnv(lookup func(string) (string, bool)) (Settings, error) {
	s := Settings{
		ConfigPath: launcher.Get(lookup, "BAE_SCHEDULES_CONFIG", DefaultConfigPath),
		TaskQueue:  launcher.Get(lookup, "BAE_SCHEDULES_TASK_QUEUE", DefaultTaskQueue),
	}
	var err error
	if s.ShutdownTimeout, err = launcher.Seconds(lookup, "BAE_SCHEDULES_SHUTDOWN_TIMEOUT", DefaultShutdownTimeout); err != nil {
		return Settings{}, err
	}
	if s.CatchupWindow, err = launcher.Seconds(lookup, "BAE_SCHEDULES_CATCHUP_WINDOW", DefaultCatchupWindow); err != nil {
		return Settings{}, err
	}
	// Temporal refuses a catch-up window under ten seconds.
	if s.CatchupWindow < 10*time.Second {
		return Settings{}, &launcher.UsageError{Msg: "BAE_SCHEDULES_CATCHUP_WINDOW: Temporal needs at least 10 seconds"}
	}
	return s, nil
}
