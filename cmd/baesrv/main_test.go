package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/app"
	"github.com/bae-go/bae-go/internal/lib/ids"
	"github.com/bae-go/bae-go/internal/lib/keyhash"
	"github.com/bae-go/bae-go/internal/testing/testdb"
)

// TestStartupValidationExitsWithUsageCode checks that configuration mistakes
// stop the server before it serves, with exit code 2.
func TestStartupValidationExitsWithUsageCode(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}
	cases := map[string]struct {
		args []string
		env  map[string]string
	}{
		"malformed toml":             {args: []string{"--config", write("bad.toml", "[[mcp.servers]\nname=")}},
		"duplicate mcp names":        {args: []string{"--config", write("dup.toml", "[[mcp.servers]]\nname=\"a\"\ntransport=\"stdio\"\ncommand=\"x\"\n[[mcp.servers]]\nname=\"a\"\ntransport=\"stdio\"\ncommand=\"y\"\n")}},
		"stdio without command":      {args: []string{"--config", write("nocmd.toml", "[[mcp.servers]]\nname=\"a\"\ntransport=\"stdio\"\n")}},
		"http without url":           {args: []string{"--config", write("nourl.toml", "[[mcp.servers]]\nname=\"a\"\ntransport=\"http\"\n")}},
		"bad transport":              {args: []string{"--config", write("tr.toml", "[[mcp.servers]]\nname=\"a\"\ntransport=\"carrier-pigeon\"\ncommand=\"x\"\n")}},
		"bad provider kind":          {args: []string{"--config", write("kind.toml", "[[providers.entries]]\nname=\"p\"\nprovider=\"gemini\"\nmodel=\"m\"\nauth_token=\"t\"\n")}},
		"blank provider name":        {args: []string{"--config", write("blank.toml", "[[providers.entries]]\nname=\"\"\nprovider=\"openai\"\nmodel=\"m\"\nauth_token=\"t\"\n")}},
		"telemetry without endpoint": {args: []string{"--config", write("tel.toml", "[telemetry]\nenabled=true\n")}},
		"sandbox memory too small":   {args: []string{"--config", write("sbmem.toml", "[sandbox]\nmemory_mib=1\n")}},
		"sandbox host network":       {args: []string{"--config", write("sbnet.toml", "[sandbox]\nnetwork=\"host\"\n")}},
		"rotate with auth disabled":  {args: []string{"--rotate-admin-key", "--dangerously-disable-admin-auth"}},
		"non-loopback admin address": {env: map[string]string{"BAE_ADMIN_ADDR": "0.0.0.0:8081"}},
		"bad sandbox driver":         {env: map[string]string{"BAE_SANDBOX_DRIVER": "podman"}},
		"unknown command":            {args: []string{"launch"}},
		"unknown flag":               {args: []string{"--frobnicate"}},
		"unknown flag after command": {args: []string{"migrate", "--frobnicate"}},
		"extra argument":             {args: []string{"serve", "extra"}},
		"flag without value":         {args: []string{"--config"}},
		"missing --config file":      {args: []string{"--config", filepath.Join(dir, "absent.toml")}},
		"missing BAE_CONFIG file":    {env: map[string]string{"BAE_CONFIG": filepath.Join(dir, "absent.toml")}},
		"missing file, flag after":   {args: []string{"dev", "--config", filepath.Join(dir, "absent.toml")}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			var stderr bytes.Buffer
			err := run(context.Background(), c.args, io.Discard, &stderr)
			require.Error(t, err)
			assert.Equal(t, app.ExitUsage, app.ExitCode(err), "%v", err)
		})
	}
}

func TestNoConfigFileIsNotAnError(t *testing.T) {
	t.Setenv("BAE_DATABASE_URL", testdb.New(t))
	t.Setenv("BAE_CONFIG", "")
	var stderr bytes.Buffer
	// migrate exercises option parsing and the database without serving;
	// the flags may come before or after it.
	err := run(context.Background(), []string{"--admin-key-file", "k.pem", "migrate", "--rotate-admin-key"}, io.Discard, &stderr)
	require.NoError(t, err)
	assert.Contains(t, stderr.String(), "migrations applied")
}

func TestMissingConfigFileMessageNamesSource(t *testing.T) {
	p := filepath.Join(t.TempDir(), "absent.toml")
	t.Setenv("BAE_CONFIG", p)
	var stdout, stderr bytes.Buffer
	code := execute(context.Background(), nil, &stdout, &stderr)
	assert.Equal(t, app.ExitUsage, code)
	assert.Equal(t, "baesrv: config file \""+p+"\" does not exist (from BAE_CONFIG)\n", stderr.String())

	stderr.Reset()
	code = execute(context.Background(), []string{"serve", "--config", p}, &stdout, &stderr)
	assert.Equal(t, app.ExitUsage, code)
	assert.Contains(t, stderr.String(), "(from --config)")
	assert.Empty(t, stdout.String())
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		var stdout, stderr bytes.Buffer
		code := execute(context.Background(), args, &stdout, &stderr)
		require.Equal(t, app.ExitOK, code, "%v: %s", args, stderr.String())
		assert.Empty(t, stderr.String(), args)
		for _, want := range []string{"Usage:", "serve", "dev", "migrate", "completion", "--config string", "--rotate-admin-key", "--version"} {
			assert.Contains(t, stdout.String(), want, args)
		}
	}
	var stdout bytes.Buffer
	require.Equal(t, app.ExitOK, execute(context.Background(), []string{"help", "migrate"}, &stdout, io.Discard))
	assert.Contains(t, stdout.String(), "baesrv migrate [flags]")
	assert.Contains(t, stdout.String(), "Global Flags:", "subcommand help shows the shared flags")
}

func TestVersion(t *testing.T) {
	var stdout, stderr bytes.Buffer
	require.Equal(t, app.ExitOK, execute(context.Background(), []string{"--version"}, &stdout, &stderr))
	assert.Regexp(t, `^baesrv \S+ rev \S+ go1\.\S+\n$`, stdout.String())
	assert.Empty(t, stderr.String())
}

// TestUsageErrorPrintedOnce checks that a command-line mistake prints the
// error and the usage exactly once, on stderr.
func TestUsageErrorPrintedOnce(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := execute(context.Background(), []string{"--bogus"}, &stdout, &stderr)
	assert.Equal(t, app.ExitUsage, code)
	assert.Empty(t, stdout.String())
	out := stderr.String()
	assert.True(t, strings.HasPrefix(out, "baesrv: unknown flag: --bogus\n"), out)
	assert.Equal(t, 1, strings.Count(out, "unknown flag"), out)
	assert.Equal(t, 1, strings.Count(out, "Usage:"), out)

	stderr.Reset()
	code = execute(context.Background(), []string{"launch"}, &stdout, &stderr)
	assert.Equal(t, app.ExitUsage, code)
	assert.Contains(t, stderr.String(), `baesrv: unknown command "launch" for "baesrv"`)
	assert.Equal(t, 1, strings.Count(stderr.String(), "Usage:"))
}

func TestCompletion(t *testing.T) {
	var stdout bytes.Buffer
	require.Equal(t, app.ExitOK, execute(context.Background(), []string{"completion", "bash"}, &stdout, io.Discard))
	assert.Contains(t, stdout.String(), "bash completion")
}

// BAE_LOG_FORMAT=json makes every log line one JSON object.
func TestJSONLogFormat(t *testing.T) {
	t.Setenv("BAE_DATABASE_URL", testdb.New(t))
	t.Setenv("BAE_CONFIG", "")
	for _, format := range []string{"json", " JSON "} {
		t.Setenv("BAE_LOG_FORMAT", format)
		var stderr bytes.Buffer
		require.NoError(t, run(context.Background(), []string{"migrate"}, io.Discard, &stderr))
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		require.NotEmpty(t, lines)
		for _, l := range lines {
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(l), &m), l)
			assert.Equal(t, "INFO", m["level"])
			assert.Equal(t, "migrations applied", m["msg"])
		}
	}
	t.Setenv("BAE_LOG_FORMAT", "")
	var stderr bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"migrate"}, io.Discard, &stderr))
	assert.Contains(t, stderr.String(), `level=INFO msg="migrations applied"`, "text by default")
}

// TestBadSettingTouchesNothing checks that configuration read from files
// the settings name is checked before baesrv creates or migrates its
// database or writes a key: exit 2, and the database and the data
// directory are as they were.
func TestBadSettingTouchesNothing(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty-password")
	require.NoError(t, os.WriteFile(empty, nil, 0o600))
	cases := map[string]map[string]string{
		"compression":          {"BAE_TEMPORAL_COMPRESSION": "brotli"},
		"cert without key":     {"BAE_TEMPORAL_TLS_CERT": filepath.Join(dir, "client.pem")},
		"missing CA file":      {"BAE_TEMPORAL_TLS_CA": filepath.Join(dir, "absent-ca.pem")},
		"missing client cert":  {"BAE_TEMPORAL_TLS_CERT": filepath.Join(dir, "c.pem"), "BAE_TEMPORAL_TLS_KEY": filepath.Join(dir, "k.pem")},
		"missing console cert": {"BAE_CONSOLE_ADDR": "127.0.0.1:0", "BAE_CONSOLE_TLS_CERT": filepath.Join(dir, "c.pem"), "BAE_CONSOLE_TLS_KEY": filepath.Join(dir, "k.pem")},
		"empty password file":  {"BAE_CONSOLE_ADDR": "127.0.0.1:0", "BAE_CONSOLE_PASSWORD_FILE": empty},
	}
	ctx := context.Background()
	for name, env := range cases {
		t.Run(name, func(t *testing.T) {
			base, err := url.Parse(testdb.BaseDatabaseURL())
			require.NoError(t, err)
			db := "bae_never_" + ids.New("")[:12]
			u := *base
			u.Path = "/" + db
			conn, err := pgx.Connect(ctx, base.String())
			require.NoError(t, err)
			defer conn.Close(ctx)
			t.Cleanup(func() { _, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)") })

			data := t.TempDir()
			t.Setenv("BAE_DATABASE_URL", u.String())
			t.Setenv("BAE_DATA_DIR", data)
			t.Setenv("BAE_CONFIG", "")
			for k, v := range env {
				t.Setenv(k, v)
			}
			err = run(ctx, []string{"serve"}, io.Discard, io.Discard)
			require.Error(t, err)
			assert.Equal(t, app.ExitUsage, app.ExitCode(err), "%v", err)

			var n int
			require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = $1", db).Scan(&n))
			assert.Zero(t, n, "the database was created")
			entries, err := os.ReadDir(data)
			require.NoError(t, err)
			assert.Empty(t, entries, "the data directory was written to")
		})
	}
}

// `baesrv import` needs --from; a source it cannot read is a runtime
// failure naming the file, and the target is left as it was.
func TestImportCommandErrors(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := execute(context.Background(), []string{"import"}, &stdout, &stderr)
	assert.Equal(t, app.ExitUsage, code)
	assert.Contains(t, stderr.String(), "--from <path to BAE's database> is required")

	t.Setenv("BAE_DATABASE_URL", testdb.New(t))
	missing := filepath.Join(t.TempDir(), "bae.db")
	stderr.Reset()
	code = execute(context.Background(), []string{"import", "--from", missing, "--dry-run"}, &stdout, &stderr)
	assert.Equal(t, app.ExitError, code)
	assert.Contains(t, stderr.String(), "baesrv: import "+missing+": BAE database: stat "+missing+": no such file or directory")

	notDB := filepath.Join(t.TempDir(), "notes.txt")
	require.NoError(t, os.WriteFile(notDB, bytes.Repeat([]byte("not a database "), 100), 0o600))
	stderr.Reset()
	code = execute(context.Background(), []string{"import", "--from", notDB}, &stdout, &stderr)
	assert.Equal(t, app.ExitError, code)
	assert.Contains(t, stderr.String(), "is not a readable SQLite database")
	assert.Empty(t, stdout.String())
}

// BAE_LOG takes BAE's tracing filter strings: the default level, the
// baesrv target's level, other targets ignored with a note.
func TestLogFilterStrings(t *testing.T) {
	logs := func(filter string) string {
		t.Setenv("BAE_LOG", filter)
		t.Setenv("BAE_LOG_FORMAT", "")
		var stderr bytes.Buffer
		l := newLogger(&stderr)
		l.Debug("d-line")
		l.Info("i-line")
		l.Warn("w-line")
		return stderr.String()
	}
	out := logs("info,baesrv=debug")
	assert.Contains(t, out, "d-line")
	assert.NotContains(t, out, "ignored")
	out = logs("debug,baesrv=warn")
	assert.NotContains(t, out, "i-line")
	assert.Contains(t, out, "w-line")
	out = logs("warn")
	assert.NotContains(t, out, "i-line")
	out = logs("")
	assert.Contains(t, out, "i-line")
	assert.NotContains(t, out, "d-line")
	out = logs("info,tower=warn,hyper=trace")
	assert.Contains(t, out, `msg="BAE_LOG directives ignored: they name no part of this server" ignored="tower=warn,hyper=trace"`)
	assert.Contains(t, out, "i-line")
	assert.NotContains(t, out, "d-line")
}

// The report lists the file's client keys under their profiles, and the
// cap on imported payloads is the server's BAE_MAX_BODY_BYTES.
func TestImportCommandReport(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bae.db")
	db, err := sql.Open("sqlite", "file:"+path)
	require.NoError(t, err)
	h, err := keyhash.Argon2id{Params: keyhash.TestParams}.Hash("bae_" + strings.Repeat("a", 48))
	require.NoError(t, err)
	for _, stmt := range []string{
		`CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TEXT)`,
		`INSERT INTO schema_version VALUES (8, '2026-07-06T18:26:01.000Z')`,
		`CREATE TABLE profiles (id TEXT PRIMARY KEY, name TEXT, provider_config TEXT, fallback_configs TEXT, mcp_servers TEXT,
			allowed_tools TEXT, created_at TEXT, updated_at TEXT, deleted_at TEXT, available_sandboxes TEXT)`,
		`CREATE TABLE keys (id TEXT PRIMARY KEY, name TEXT, key_hash TEXT, key_prefix TEXT, role TEXT, profile_id TEXT, client_id TEXT,
			created_at TEXT, last_used_at TEXT, deleted_at TEXT)`,
		`CREATE TABLE sessions (id TEXT PRIMARY KEY, client_key_id TEXT, profile_id TEXT, state TEXT, client_version TEXT, client_tools TEXT,
			created_at TEXT, closed_at TEXT, sandbox_tools TEXT, subagent_tools TEXT)`,
		`CREATE TABLE session_events (id TEXT PRIMARY KEY, session_id TEXT, client_key_id TEXT, event_type TEXT, payload TEXT, created_at TEXT)`,
		`INSERT INTO profiles (id, name, provider_config, created_at) VALUES ('prf_main', 'main', '"main"', '2026-07-06T18:26:01.000Z')`,
		`INSERT INTO keys VALUES ('key_ci', 'ci', '` + h + `', 'bae_aaaa', 'client', 'prf_main', NULL, '2026-07-06T18:26:01.000Z', NULL, NULL)`,
		`INSERT INTO keys VALUES ('key_gone', 'gone', '` + h + `', 'bae_aaaa', 'client', 'prf_main', NULL, '2026-07-06T18:26:01.000Z', NULL, '2026-07-06T18:27:01.000Z')`,
		`INSERT INTO sessions (id, client_key_id, profile_id, state, created_at, closed_at) VALUES ('ses_1', 'key_ci', 'prf_main', 'closed', '2026-07-06T18:26:01.000Z', '2026-07-06T18:26:02.000Z')`,
		`INSERT INTO session_events VALUES ('evt_1', 'ses_1', 'key_ci', 'session.close', '{"reason":"` + strings.Repeat("x", 2000) + `"}', '2026-07-06T18:26:02.000Z')`,
	} {
		_, err := db.Exec(stmt)
		require.NoError(t, err, stmt)
	}
	require.NoError(t, db.Close())
	t.Setenv("BAE_DATABASE_URL", testdb.New(t))

	var stdout, stderr bytes.Buffer
	code := execute(context.Background(), []string{"import", "--from", path, "--dry-run"}, &stdout, &stderr)
	require.Equal(t, app.ExitOK, code, stderr.String())
	assert.Contains(t, stdout.String(), "profile prf_main \"main\": 2 client key(s)\n  key_ci  bae_aaaa…  \"ci\"\n  key_gone  bae_aaaa…  \"gone\" (revoked)\n")

	t.Setenv("BAE_MAX_BODY_BYTES", "1000")
	stdout.Reset()
	stderr.Reset()
	code = execute(context.Background(), []string{"import", "--from", path}, &stdout, &stderr)
	assert.Equal(t, app.ExitError, code)
	assert.Contains(t, stderr.String(), "event evt_1 of session ses_1: payload is 2013 bytes, above the 1000 a live request may carry")
	assert.Empty(t, stdout.String())
}
