package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConsoleOffByDefault(t *testing.T) {
	s, err := ServerFromEnv(noEnv)
	require.NoError(t, err)
	assert.False(t, s.Console.Enabled())
	assert.False(t, s.Console.Secure())
}

func TestConsoleFromEnv(t *testing.T) {
	s, err := ServerFromEnv(envMap(map[string]string{
		"BAE_DATA_DIR":                "/data",
		"BAE_CONSOLE_ADDR":            "127.0.0.1:8082",
		"BAE_CONSOLE_PASSWORD":        "correct horse battery",
		"BAE_CONSOLE_SESSION_TTL":     "90m",
		"BAE_CONSOLE_TEMPORAL_UI_URL": "http://127.0.0.1:8233",
	}))
	require.NoError(t, err)
	assert.Equal(t, Console{
		Addr: "127.0.0.1:8082", Password: "correct horse battery", PasswordFile: "/data/console-password.pem",
		SessionTTL: 90 * time.Minute, TemporalUIURL: "http://127.0.0.1:8233",
	}, s.Console)
	assert.True(t, s.Console.Enabled())
}

func TestConsoleOffLoopbackNeedsTLS(t *testing.T) {
	_, err := ServerFromEnv(envMap(map[string]string{"BAE_CONSOLE_ADDR": "0.0.0.0:8082"}))
	requireValidation(t, err, "BAE_CONSOLE_ADDR")
	assert.Contains(t, err.Error(), "loopback")

	s, err := ServerFromEnv(envMap(map[string]string{"BAE_CONSOLE_ADDR": "0.0.0.0:8082", "BAE_CONSOLE_TLS_CERT": "c.pem", "BAE_CONSOLE_TLS_KEY": "k.pem"}))
	require.NoError(t, err)
	assert.True(t, s.Console.Secure())

	s, err = ServerFromEnv(envMap(map[string]string{"BAE_CONSOLE_ADDR": ":8082", "BAE_CONSOLE_TLS_TERMINATED": "1"}))
	require.NoError(t, err)
	assert.True(t, s.Console.Secure())
}

func TestConsoleInvalidValues(t *testing.T) {
	for name, env := range map[string]map[string]string{
		"BAE_CONSOLE_ADDR":            {"BAE_CONSOLE_ADDR": "8082"},
		"BAE_CONSOLE_PASSWORD":        {"BAE_CONSOLE_PASSWORD": "short"},
		"BAE_CONSOLE_TLS_CERT":        {"BAE_CONSOLE_TLS_CERT": "c.pem"},
		"BAE_CONSOLE_SESSION_TTL":     {"BAE_CONSOLE_SESSION_TTL": "soon"},
		"BAE_CONSOLE_TEMPORAL_UI_URL": {"BAE_CONSOLE_TEMPORAL_UI_URL": "127.0.0.1:8233"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ServerFromEnv(envMap(env))
			requireValidation(t, err, name)
		})
	}
	_, err := ServerFromEnv(envMap(map[string]string{"BAE_CONSOLE_SESSION_TTL": "500ms"}))
	requireValidation(t, err, "BAE_CONSOLE_SESSION_TTL")
}
