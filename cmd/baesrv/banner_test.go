package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/config"
)

func devServer(t *testing.T, env map[string]string) config.Server {
	t.Helper()
	srv, err := config.ServerFromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.NoError(t, err)
	if env["BAE_ADDR"] == "" {
		srv.Addr = config.DefaultDevAddr // as runDev does
	}
	srv.TemporalAddr = "127.0.0.1:7233"
	return srv
}

// TestDevBannerMakeDev: make dev's settings (the defaults plus the console)
// give the plain command from the repository root.
func TestDevBannerMakeDev(t *testing.T) {
	repo := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(repo, "bin"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(repo, "bin", "baectl"), nil, 0o755))
	srv := devServer(t, map[string]string{"BAE_CONFIG": "examples/bae-config/dev.toml", "BAE_CONSOLE_ADDR": "127.0.0.1:8082"})
	out := devBanner(srv, "127.0.0.1:8233", repo, filepath.Join(repo, "bin", "baesrv"))
	for _, want := range []string{
		"  client API      http://127.0.0.1:8080\n",
		"  admin API       http://127.0.0.1:8081   (admin key: bae-data/admin-key.pem)\n",
		"  console         http://127.0.0.1:8082   (password: bae-data/console-password.pem)\n",
		"  Temporal UI     http://127.0.0.1:8233\n",
		"  config          examples/bae-config/dev.toml\n",
		"Next, in another shell in " + repo + ":\n  bin/baectl quickstart ",
	} {
		assert.Contains(t, out, want)
	}
}

// TestDevBannerOwnDeployment: a `baectl setup` dev deployment runs in its
// own directory with its own data directory and ports; the printed baectl
// command carries them, with the binary's absolute path.
func TestDevBannerOwnDeployment(t *testing.T) {
	repo, deploy := t.TempDir(), t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(repo, "bin"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(repo, "bin", "baectl"), nil, 0o755))
	data := filepath.Join(deploy, "bae data")
	srv := devServer(t, map[string]string{"BAE_DATA_DIR": data, "BAE_ADDR": "127.0.0.1:18080", "BAE_ADMIN_ADDR": "127.0.0.1:18081"})
	out := devBanner(srv, "", deploy, filepath.Join(repo, "bin", "baesrv"))
	assert.Contains(t, out, "  Temporal UI     (disabled)\n")
	assert.Contains(t, out, "  config          (none: no providers, no MCP servers)\n")
	assert.NotContains(t, out, "console")
	assert.Contains(t, out, "Next, in another shell in "+deploy+":\n  BAE_DATA_DIR='"+data+"' BAE_ADMIN_ADDR=127.0.0.1:18081 BAE_ADDR=127.0.0.1:18080 "+
		filepath.Join(repo, "bin", "baectl")+" quickstart ")
}

func TestBaectlCommandWithoutSibling(t *testing.T) {
	srv := devServer(t, nil)
	assert.Equal(t, "baectl", baectlCommand(srv, t.TempDir(), filepath.Join(t.TempDir(), "baesrv")), "not next to baesrv: found on PATH")
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "baectl"), nil, 0o755))
	assert.Equal(t, "./baectl", baectlCommand(srv, dir, filepath.Join(dir, "baesrv")))
}
