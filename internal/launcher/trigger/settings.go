package trigger

import (
	"strings"
	"time"

	"github.com/bae-go/bae-go/internal/launcher"
)

// Settings are baeapi's environment (docs/launchers.md).
type Settings struct {
	ConfigPath string // BAE_LAUNCHER_API_CONFIG
	// Addr is BAE_LAUNCHER_API_ADDR; "" falls back to the file's [server]
	// addr, then DefaultAddr.
	Addr            string
	Token           string        // BAE_LAUNCHER_API_TOKEN; "" leaves /agents/* open
	ShutdownTimeout time.Duration // BAE_LAUNCHER_API_SHUTDOWN_TIMEOUT, whole seconds
	StaticDir       string        // BAE_LAUNCHER_WEBAPP_STATIC_DIR
	WebApp          bool          // BAE_LAUNCHER_WEBAPP: 1 or true
}

// SettingsFromEnv reads baeapi's settings through lookup. A timeout that is
// not a whole number of seconds is a usage error (exit 2), as in BAE.
func SettingsFromEnv(lookup func(string) (string, bool)) (Settings, error) {
	token, _ := lookup("BAE_LAUNCHER_API_TOKEN")
	webapp := strings.ToLower(launcher.Get(lookup, "BAE_LAUNCHER_WEBAPP", "false"))
	s := Settings{
		ConfigPath: launcher.Get(lookup, "BAE_LAUNCHER_API_CONFIG", DefaultConfigPath),
		Addr:       launcher.Get(lookup, "BAE_LAUNCHER_API_ADDR", ""),
		Token:      token,
		StaticDir:  launcher.Get(lookup, "BAE_LAUNCHER_WEBAPP_STATIC_DIR", ""),
		WebApp:     webapp == "1" || webapp == "true",
	}
	var err error
	if s.ShutdownTimeout, err = launcher.Seconds(lookup, "BAE_LAUNCHER_API_SHUTDOWN_TIMEOUT", DefaultShutdownTimeout); err != nil {
		return Settings{}, err
	}
	return s, nil
}
