package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/app"
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
