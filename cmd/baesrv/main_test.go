package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/app"
	"github.com/bae-go/bae-go/internal/testdb"
)

func TestSplitCommand(t *testing.T) {
	cmd, rest := splitCommand([]string{"--config", "x.toml", "dev", "--rotate-admin-key"})
	assert.Equal(t, "dev", cmd)
	assert.Equal(t, []string{"--config", "x.toml", "--rotate-admin-key"}, rest)
	cmd, rest = splitCommand([]string{"--config=x.toml"})
	assert.Equal(t, "serve", cmd)
	assert.Equal(t, []string{"--config=x.toml"}, rest)
	cmd, _ = splitCommand([]string{"migrate", "--config", "y"})
	assert.Equal(t, "migrate", cmd)
}

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
		"rotate with auth disabled":  {args: []string{"--rotate-admin-key", "--dangerously-disable-admin-auth"}},
		"non-loopback admin address": {env: map[string]string{"BAE_ADMIN_ADDR": "0.0.0.0:8081"}},
		"bad sandbox driver":         {env: map[string]string{"BAE_SANDBOX_DRIVER": "podman"}},
		"unknown command":            {args: []string{"launch"}},
		"unknown flag":               {args: []string{"--frobnicate"}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			var stderr bytes.Buffer
			err := run(context.Background(), c.args, &stderr)
			require.Error(t, err)
			assert.Equal(t, app.ExitUsage, app.ExitCode(err), "%v", err)
		})
	}
}

func TestMissingConfigFileIsNotAnError(t *testing.T) {
	t.Setenv("BAE_DATABASE_URL", testdb.New(t))
	var stderr bytes.Buffer
	// migrate exercises option parsing and the database without serving.
	err := run(context.Background(), []string{"--config", filepath.Join(t.TempDir(), "absent.toml"), "migrate"}, &stderr)
	require.NoError(t, err)
	assert.Contains(t, stderr.String(), "migrations applied")
}
