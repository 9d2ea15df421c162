package baectl

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/bae-go/bae-go/internal/config"
)

// runSetup runs `baectl setup` with scripted stdin and env.
func runSetup(t *testing.T, stdin string, env map[string]string, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	code := RunWithInput(context.Background(), append([]string{"setup"}, args...), strings.NewReader(stdin), &out, &errOut,
		func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

// composeDoc is the part of docker-compose.yml the tests look at.
type composeDoc struct {
	Services map[string]struct {
		Image       string            `yaml:"image"`
		Build       string            `yaml:"build"`
		Entrypoint  []string          `yaml:"entrypoint"`
		Environment map[string]string `yaml:"environment"`
		Ports       []string          `yaml:"ports"`
		Volumes     []string          `yaml:"volumes"`
	} `yaml:"services"`
	Volumes map[string]any `yaml:"volumes"`
}

// checkConfig validates a generated bae-config.toml the way baesrv does.
func checkConfig(t *testing.T, dir string) *config.File {
	t.Helper()
	f, err := config.LoadFileWithEnv(filepath.Join(dir, "bae-config.toml"), func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	return f
}

// TestSetupEnterThroughout: pressing Enter at every question writes a
// compose deployment with the offline fake provider and the example MCP
// server (TestSetupComposeConfig runs it through docker compose).
func TestSetupEnterThroughout(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "deploy")
	r := runSetup(t, strings.Repeat("\n", 30), nil, "--dir", dir)
	require.Equal(t, ExitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "Deployment: docker compose")
	assert.Contains(t, r.stdout, "docker compose up -d --build")
	assert.Contains(t, r.stdout, "docker compose exec baesrv baectl quickstart --provider fake")

	f := checkConfig(t, dir)
	require.Len(t, f.Providers.Entries, 1)
	assert.Equal(t, "fake", f.Providers.Entries[0].Name)
	assert.Equal(t, "http://fakeprovider:9999", f.Providers.Entries[0].BaseURL)
	require.Len(t, f.MCP.Servers, 1)
	assert.Equal(t, "words", f.MCP.Servers[0].Name)
	assert.Equal(t, "mcp-words", f.MCP.Servers[0].Command)

	st, err := os.Stat(filepath.Join(dir, ".env"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	env := readFile(t, filepath.Join(dir, ".env"))
	assert.Regexp(t, `(?m)^POSTGRES_PASSWORD=[0-9a-f]{32}$`, env)

	var doc composeDoc
	require.NoError(t, yaml.Unmarshal([]byte(readFile(t, filepath.Join(dir, "docker-compose.yml"))), &doc))
	for _, svc := range []string{"postgres", "temporal", "temporal-ui", "fakeprovider", "baesrv"} {
		assert.Contains(t, doc.Services, svc)
	}
	srv := doc.Services["baesrv"]
	repo := findRepo()
	require.NotEmpty(t, repo, "tests run inside the checkout")
	assert.Equal(t, repo, filepath.Join(dir, srv.Build), "the build context is the checkout")
	assert.Equal(t, []string{"127.0.0.1:${BAE_CLIENT_PORT:-8080}:8080"}, srv.Ports, "loopback unless --public")
	assert.Equal(t, "/etc/bae/bae-config.toml", srv.Environment["BAE_CONFIG"])
	assert.Contains(t, srv.Volumes, "./bae-config.toml:/etc/bae/bae-config.toml:ro")
	for _, p := range doc.Services["temporal-ui"].Ports {
		assert.True(t, strings.HasPrefix(p, "127.0.0.1:"), "the Temporal UI has no login: loopback only")
	}
	assert.Equal(t, []string{"fakeprovider", "-addr", "0.0.0.0:9999"}, doc.Services["fakeprovider"].Entrypoint)

}

// TestSetupScriptedAnswers answers every question: a dev deployment with a
// real provider whose key comes from the typed answer, a fallback, and a
// custom MCP server.
func TestSetupScriptedAnswers(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "My Deploy")
	answers := strings.Join([]string{
		"dev",             // mode
		"anthropic",       // kind
		"",                // name: anthropic-sonnet
		"claude-test",     // model
		"",                // env var: ANTHROPIC_API_KEY
		"y",               // another provider
		"bogus", "openai", // kind: re-asked after a bad answer
		"anthropic-sonnet", "", // name: taken, then Enter takes openai-gpt
		"",                // model
		"",                // env var OPENAI_API_KEY
		"n",               // no more providers
		"sk-typed-secret", // ANTHROPIC_API_KEY value (not in env)
		"n",               // do not copy OPENAI_API_KEY from the environment
		"n",               // no words server
		"y",               // another MCP server
		"custom",          // not a preset
		"files", "stdio", "npx", "-y @modelcontextprotocol/server-filesystem /tmp",
		"n",             // no more
		"99999", "9090", // client port: re-asked
		"",      // UI port
		"debug", // log level
		"n",     // do not launch
	}, "\n") + "\n"
	r := runSetup(t, answers, map[string]string{"OPENAI_API_KEY": "sk-from-env"}, "--dir", dir)
	require.Equal(t, ExitOK, r.code, r.stdout+r.stderr)
	assert.Contains(t, r.stdout, "please answer one of: fake, anthropic, openai")
	assert.Contains(t, r.stdout, `"anthropic-sonnet" is already used`)
	assert.Contains(t, r.stdout, "please answer a port number")
	assert.Contains(t, r.stdout, "Still needed: OPENAI_API_KEY")

	f := checkConfig(t, dir)
	require.Len(t, f.Providers.Entries, 2)
	assert.Equal(t, "anthropic-sonnet", f.Providers.Entries[0].Name)
	assert.Equal(t, "claude-test", f.Providers.Entries[0].Model)
	assert.Equal(t, "${ANTHROPIC_API_KEY}", f.Providers.Entries[0].AuthToken)
	assert.Equal(t, "openai-gpt", f.Providers.Entries[1].Name)
	require.Len(t, f.MCP.Servers, 1)
	assert.Equal(t, []string{"-y", "@modelcontextprotocol/server-filesystem", "/tmp"}, f.MCP.Servers[0].Args)

	env := readFile(t, filepath.Join(dir, ".env"))
	assert.Contains(t, env, "ANTHROPIC_API_KEY=sk-typed-secret\n")
	assert.NotContains(t, env, "sk-from-env", "declined: the shell's key stays out of the file")
	assert.Contains(t, env, "BAE_CLIENT_PORT=9090\n")
	assert.Contains(t, env, "BAE_LOG=debug\n")
	assert.Contains(t, env, "BAE_DATABASE_URL=postgres://postgres@127.0.0.1:5432/bae_my_deploy?sslmode=disable\n")
	assert.NotContains(t, env, "POSTGRES_PASSWORD", "dev mode uses the local PostgreSQL")

	script := filepath.Join(dir, devScript)
	st, err := os.Stat(script)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o755), st.Mode().Perm())
	out, err := exec.Command("bash", "-n", script).CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Contains(t, readFile(t, script), `"$repo/bin/baesrv" dev`)
	assert.NoFileExists(t, filepath.Join(dir, composeFile))
}

// TestSetupNonInteractive: flags answer, --yes asks nothing, and an
// existing deployment is never overwritten without --force.
func TestSetupNonInteractive(t *testing.T) {
	dir := t.TempDir()
	args := []string{"--dir", dir, "--yes", "--provider", "openai", "--model", "gpt-test", "--mcp-words=false", "--public", "--client-port", "8181"}
	r := runSetup(t, "", nil, args...)
	require.Equal(t, ExitOK, r.code, r.stderr)
	assert.NotContains(t, r.stdout, "[compose]", "--yes prints no questions")

	f := checkConfig(t, dir)
	require.Len(t, f.Providers.Entries, 1)
	assert.Equal(t, "openai-gpt", f.Providers.Entries[0].Name)
	assert.Equal(t, "gpt-test", f.Providers.Entries[0].Model)
	assert.Empty(t, f.MCP.Servers)

	compose := readFile(t, filepath.Join(dir, composeFile))
	var doc composeDoc
	require.NoError(t, yaml.Unmarshal([]byte(compose), &doc))
	assert.NotContains(t, doc.Services, "fakeprovider")
	srv := doc.Services["baesrv"]
	assert.Equal(t, []string{"${BAE_CLIENT_PORT:-8181}:8080"}, srv.Ports)
	// A missing key stops compose; it never reaches the server empty.
	assert.Equal(t, "${OPENAI_API_KEY:?OPENAI_API_KEY is not set: add it to .env or export it}", srv.Environment["OPENAI_API_KEY"])
	assert.Contains(t, r.stdout, "Still needed: OPENAI_API_KEY")

	before := readFile(t, filepath.Join(dir, ".env"))
	r = runSetup(t, "", nil, args...)
	assert.Equal(t, ExitRuntime, r.code)
	assert.Contains(t, r.stderr, "already holds a deployment; rerun with --force")
	assert.Equal(t, before, readFile(t, filepath.Join(dir, ".env")), "nothing was touched")

	r = runSetup(t, "", nil, append(args, "--force")...)
	require.Equal(t, ExitOK, r.code, r.stderr)
	assert.Equal(t, before, readFile(t, filepath.Join(dir, ".env.bak")))

}

func TestSetupUsageErrors(t *testing.T) {
	for name, args := range map[string][]string{
		"bad mode":     {"--mode", "k8s"},
		"bad provider": {"--provider", "gemini"},
		"bad port":     {"--client-port", "0"},
		"same ports":   {"--client-port", "9000", "--ui-port", "9000"},
		"bad level":    {"--log-level", "loud"},
		"bad env var":  {"--provider", "anthropic", "--api-key-env", "lower-case"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			r := runSetup(t, "", nil, append(args, "--dir", dir, "--yes")...)
			assert.Equal(t, ExitUsage, r.code, r.stderr)
			assert.True(t, strings.HasPrefix(r.stderr, "baectl: "), r.stderr)
			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			assert.Empty(t, entries, "nothing is written")
		})
	}
}

// TestRepositoryComposeFile parses the repository's two compose files: a
// provider key must be required (${VAR:?…}) or passed through only when
// set, never defaulted to an empty string; the Temporal UI stays on
// loopback.
func TestRepositoryComposeFile(t *testing.T) {
	repo := findRepo()
	require.NotEmpty(t, repo)
	for _, name := range []string{"docker-compose.yml", "docker-compose.production.yml"} {
		var doc struct {
			Services map[string]struct {
				Environment map[string]*string `yaml:"environment"`
				Ports       []string           `yaml:"ports"`
			} `yaml:"services"`
		}
		require.NoError(t, yaml.Unmarshal([]byte(readFile(t, filepath.Join(repo, name))), &doc), name)
		// The Temporal Web UI has no login: loopback only, and write
		// actions off where the UI has the switch (the UI image; the dev
		// server's own UI has none).
		uiService := "temporal-ui"
		if name == "docker-compose.yml" {
			uiService = "temporal"
		}
		ui := doc.Services[uiService]
		require.NotEmpty(t, ui.Ports, name)
		for _, p := range ui.Ports {
			assert.True(t, strings.HasPrefix(p, "127.0.0.1:"), "%s: %s", name, p)
		}
		if uiService == "temporal-ui" {
			require.NotNil(t, ui.Environment["TEMPORAL_DISABLE_WRITE_ACTIONS"], name)
			assert.Equal(t, "${TEMPORAL_DISABLE_WRITE_ACTIONS:-true}", *ui.Environment["TEMPORAL_DISABLE_WRITE_ACTIONS"], name)
		}
		env := doc.Services["baesrv"].Environment
		require.Contains(t, env, "ANTHROPIC_API_KEY", name)
		require.NotNil(t, env["ANTHROPIC_API_KEY"], name)
		assert.True(t, strings.HasPrefix(*env["ANTHROPIC_API_KEY"], "${ANTHROPIC_API_KEY:?"), *env["ANTHROPIC_API_KEY"])
		require.Contains(t, env, "OPENAI_API_KEY", name)
		assert.Nil(t, env["OPENAI_API_KEY"], "%s: no value: passed through from the shell only when set", name)
	}
}

// TestSetupMCPPresets: BAE's presets (filesystem, fetch, github) asked
// for and given as flags; github's token is collected like a provider's
// key and passed to baesrv by the compose file.
func TestSetupMCPPresets(t *testing.T) {
	dir := t.TempDir()
	answers := strings.Join([]string{
		"n",                   // no fallback provider
		"y", "github", "", "", // preset, name github, token variable GITHUB_TOKEN
		"n", // do not copy GITHUB_TOKEN from the shell
		"y", "filesystem", "", "/srv/files",
		"y", "fetch", "fetch-2", // name: fetch is taken by the flag
		"n",
	}, "\n") + "\n"
	args := []string{"--dir", dir, "--mode", "compose", "--provider", "fake", "--mcp-words=false", "--mcp-preset", "fetch",
		"--client-port", "8080", "--ui-port", "8233", "--log-level", "info", "--launch=false"}
	r := runSetup(t, answers, map[string]string{"GITHUB_TOKEN": "ghp_from_env"}, args...)
	require.Equal(t, ExitOK, r.code, r.stdout+r.stderr)
	assert.Contains(t, r.stdout, "Which MCP server: filesystem (npx), fetch (uvx), github")
	assert.Contains(t, r.stdout, "Still needed: GITHUB_TOKEN")

	f := checkConfig(t, dir)
	byName := map[string]config.MCPServer{}
	var names []string
	for _, m := range f.MCP.Servers {
		byName[m.Name] = m
		names = append(names, m.Name)
	}
	assert.Equal(t, []string{"fetch", "github", "filesystem", "fetch-2"}, names)
	assert.Equal(t, "uvx", byName["fetch"].Command)
	assert.Equal(t, []string{"mcp-server-fetch"}, byName["fetch"].Args)
	assert.Equal(t, "http", byName["github"].Transport)
	assert.Equal(t, "https://api.githubcopilot.com/mcp/", byName["github"].URL)
	assert.Equal(t, map[string]string{"Authorization": "Bearer ${GITHUB_TOKEN}"}, byName["github"].Headers)
	assert.Equal(t, []string{"-y", "@modelcontextprotocol/server-filesystem", "/srv/files"}, byName["filesystem"].Args)
	compose := readFile(t, filepath.Join(dir, composeFile))
	assert.Contains(t, compose, `GITHUB_TOKEN: "${GITHUB_TOKEN:?GITHUB_TOKEN is not set: add it to .env or export it}"`)
	assert.NotContains(t, readFile(t, filepath.Join(dir, ".env")), "ghp_from_env")

	r = runSetup(t, "", nil, "--dir", t.TempDir(), "--yes", "--mcp-preset", "gopher")
	assert.Equal(t, ExitUsage, r.code)
	assert.Contains(t, r.stderr, "--mcp-preset must be one of filesystem, fetch, github")
}
