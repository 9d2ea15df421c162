// Package testenv gives integration tests a real environment: a fresh
// PostgreSQL database, an embedded Temporal server, and a running baesrv
// bound to loopback ports.
package testenv

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/server/temporaltest"

	"github.com/bae-go/bae-go/internal/app"
	"github.com/bae-go/bae-go/internal/config"
	"github.com/bae-go/bae-go/internal/lib/adminkey"
	"github.com/bae-go/bae-go/internal/lib/ids"
	"github.com/bae-go/bae-go/internal/lib/keyhash"
	"github.com/bae-go/bae-go/internal/lib/secretguard"
	"github.com/bae-go/bae-go/internal/telemetry"
	"github.com/bae-go/bae-go/internal/testing/testdb"
)

// Temporal starts an embedded Temporal server for t.
func Temporal(t testing.TB) *temporaltest.TestServer {
	t.Helper()
	ts := temporaltest.NewServer()
	t.Cleanup(ts.Stop)
	return ts
}

// Server is a running baesrv.
type Server struct {
	ClientURL string
	AdminURL  string
	// ConsoleURL is set when Env turns the console on (BAE_CONSOLE_ADDR).
	ConsoleURL  string
	AdminKey    string
	DatabaseURL string
	Temporal    client.Client
	Parts       *app.Parts
	stop        context.CancelFunc
	done        chan error
}

// PrimaryProviderTOML is the bae-config.toml entry most tests run on: an
// Anthropic-format provider named "primary" at baseURL (a fake).
func PrimaryProviderTOML(baseURL string) string {
	return fmt.Sprintf(`
[[providers.entries]]
name = "primary"
provider = "anthropic"
base_url = %q
model = "claude-fake"
auth_token = "t"
`, baseURL)
}

// Options customise a test server.
type Options struct {
	// ConfigTOML is written to a file and loaded as bae-config.toml.
	ConfigTOML  string
	TurnTimeout time.Duration
	DatabaseURL string
	Temporal    client.Client
	// Extend runs after the core parts are built (issue-4 services).
	Extend func(*app.Parts) error
	Env    map[string]string
	// DataDir is shared by servers that take over from one another (the
	// admin key file lives there); default a fresh temp dir.
	DataDir string
	// Telemetry replaces the pipeline from [telemetry] (in-memory
	// recorders in tests). The embedded Temporal client is built with its
	// options; a client passed in Temporal is used as is.
	Telemetry *telemetry.Telemetry
	// LogOutput receives the server's log (text, debug level) besides
	// $BAE_TEST_LOG's stderr; it must be safe for concurrent writes.
	LogOutput io.Writer
	// KeyHasher writes the server's new keys' hashes (default Argon2id
	// at keyhash.TestParams: the production costs would add half a second
	// to every session open).
	KeyHasher keyhash.Hasher
}

func keyHasher(h keyhash.Hasher) keyhash.Hasher {
	if h == nil {
		return keyhash.Argon2id{Params: keyhash.TestParams}
	}
	return h
}

// Start runs a baesrv for t on loopback ports.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	dir := opts.DataDir
	if dir == "" {
		dir = t.TempDir()
	}
	dbURL := opts.DatabaseURL
	if dbURL == "" {
		dbURL = testdb.New(t)
	}
	tc := opts.Temporal
	cfgPath := ""
	if opts.ConfigTOML != "" {
		cfgPath = filepath.Join(dir, "bae-config.toml")
		require.NoError(t, os.WriteFile(cfgPath, []byte(opts.ConfigTOML), 0o600))
	}
	env := map[string]string{
		"BAE_ADDR": "127.0.0.1:0", "BAE_ADMIN_ADDR": "127.0.0.1:0", "BAE_DATABASE_URL": dbURL,
		"BAE_DATA_DIR": dir, "BAE_SHUTDOWN_TIMEOUT": "5",
		"BAE_TASK_QUEUE": "bae-test-" + ids.New("")[:12],
	}
	if opts.TurnTimeout > 0 {
		env["BAE_TURN_TIMEOUT"] = opts.TurnTimeout.String()
	}
	for k, v := range opts.Env {
		env[k] = v
	}
	lookup := func(k string) (string, bool) {
		if v, ok := env[k]; ok {
			return v, true
		}
		return os.LookupEnv(k)
	}
	srvCfg, err := config.ServerFromEnv(lookup)
	require.NoError(t, err)
	srvCfg.TemporalNamespace = "default"
	file, err := config.LoadFile(cfgPath)
	require.NoError(t, err)
	if tc == nil {
		// Like baesrv, the client redacts configured secrets from payloads.
		o := client.Options{DataConverter: secretguard.FromConfig(file, lookup).DataConverter()}
		if opts.Telemetry != nil {
			o = opts.Telemetry.TemporalOptions(o)
		}
		tc = Temporal(t).NewClientWithOptions(o)
	}

	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{DatabaseURL: dbURL, Temporal: tc, stop: cancel, done: make(chan error, 1)}
	ready := make(chan struct{})
	var logOut io.Writer = io.Discard
	if os.Getenv("BAE_TEST_LOG") != "" {
		logOut = os.Stderr
	}
	if opts.LogOutput != nil {
		logOut = io.MultiWriter(logOut, opts.LogOutput)
	}
	go func() {
		s.done <- app.Run(ctx, app.Options{
			Server: srvCfg, File: file, Temporal: tc, Telemetry: opts.Telemetry, KeyHasher: keyHasher(opts.KeyHasher),
			Log:          slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: slog.LevelDebug})),
			Admin:        adminkey.Options{KeyFile: srvCfg.AdminKeyFile, HashFile: srvCfg.AdminKeyHashFile},
			ConsoleReady: func(u string) { s.ConsoleURL = u },
			Ready: func(c, a string) {
				s.ClientURL, s.AdminURL = "http://"+c, "http://"+a
				close(ready)
			},
			Extend: func(p *app.Parts) error {
				s.Parts = p
				if opts.Extend != nil {
					return opts.Extend(p)
				}
				return nil
			},
		})
	}()
	select {
	case <-ready:
	case err := <-s.done:
		cancel()
		require.FailNow(t, "baesrv exited before serving", "%v", err)
	case <-time.After(60 * time.Second):
		cancel()
		require.FailNow(t, "baesrv did not start within 60s")
	}
	key, err := adminkey.ReadKeyFile(srvCfg.AdminKeyFile)
	require.NoError(t, err)
	s.AdminKey = key
	t.Cleanup(s.Stop)
	return s
}

// Stop shuts the server down and waits for it.
func (s *Server) Stop() {
	if s.stop == nil {
		return
	}
	s.stop()
	s.stop = nil
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		fmt.Fprintln(os.Stderr, "testenv: baesrv did not stop within 30s")
	}
}
