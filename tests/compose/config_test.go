package compose

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The two shapes, by file.
const (
	devFile  = "docker-compose.yml"
	prodFile = "docker-compose.production.yml"
)

// deprecated images must not come back: temporalio/auto-setup gets no
// updates after Temporal 1.30.1; the server image plus admin-tools replace
// it. tctl is the retired CLI (its image and binary).
var deprecated = []string{"temporalio/auto-setup", "temporalio/tctl", "temporalio/admin-tools-tctl"}

// pinned is a tag naming one release (1.9.1, 16.15, 2.56.4): no latest, no
// bare major.
var pinned = regexp.MustCompile(`^[0-9]+\.[0-9]+(\.[0-9]+)?$`)

type service struct {
	Image       string            `json:"image"`
	Build       *json.RawMessage  `json:"build"`
	Command     []string          `json:"command"`
	Entrypoint  []string          `json:"entrypoint"`
	Environment map[string]string `json:"environment"`
	Healthcheck *struct {
		Test []string `json:"test"`
	} `json:"healthcheck"`
	DependsOn map[string]struct {
		Condition string `json:"condition"`
	} `json:"depends_on"`
	Volumes []struct {
		Type   string `json:"type"`
		Source string `json:"source"`
		Target string `json:"target"`
	} `json:"volumes"`
	Ports []struct {
		HostIP    string `json:"host_ip"`
		Published string `json:"published"`
		Target    int    `json:"target"`
	} `json:"ports"`
}

type project struct {
	Services map[string]service `json:"services"`
}

// config is `docker compose config` of file, as compose resolves it.
func config(t *testing.T, file string, env ...string) project {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out := run(t, ctx, repoRoot(t), env, "docker", "compose", "-f", file, "config", "--format", "json")
	var p project
	require.NoError(t, json.Unmarshal([]byte(out), &p))
	return p
}

func TestComposeFilesValidate(t *testing.T) {
	uiServer := uiServerVersion(t)
	for _, file := range []string{devFile, prodFile} {
		t.Run(file, func(t *testing.T) {
			p := config(t, file, "ANTHROPIC_API_KEY=test")
			for name, s := range p.Services {
				if s.Build != nil {
					continue // baesrv: built from the Dockerfile (TestImagesBuildAndRun)
				}
				repo, tg, ok := strings.Cut(s.Image, ":")
				require.True(t, ok, "%s: image %q names no tag", name, s.Image)
				assert.Regexp(t, pinned, tg, "%s: image %q is not pinned to a release", name, s.Image)
				assert.NotContains(t, deprecated, repo, "%s: %s is deprecated", name, repo)
				if repo == "temporalio/ui" {
					assert.Equal(t, uiServer, tg, "%s: the UI image matches the UI server bae-go embeds (go.mod)", name)
				}
			}
			// Every dependency a service waits on can report what it waits for.
			for name, s := range p.Services {
				for dep, d := range s.DependsOn {
					target, ok := p.Services[dep]
					require.True(t, ok, "%s depends on unknown %s", name, dep)
					if d.Condition == "service_healthy" {
						assert.NotNil(t, target.Healthcheck, "%s waits for %s to be healthy, which has no health check", name, dep)
					}
				}
			}
			b := p.Services["baesrv"]
			require.NotNil(t, b.Build, "baesrv is built from the Dockerfile")
			assert.Equal(t, "temporal:7233", b.Environment["BAE_TEMPORAL_ADDR"])
		})
	}

	t.Run("a missing provider key stops compose", func(t *testing.T) {
		for _, file := range []string{devFile, prodFile} {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			_, err := runErr(ctx, repoRoot(t), []string{"ANTHROPIC_API_KEY="}, "docker", "compose", "-f", file, "config", "-q")
			cancel()
			require.Error(t, err, file)
			assert.Contains(t, err.Error(), "ANTHROPIC_API_KEY is not set", file)
		}
	})

	t.Run("development shape: the Temporal dev server", func(t *testing.T) {
		p := config(t, devFile, "ANTHROPIC_API_KEY=test")
		tmp := p.Services["temporal"]
		assert.True(t, strings.HasPrefix(tmp.Image, "temporalio/temporal:"), tmp.Image)
		require.GreaterOrEqual(t, len(tmp.Command), 2)
		assert.Equal(t, []string{"server", "start-dev"}, tmp.Command[:2])
		db := flagValue(tmp.Command, "--db-filename")
		require.NotEmpty(t, db, "the dev server keeps its state in a file")
		assert.True(t, onVolume(tmp, filepath.Dir(db)), "the dev server's database %s is on a named volume", db)
		assert.Equal(t, "0.0.0.0", flagValue(tmp.Command, "--ip"), "other containers reach the frontend")
		for _, port := range tmp.Ports {
			assert.Equal(t, "127.0.0.1", port.HostIP, "the Temporal UI is published on loopback only")
		}
		assert.Equal(t, "service_healthy", p.Services["baesrv"].DependsOn["temporal"].Condition)
		assert.NotContains(t, p.Services, "temporal-ui", "the dev server serves its own UI")
	})

	t.Run("production shape: server and admin-tools on PostgreSQL", func(t *testing.T) {
		p := config(t, prodFile, "ANTHROPIC_API_KEY=test")
		server := p.Services["temporal"]
		assert.True(t, strings.HasPrefix(server.Image, "temporalio/server:"), server.Image)
		_, serverTag, _ := strings.Cut(server.Image, ":")
		for _, name := range []string{"temporal-schema", "temporal-namespace"} {
			s := p.Services[name]
			assert.Equal(t, "temporalio/admin-tools:"+serverTag, s.Image, "%s: admin-tools matches the server", name)
		}
		assert.Equal(t, "postgres12", server.Environment["DB"])
		assert.Equal(t, "postgres", server.Environment["POSTGRES_SEEDS"])
		assert.Equal(t, "service_completed_successfully", server.DependsOn["temporal-schema"].Condition)
		assert.Equal(t, "service_completed_successfully", p.Services["baesrv"].DependsOn["temporal-namespace"].Condition)
		ui := p.Services["temporal-ui"]
		assert.Equal(t, "true", ui.Environment["TEMPORAL_DISABLE_WRITE_ACTIONS"], "the UI is read-only by default")
		for _, port := range ui.Ports {
			assert.Equal(t, "127.0.0.1", port.HostIP, "the Temporal UI is published on loopback only")
		}
	})
}

// uiServerVersion is the github.com/temporalio/ui-server/v2 version go.mod
// requires, without its v.
func uiServerVersion(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "go.mod"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^\s*github\.com/temporalio/ui-server/v2 v([0-9.]+)\s*$`).FindSubmatch(data)
	require.NotNil(t, m, "go.mod requires github.com/temporalio/ui-server/v2")
	return string(m[1])
}

// flagValue is the value of --name=value or --name value in args.
func flagValue(args []string, name string) string {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

func onVolume(s service, dir string) bool {
	for _, v := range s.Volumes {
		if v.Type == "volume" && v.Target == dir {
			return true
		}
	}
	return false
}
