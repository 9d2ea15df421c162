package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestServerFromEnvDefaults(t *testing.T) {
	s, err := ServerFromEnv(noEnv)
	require.NoError(t, err)
	assert.Equal(t, Server{
		Addr:              "0.0.0.0:8080",
		AdminAddr:         "127.0.0.1:8081",
		DatabaseURL:       "postgres://postgres@127.0.0.1:5432/bae?sslmode=disable",
		ShutdownTimeout:   30 * time.Second,
		TurnTimeout:       120 * time.Second,
		HeartbeatTimeout:  10 * time.Second,
		IdleUpdate:        true,
		DeltasInterest:    true,
		DBRetryBudget:     5 * time.Minute,
		AuthFailureLimit:  30,
		KeyHash:           "argon2id",
		AdminKeyFile:      "bae-data/admin-key.pem",
		AdminKeyHashFile:  "bae-data/admin-key-hash.pem",
		SandboxDriver:     "docker",
		TemporalAddr:      "127.0.0.1:7233",
		TemporalNamespace: "default",
		TaskQueue:         "bae-sessions",
		DataDir:           "./bae-data",
		TemporalUIPort:    8233,
		TemporalPort:      7233,
		MaxBodyBytes:      4 << 20,
		BodyReadTimeout:   60 * time.Second,
		MCPIdleTimeout:    10 * time.Minute,
		WorkflowCacheSize: 10000,
		// The documented defaults, written out: a change to one is a
		// change to docs/configuration.md too.
		MaxSessionsPerKey: 100, MaxSessionsPerProfile: 1000, MaxSandboxesPerKey: 4, MaxSandboxesPerProfile: 16,
		MaxStreamsPerSession: 16, MaxStreamsPerKey: 64, MaxQueuedTurnsPerSession: 16, MaxQueuedTurnsPerKey: 64, SessionIdleTTL: 24 * time.Hour,
		SandboxSweepInterval: 5 * time.Minute,
		Console:              Console{PasswordFile: "bae-data/console-password.pem", SessionTTL: 12 * time.Hour},
		Temporal:             TemporalConn{Compression: CompressionAuto},
	}, s)
}

func TestServerFromEnvOverrides(t *testing.T) {
	s, err := ServerFromEnv(envMap(map[string]string{
		"BAE_ADDR":                           "127.0.0.1:9000",
		"BAE_ADMIN_ADDR":                     "[::1]:9001",
		"BAE_DATABASE_URL":                   "postgres://u@db/x",
		"BAE_SHUTDOWN_TIMEOUT":               " 5 ",
		"BAE_TURN_TIMEOUT":                   "500ms",
		"BAE_DB_RETRY_BUDGET":                "90s",
		"BAE_CONFIG":                         "/etc/bae-config.toml",
		"BAE_DATA_DIR":                       "/data",
		"BAE_DANGEROUSLY_DISABLE_ADMIN_AUTH": "TRUE",
		"BAE_IDLE_UPDATE":                    "0",
		"BAE_DELTAS_INTEREST":                "0",
		"BAE_SANDBOX_DRIVER":                 "apple-container",
		"BAE_TEMPORAL_ADDR":                  "temporal:7233",
		"BAE_TEMPORAL_NAMESPACE":             "ns",
		"BAE_TASK_QUEUE":                     "q",
		"BAE_TEMPORAL_UI_PORT":               "18233",
		"BAE_TEMPORAL_PORT":                  "17233",
		"BAE_MAX_BODY_BYTES":                 "1024",
		"BAE_BODY_READ_TIMEOUT":              "250ms",
		"BAE_MAX_CONCURRENT_OPENS":           "4",
		"BAE_WORKFLOW_CACHE_SIZE":            "500",
		"BAE_KEY_HASH":                       "SHA256",
		"BAE_MCP_IDLE_TIMEOUT":               "90",
		"BAE_MAX_SESSIONS_PER_KEY":           "5",
		"BAE_MAX_SESSIONS_PER_PROFILE":       "0",
		"BAE_MAX_SANDBOXES_PER_KEY":          "1",
		"BAE_MAX_SANDBOXES_PER_PROFILE":      "2",
		"BAE_MAX_STREAMS_PER_SESSION":        "3",
		"BAE_MAX_STREAMS_PER_KEY":            "7",
		"BAE_MAX_QUEUED_TURNS_PER_SESSION":   "2",
		"BAE_MAX_QUEUED_TURNS_PER_KEY":       "0",
		"BAE_SESSION_IDLE_TTL":               "2h",
		"BAE_SANDBOX_SWEEP_INTERVAL":         "90s",
	}))
	require.NoError(t, err)
	assert.Equal(t, Server{
		Addr: "127.0.0.1:9000", AdminAddr: "[::1]:9001", DatabaseURL: "postgres://u@db/x",
		ShutdownTimeout: 5 * time.Second, TurnTimeout: 500 * time.Millisecond, HeartbeatTimeout: 10 * time.Second, DBRetryBudget: 90 * time.Second, AuthFailureLimit: 30,
		ConfigPath: "/etc/bae-config.toml", AdminKeyFile: "/data/admin-key.pem", AdminKeyHashFile: "/data/admin-key-hash.pem",
		DisableAdminAuth: true, KeyHash: "sha256", SandboxDriver: "apple-container", TemporalAddr: "temporal:7233",
		TemporalNamespace: "ns", TaskQueue: "q", DataDir: "/data", TemporalUIPort: 18233, TemporalPort: 17233,
		MaxBodyBytes: 1024, BodyReadTimeout: 250 * time.Millisecond, MaxConcurrentOpens: 4, WorkflowCacheSize: 500, MCPIdleTimeout: 90 * time.Second,
		MaxSessionsPerKey: 5, MaxSessionsPerProfile: 0, MaxSandboxesPerKey: 1, MaxSandboxesPerProfile: 2,
		MaxStreamsPerSession: 3, MaxStreamsPerKey: 7, MaxQueuedTurnsPerSession: 2, MaxQueuedTurnsPerKey: 0, SessionIdleTTL: 2 * time.Hour,
		SandboxSweepInterval: 90 * time.Second,
		Console:              Console{PasswordFile: "/data/console-password.pem", SessionTTL: 12 * time.Hour},
		Temporal:             TemporalConn{Compression: CompressionAuto},
	}, s)

	s, err = ServerFromEnv(envMap(map[string]string{
		"BAE_ADMIN_KEY_FILE": "/k/key.pem", "BAE_ADMIN_KEY_HASH_FILE": "/k/hash.pem", "BAE_DATA_DIR": "/data",
	}))
	require.NoError(t, err)
	assert.Equal(t, "/k/key.pem", s.AdminKeyFile, "explicit file beats data dir")
	assert.Equal(t, "/k/hash.pem", s.AdminKeyHashFile)
}

func TestServerFromEnvBlankIsUnset(t *testing.T) {
	s, err := ServerFromEnv(envMap(map[string]string{"BAE_CONFIG": "", "BAE_TURN_TIMEOUT": "  ", "BAE_ADDR": ""}))
	require.NoError(t, err)
	assert.Equal(t, "", s.ConfigPath)
	assert.Equal(t, DefaultTurnTimeout, s.TurnTimeout)
	assert.Equal(t, DefaultAddr, s.Addr)
}

func TestKeyHashScheme(t *testing.T) {
	_, err := ServerFromEnv(envMap(map[string]string{"BAE_KEY_HASH": "bcrypt"}))
	assert.ErrorContains(t, err, `BAE_KEY_HASH: unknown key hash scheme "bcrypt"`)
}

func TestDisableAdminAuthTruthiness(t *testing.T) {
	for v, want := range map[string]bool{"1": true, "true": true, "True": true, "TRUE": true, "0": false, "false": false, "yes": false, "": false} {
		s, err := ServerFromEnv(envMap(map[string]string{"BAE_DANGEROUSLY_DISABLE_ADMIN_AUTH": v}))
		require.NoError(t, err)
		assert.Equal(t, want, s.DisableAdminAuth, v)
	}
}

func TestAdminAddrMustBeLoopback(t *testing.T) {
	for _, ok := range []string{"127.0.0.1:8081", "127.1.2.3:1", "[::1]:8081", "localhost:8081", "LOCALHOST:1"} {
		_, err := ServerFromEnv(envMap(map[string]string{"BAE_ADMIN_ADDR": ok}))
		assert.NoError(t, err, ok)
		assert.True(t, IsLoopbackAddr(ok), ok)
	}
	for _, bad := range []string{"0.0.0.0:8081", ":8081", "[::]:8081", "10.0.0.1:8081", "example.com:8081", "128.0.0.1:8081"} {
		_, err := ServerFromEnv(envMap(map[string]string{"BAE_ADMIN_ADDR": bad}))
		requireValidation(t, err, "BAE_ADMIN_ADDR")
		assert.Contains(t, err.Error(), "loopback", bad)
	}
}

func TestServerFromEnvInvalidValues(t *testing.T) {
	cases := map[string]string{
		"BAE_ADDR":              "not-an-addr",
		"BAE_ADMIN_ADDR":        "127.0.0.1",
		"BAE_SHUTDOWN_TIMEOUT":  "soon",
		"BAE_TURN_TIMEOUT":      "-5",
		"BAE_SANDBOX_DRIVER":    "podman",
		"BAE_TEMPORAL_UI_PORT":  "eighty",
		"BAE_TEMPORAL_PORT":     "70000",
		"BAE_MAX_BODY_BYTES":    "4MiB",
		"BAE_BODY_READ_TIMEOUT": "0",
		"BAE_DB_RETRY_BUDGET":   "0",
		"BAE_METRICS_ADDR":      "9464",
		"BAE_MCP_IDLE_TIMEOUT":  "a while",
	}
	for name, value := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := ServerFromEnv(envMap(map[string]string{name: value}))
			requireValidation(t, err, name)
			assert.Contains(t, err.Error(), value)
		})
	}
	_, err := ServerFromEnv(envMap(map[string]string{"BAE_TURN_TIMEOUT": "-1s"}))
	requireValidation(t, err, "BAE_TURN_TIMEOUT")
	_, err = ServerFromEnv(envMap(map[string]string{"BAE_ADDR": "127.0.0.1:http"}))
	requireValidation(t, err, "BAE_ADDR")
	for _, v := range []string{"0", "-1", "1.5"} {
		_, err = ServerFromEnv(envMap(map[string]string{"BAE_MAX_BODY_BYTES": v}))
		requireValidation(t, err, "BAE_MAX_BODY_BYTES")
	}
	_, err = ServerFromEnv(envMap(map[string]string{"BAE_BODY_READ_TIMEOUT": "0s"}))
	requireValidation(t, err, "BAE_BODY_READ_TIMEOUT")
	for _, v := range []string{"0", "-2", "two"} {
		_, err = ServerFromEnv(envMap(map[string]string{"BAE_MAX_CONCURRENT_OPENS": v}))
		requireValidation(t, err, "BAE_MAX_CONCURRENT_OPENS")
	}
	for _, v := range []string{"0", "-5", "many"} {
		_, err = ServerFromEnv(envMap(map[string]string{"BAE_WORKFLOW_CACHE_SIZE": v}))
		requireValidation(t, err, "BAE_WORKFLOW_CACHE_SIZE")
	}
	for _, v := range []string{"-1", "x"} {
		_, err = ServerFromEnv(envMap(map[string]string{"BAE_AUTH_FAILURE_LIMIT": v}))
		requireValidation(t, err, "BAE_AUTH_FAILURE_LIMIT")
	}
	s, err := ServerFromEnv(envMap(map[string]string{"BAE_AUTH_FAILURE_LIMIT": "0"}))
	require.NoError(t, err)
	assert.Zero(t, s.AuthFailureLimit, "0 disables the limit")
	s, err = ServerFromEnv(envMap(map[string]string{"BAE_MCP_IDLE_TIMEOUT": "0"}))
	require.NoError(t, err)
	assert.Zero(t, s.MCPIdleTimeout, "0 keeps MCP connections until their session closes")
}

func TestMetricsAddrFromEnv(t *testing.T) {
	s, err := ServerFromEnv(envMap(nil))
	require.NoError(t, err)
	assert.Empty(t, s.MetricsAddr, "off unless set")
	for _, v := range []string{MetricsOnAdmin, "0.0.0.0:9464", "127.0.0.1:0"} {
		s, err = ServerFromEnv(envMap(map[string]string{"BAE_METRICS_ADDR": v}))
		require.NoError(t, err, v)
		assert.Equal(t, v, s.MetricsAddr)
	}
	assert.False(t, s.Pprof, "profiles off unless asked for")
	s, err = ServerFromEnv(envMap(map[string]string{"BAE_METRICS_ADDR": MetricsOnAdmin, "BAE_PPROF": "1"}))
	require.NoError(t, err)
	assert.True(t, s.Pprof)
}

func TestTrustedProxiesFromEnv(t *testing.T) {
	s, err := ServerFromEnv(envMap(map[string]string{"BAE_TRUSTED_PROXIES": "10.0.0.0/8, 192.168.1.7 ::ffff:172.16.0.1,fd00::/8"}))
	require.NoError(t, err)
	var got []string
	for _, p := range s.TrustedProxies {
		got = append(got, p.String())
	}
	assert.Equal(t, []string{"10.0.0.0/8", "192.168.1.7/32", "172.16.0.1/32", "fd00::/8"}, got)
	_, err = ServerFromEnv(envMap(map[string]string{"BAE_TRUSTED_PROXIES": "10.0.0.0/8,proxy.local"}))
	requireValidation(t, err, "BAE_TRUSTED_PROXIES")
}

func TestTemporalConnFromEnv(t *testing.T) {
	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	s, err := ServerFromEnv(env(map[string]string{"BAE_TEMPORAL_COMPRESSION": " GZIP ", "BAE_TEMPORAL_API_KEY": "k"}))
	require.NoError(t, err)
	assert.Equal(t, TemporalConn{Compression: CompressionGzip, TLS: true, APIKey: "k"}, s.Temporal, "an API key implies TLS")
	s, err = ServerFromEnv(env(map[string]string{"BAE_TEMPORAL_TLS": "true"}))
	require.NoError(t, err)
	assert.True(t, s.Temporal.TLS)

	for _, bad := range []map[string]string{
		{"BAE_TEMPORAL_COMPRESSION": "brotli"},
		{"BAE_TEMPORAL_TLS_CERT": "/c.pem"},
		{"BAE_TEMPORAL_TLS_KEY": "/k.pem"},
	} {
		_, err := ServerFromEnv(env(bad))
		var ve *ValidationError
		assert.ErrorAs(t, err, &ve, "%v", bad)
	}
	_, err = (TemporalConn{TLS: true, CAFile: "/absent/ca.pem"}).TLSConfig()
	var ve *ValidationError
	assert.ErrorAs(t, err, &ve)
	assert.Contains(t, err.Error(), "BAE_TEMPORAL_TLS_CA")
}
