package benchstack

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// SandboxCounts reads the counter files a bench's sandbox commands append
// a line to, one per run, in dir of a container: tag -> runs.
func SandboxCounts(ctx context.Context, container, dir string) (map[string]int, error) {
	cmd := exec.CommandContext(ctx, "docker", "exec", container, "sh", "-c",
		"mkdir -p "+dir+" && cd "+dir+" && for f in *; do [ -f \"$f\" ] && echo \"$f $(wc -l < \"$f\")\"; done; true")
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("docker exec %s: %w: %s", container, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return parseCounts(out.String())
}

// parseCounts reads the "tag lines" lines the counter listing prints.
func parseCounts(out string) (map[string]int, error) {
	m := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		n, err := strconv.Atoi(f[1])
		if err != nil {
			return nil, fmt.Errorf("counter line %q: %w", line, err)
		}
		m[f[0]] = n
	}
	return m, nil
}
