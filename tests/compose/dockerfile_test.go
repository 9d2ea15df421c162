package compose

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestImagesBuildAndRun builds Dockerfile and every target of
// launchers/Dockerfile on the stand-in base (standins does the building)
// and runs each image's program with --version; their health checks run
// in TestDevStackEndToEnd, where there is a Temporal for them.
func TestImagesBuildAndRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds images")
	}
	img := standins(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, c := range []struct {
		image, program string
		healthcheck    []string
		user           string
	}{
		{img.baesrv, "baesrv", []string{"CMD", "baesrv", "healthcheck"}, "bae"},
		{img.schedule, "baesched", nil, "bae"},
		{img.api, "baeapi", []string{"CMD", "baeapi", "healthcheck"}, "bae"},
		{img.webapp, "baeapi", []string{"CMD", "baeapi", "healthcheck"}, "bae"},
	} {
		t.Run(c.program+" "+c.image, func(t *testing.T) {
			out := run(t, ctx, "", nil, "docker", "run", "--rm", "--label", labelKey+"="+runID, c.image, "--version")
			assert.True(t, strings.HasPrefix(out, c.program+" "), out)
			assert.Contains(t, out, " rev "+revision+" ", "the binary the image was built with")

			var cfg []struct {
				Config struct {
					User        string
					Healthcheck *struct{ Test []string }
				}
			}
			require.NoError(t, json.Unmarshal([]byte(run(t, ctx, "", nil, "docker", "image", "inspect", c.image)), &cfg))
			require.Len(t, cfg, 1)
			assert.Equal(t, c.user, cfg[0].Config.User, "the program does not run as root")
			if c.healthcheck == nil {
				assert.Nil(t, cfg[0].Config.Healthcheck, "baesched serves no port to probe")
			} else {
				require.NotNil(t, cfg[0].Config.Healthcheck)
				assert.Equal(t, c.healthcheck, cfg[0].Config.Healthcheck.Test)
			}
		})
	}

	t.Run("baectl and the example programs are in the server image", func(t *testing.T) {
		for _, p := range []string{"baectl", "fakeprovider", "mcp-words"} {
			out := run(t, ctx, "", nil, "docker", "run", "--rm", "--label", labelKey+"="+runID, "--entrypoint", "sh", img.baesrv, "-c", "command -v "+p)
			assert.Equal(t, "/usr/local/bin/"+p, strings.TrimSpace(out))
		}
		// The data volume's directory belongs to the image's user, so a
		// fresh named volume mounted there is writable by it.
		out := run(t, ctx, "", nil, "docker", "run", "--rm", "--label", labelKey+"="+runID, "--entrypoint", "sh", img.baesrv, "-c", "id -u; ls -ldn /var/lib/bae")
		f := strings.Fields(out)
		require.GreaterOrEqual(t, len(f), 5, out)
		assert.Equal(t, "999", f[0])
		assert.Equal(t, "999", f[3], "owner of /var/lib/bae")
	})
}
