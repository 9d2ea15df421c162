package baectl

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/config"
)

// requireCompose skips without Docker Compose v2; scripts/test-deps.sh
// installs it, and `make test` fails on the skip.
func requireCompose(t *testing.T) {
	t.Helper()
	if out, err := exec.Command("docker", "compose", "version").CombinedOutput(); err != nil {
		t.Skipf("docker compose (v2) is not installed: run scripts/test-deps.sh (%v: %s)", err, strings.TrimSpace(string(out)))
	}
}

// composeEnv is the process environment without the variables a generated
// deployment reads, so each case sees only its own .env and extra.
func composeEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasSuffix(k, "_API_KEY") || strings.HasPrefix(k, "BAE_") || strings.HasPrefix(k, "POSTGRES_") || strings.HasPrefix(k, "COMPOSE_") || strings.HasPrefix(k, "TEMPORAL_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// composeConfig runs `docker compose -f file config` (-q, or the resolved
// model as JSON) and returns its combined output.
func composeConfig(t *testing.T, file string, jsonOut bool, env []string) (string, error) {
	t.Helper()
	args := []string{"compose", "-f", file, "config", "-q"}
	if jsonOut {
		args = []string{"compose", "-f", file, "config", "--format", "json"}
	}
	cmd := exec.Command("docker", args...)
	cmd.Env = env
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// resolved is the part of `docker compose config --format json` checked.
type resolved struct {
	Services map[string]struct {
		Image       string `json:"image"`
		Healthcheck *struct {
			Test []string `json:"test"`
		} `json:"healthcheck"`
		Build *struct {
			Context string `json:"context"`
		} `json:"build"`
		Environment map[string]*string `json:"environment"`
		Ports       []struct {
			HostIP    string `json:"host_ip"`
			Target    int    `json:"target"`
			Published string `json:"published"`
		} `json:"ports"`
		Volumes []struct {
			Type     string `json:"type"`
			Source   string `json:"source"`
			Target   string `json:"target"`
			ReadOnly bool   `json:"read_only"`
		} `json:"volumes"`
	} `json:"services"`
}

// TestSetupComposeConfig runs every kind of generated compose deployment,
// and the repository's own docker-compose.yml, through Docker Compose v2's
// `config`, and checks the model it resolves: ports, the mounted config,
// the build context, and that a missing provider key stops compose.
func TestSetupComposeConfig(t *testing.T) {
	requireCompose(t)
	repo := findRepo()
	require.NotEmpty(t, repo)

	t.Run("enter throughout", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "deploy")
		r := runSetup(t, strings.Repeat("\n", 30), nil, "--dir", dir)
		require.Equal(t, ExitOK, r.code, r.stderr)
		file := filepath.Join(dir, composeFile)
		out, err := composeConfig(t, file, false, composeEnv())
		require.NoError(t, err, out)
		assert.Empty(t, out, "no warnings")

		out, err = composeConfig(t, file, true, composeEnv())
		require.NoError(t, err, out)
		var m resolved
		require.NoError(t, json.Unmarshal([]byte(out), &m), out)
		srv := m.Services["baesrv"]
		require.NotNil(t, srv.Build)
		assert.Equal(t, repo, srv.Build.Context)
		require.Len(t, srv.Ports, 1)
		assert.Equal(t, "127.0.0.1", srv.Ports[0].HostIP)
		assert.Equal(t, "8080", srv.Ports[0].Published)
		assert.Equal(t, 8080, srv.Ports[0].Target)
		var mounted bool
		for _, v := range srv.Volumes {
			if v.Target == "/etc/bae/bae-config.toml" {
				mounted = true
				assert.Equal(t, filepath.Join(dir, "bae-config.toml"), v.Source)
				assert.True(t, v.ReadOnly)
			}
		}
		assert.True(t, mounted, "bae-config.toml is mounted")
		env := readFile(t, filepath.Join(dir, ".env"))
		pw := strings.TrimPrefix(strings.SplitN(env[strings.Index(env, "POSTGRES_PASSWORD="):], "\n", 2)[0], "POSTGRES_PASSWORD=")
		require.NotNil(t, srv.Environment["BAE_DATABASE_URL"])
		assert.Equal(t, "postgres://bae:"+pw+"@postgres:5432/bae?sslmode=disable", *srv.Environment["BAE_DATABASE_URL"], "the password comes from .env")
		fake := m.Services["fakeprovider"]
		require.NotNil(t, fake.Healthcheck, "not the image's check of baesrv's port")
		assert.Contains(t, strings.Join(fake.Healthcheck.Test, " "), "127.0.0.1:9999")
		checkTemporalUI(t, m, "8233")
	})

	t.Run("real providers, an image, public", func(t *testing.T) {
		dir := t.TempDir()
		r := runSetup(t, "", nil, "--dir", dir, "--yes", "--provider", "openai", "--image", "registry.example/bae-go:1.2",
			"--public", "--client-port", "8181", "--ui-port", "8234", "--mcp-words=false")
		require.Equal(t, ExitOK, r.code, r.stderr)
		file := filepath.Join(dir, composeFile)

		// A missing key stops compose, naming the variable.
		out, err := composeConfig(t, file, false, composeEnv())
		require.Error(t, err)
		assert.Contains(t, out, "OPENAI_API_KEY is not set: add it to .env or export it")

		out, err = composeConfig(t, file, true, composeEnv("OPENAI_API_KEY=sk-test"))
		require.NoError(t, err, out)
		var m resolved
		require.NoError(t, json.Unmarshal([]byte(out), &m), out)
		srv := m.Services["baesrv"]
		assert.Equal(t, "registry.example/bae-go:1.2", srv.Image)
		assert.Nil(t, srv.Build, "an image is run, not built")
		require.Len(t, srv.Ports, 1)
		assert.Empty(t, srv.Ports[0].HostIP, "--public: every interface")
		assert.Equal(t, "8181", srv.Ports[0].Published)
		require.NotNil(t, srv.Environment["OPENAI_API_KEY"])
		assert.Equal(t, "sk-test", *srv.Environment["OPENAI_API_KEY"])
		assert.NotContains(t, m.Services, "fakeprovider")
		checkTemporalUI(t, m, "8234")
	})

	t.Run("a key written into .env", func(t *testing.T) {
		dir := t.TempDir()
		r := runSetup(t, "", map[string]string{"ANTHROPIC_API_KEY": "sk-from-shell"}, "--dir", dir, "--yes", "--provider", "anthropic")
		require.Equal(t, ExitOK, r.code, r.stderr)
		out, err := composeConfig(t, filepath.Join(dir, composeFile), true, composeEnv())
		require.NoError(t, err, out)
		var m resolved
		require.NoError(t, json.Unmarshal([]byte(out), &m), out)
		require.NotNil(t, m.Services["baesrv"].Environment["ANTHROPIC_API_KEY"])
		assert.Equal(t, "sk-from-shell", *m.Services["baesrv"].Environment["ANTHROPIC_API_KEY"])
	})

	// Both shapes: docker-compose.yml (the Temporal dev server, whose UI
	// is its own) and docker-compose.production.yml (the server, and the
	// UI image beside it). tests/compose checks the rest of them.
	for _, name := range []string{"docker-compose.yml", "docker-compose.production.yml"} {
		t.Run("the repository's "+name, func(t *testing.T) {
			file := filepath.Join(repo, name)
			out, err := composeConfig(t, file, false, composeEnv())
			require.Error(t, err, "ANTHROPIC_API_KEY is required")
			assert.Contains(t, out, "ANTHROPIC_API_KEY is not set")

			out, err = composeConfig(t, file, true, composeEnv("ANTHROPIC_API_KEY=sk-test"))
			require.NoError(t, err, out)
			var m resolved
			require.NoError(t, json.Unmarshal([]byte(out), &m), out)
			srv := m.Services["baesrv"]
			require.Contains(t, srv.Environment, "OPENAI_API_KEY")
			assert.Nil(t, srv.Environment["OPENAI_API_KEY"], "unset in the shell: no value (not passed), never an empty key")
			require.NotNil(t, srv.Build)
			assert.Equal(t, repo, srv.Build.Context)
			for _, v := range srv.Volumes {
				if v.Target == "/etc/bae/bae-config.toml" {
					assert.FileExists(t, v.Source)
				}
			}
			if name == "docker-compose.yml" {
				for _, p := range m.Services["temporal"].Ports {
					assert.Equal(t, "127.0.0.1", p.HostIP, "the dev server's UI is on loopback only")
				}
				return
			}
			checkTemporalUI(t, m, "8233")

			// Write actions come back only when asked for.
			out, err = composeConfig(t, file, true, composeEnv("ANTHROPIC_API_KEY=sk-test", "TEMPORAL_DISABLE_WRITE_ACTIONS=false"))
			require.NoError(t, err, out)
			require.NoError(t, json.Unmarshal([]byte(out), &m), out)
			require.NotNil(t, m.Services["temporal-ui"].Environment["TEMPORAL_DISABLE_WRITE_ACTIONS"])
			assert.Equal(t, "false", *m.Services["temporal-ui"].Environment["TEMPORAL_DISABLE_WRITE_ACTIONS"])
		})
	}
}

// checkTemporalUI: the Temporal Web UI has no login, so it is published on
// loopback only and read-only unless the shell says otherwise.
func checkTemporalUI(t *testing.T, m resolved, port string) {
	t.Helper()
	ui := m.Services["temporal-ui"]
	require.NotEmpty(t, ui.Ports)
	for _, p := range ui.Ports {
		assert.Equal(t, "127.0.0.1", p.HostIP)
		assert.Equal(t, port, p.Published)
	}
	require.NotNil(t, ui.Environment["TEMPORAL_DISABLE_WRITE_ACTIONS"])
	assert.Equal(t, "true", *ui.Environment["TEMPORAL_DISABLE_WRITE_ACTIONS"])
}

// stubRepo is a bae-go checkout stand-in for bae-dev.sh: its bin/baesrv
// records the environment and arguments it was started with instead of
// serving, the other programs do nothing.
func stubRepo(t *testing.T) (repo, record string) {
	t.Helper()
	repo = t.TempDir()
	record = filepath.Join(t.TempDir(), "record")
	for path, body := range map[string]string{
		"bin/baesrv":       fmt.Sprintf("#!/bin/sh\nenv > %q.env\necho \"$PWD\" > %q.pwd\necho \"$@\" > %q.args\n", record, record, record),
		"bin/baectl":       "#!/bin/sh\n",
		"bin/fakeprovider": fmt.Sprintf("#!/bin/sh\necho \"$@\" > %q.fake\n", record),
		"scripts/pg-up.sh": fmt.Sprintf("#!/bin/sh\ntouch %q.pg\n", record),
		"bin/mcp-words":    "#!/bin/sh\n",
	} {
		full := filepath.Join(repo, path)
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(t, os.WriteFile(full, []byte(body), 0o755))
	}
	return repo, record
}

// readEnvDump parses `env` output into a lookup function.
func readEnvDump(t *testing.T, path string) func(string) (string, bool) {
	t.Helper()
	m := map[string]string{}
	for _, line := range strings.Split(readFile(t, path), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			m[k] = v
		}
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// TestSetupDevModeRuns runs a generated dev deployment's bae-dev.sh (with a
// stand-in checkout whose baesrv records how it was started) and loads what
// `baesrv dev` would see through internal/config: the server settings from
// the environment and the written bae-config.toml, with the key from .env.
func TestSetupDevModeRuns(t *testing.T) {
	repo, record := stubRepo(t)
	dir := filepath.Join(t.TempDir(), "dev deploy")
	r := runSetup(t, "", map[string]string{"ANTHROPIC_API_KEY": "sk-ant-test"}, "--dir", dir, "--yes", "--mode", "dev",
		"--repo", repo, "--client-port", "18080", "--ui-port", "18233", "--log-level", "debug")
	require.Equal(t, ExitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "quickstart --provider fake --client-url http://127.0.0.1:18080")

	cmd := exec.Command(filepath.Join(dir, devScript), "--extra-flag")
	cmd.Env = composeEnv()
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	assert.FileExists(t, record+".pg", "the local PostgreSQL is started")
	assert.Equal(t, "dev --extra-flag\n", readFile(t, record+".args"))
	assert.Equal(t, dir+"\n", readFile(t, record+".pwd"))

	lookup := readEnvDump(t, record+".env")
	srv, err := config.ServerFromEnv(lookup)
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:18080", srv.Addr)
	assert.Equal(t, 18233, srv.TemporalUIPort)
	assert.Equal(t, filepath.Join(dir, "bae-data"), srv.DataDir)
	assert.Equal(t, filepath.Join(dir, "bae-config.toml"), srv.ConfigPath)
	assert.Equal(t, "postgres://postgres@127.0.0.1:5432/bae_dev_deploy?sslmode=disable", srv.DatabaseURL)
	// The console is on, with the password setup printed once.
	assert.Equal(t, "127.0.0.1:8082", srv.Console.Addr)
	pw := regexp.MustCompile(`Operator console http://127\.0\.0\.1:8082, password ([0-9a-f]{32})\n`).FindStringSubmatch(r.stdout)
	require.Len(t, pw, 2, r.stdout)
	assert.Equal(t, pw[1], srv.Console.Password)
	assert.Equal(t, 1, strings.Count(r.stdout, pw[1]), "printed once")
	level, _ := lookup("BAE_LOG")
	assert.Equal(t, "debug", level)

	f, err := config.LoadFileWithEnv(srv.ConfigPath, lookup)
	require.NoError(t, err)
	require.Len(t, f.Providers.Entries, 1)
	fake := f.Providers.Entries[0]
	assert.Equal(t, "http://"+fakeAddr, fake.EffectiveBaseURL())
	if _, err := os.Stat(record + ".fake"); err == nil {
		assert.Equal(t, "-addr "+fakeAddr+"\n", readFile(t, record+".fake"), "the fake provider listens where the config points")
	} // else something already listens on its port, and the script leaves it be
	require.Len(t, f.MCP.Servers, 1)
	words := f.MCP.Servers[0]
	assert.Equal(t, filepath.Join(repo, "bin", "mcp-words"), words.Command)
	// make build puts each examples/<name> at bin/<name>.
	assert.DirExists(t, filepath.Join(findRepo(), "examples", filepath.Base(words.Command)))
}

// TestSetupDevModeKeyFromEnvFile: a provider key typed into the wizard
// reaches baesrv through .env, and the config resolves it.
func TestSetupDevModeKeyFromEnvFile(t *testing.T) {
	repo, record := stubRepo(t)
	dir := t.TempDir()
	r := runSetup(t, "", map[string]string{"ANTHROPIC_API_KEY": "sk-ant-from-shell"}, "--dir", dir, "--yes", "--mode", "dev",
		"--repo", repo, "--provider", "anthropic", "--mcp-words=false")
	require.Equal(t, ExitOK, r.code, r.stderr)
	cmd := exec.Command(filepath.Join(dir, devScript))
	cmd.Env = composeEnv()
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	lookup := readEnvDump(t, record+".env")
	srv, err := config.ServerFromEnv(lookup)
	require.NoError(t, err)
	f, err := config.LoadFileWithEnv(srv.ConfigPath, lookup)
	require.NoError(t, err)
	require.Len(t, f.Providers.Entries, 1)
	// Provider tokens resolve at use, as activities/provider.go does.
	token, err := config.ResolveEnvTokens(f.Providers.Entries[0].AuthToken, lookup)
	require.NoError(t, err)
	assert.Equal(t, "sk-ant-from-shell", token)
	assert.Equal(t, "127.0.0.1:8080", srv.Addr)
}

// TestSetupDevModeLaunch launches a dev deployment (a stand-in checkout):
// setup polls the client port's /readyz until it answers 200, then runs
// `baectl quickstart` for the "default" profile and key next to the
// server, and waits for the foreground server to end.
func TestSetupDevModeLaunch(t *testing.T) {
	repo, record := stubRepo(t)
	var polls atomic.Int32
	ready := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		assert.Equal(t, "/readyz", r.URL.Path)
		if polls.Add(1) < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer ready.Close()
	port := ready.Listener.Addr().(*net.TCPAddr).Port
	// The stand-in server runs until the stand-in baectl has been called.
	for path, body := range map[string]string{
		"bin/baesrv": fmt.Sprintf("#!/bin/sh\nwhile [ ! -f %q.done ]; do sleep 0.1; done\n", record),
		"bin/baectl": fmt.Sprintf("#!/bin/sh\necho \"$@\" > %q.baectl\necho \"$BAE_DATA_DIR\" > %q.datadir\ntouch %q.done\necho created profile default\n", record, record, record),
	} {
		require.NoError(t, os.WriteFile(filepath.Join(repo, path), []byte(body), 0o755))
	}
	dir := filepath.Join(t.TempDir(), "launched")
	r := runSetup(t, "", nil, "--dir", dir, "--yes", "--mode", "dev", "--repo", repo,
		"--client-port", strconv.Itoa(port), "--ui-port", "18234", "--launch")
	require.Equal(t, ExitOK, r.code, r.stdout+r.stderr)
	assert.Contains(t, r.stdout, fmt.Sprintf("Waiting for http://127.0.0.1:%d/readyz", port))
	assert.Contains(t, r.stdout, "The server is ready.\ncreated profile default\n")
	assert.GreaterOrEqual(t, polls.Load(), int32(3), "polled until ready")
	assert.Equal(t, fmt.Sprintf("quickstart --profile-name default --provider fake --client-url http://127.0.0.1:%d\n", port), readFile(t, record+".baectl"))
	assert.Equal(t, filepath.Join(dir, "bae-data")+"\n", readFile(t, record+".datadir"))

	// A server that exits before it is ready fails the launch, naming why.
	repo2, _ := stubRepo(t)
	r = runSetup(t, "", nil, "--dir", filepath.Join(t.TempDir(), "dead"), "--yes", "--mode", "dev", "--repo", repo2,
		"--client-port", "1", "--ui-port", "18235", "--launch")
	assert.Equal(t, ExitRuntime, r.code, r.stdout+r.stderr)
	assert.Contains(t, r.stderr, "the server exited before it was ready")
}
