package chaoslib

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// counterDir holds one counter file per sandbox turn in the container:
// every run of the command appends a line, so "ran twice" is two lines.
const counterDir = "/tmp/chaos"

// sandboxCommand appends a line to the turn's counter and runs for a
// moment (the window a fault lands in).
func sandboxCommand(tag string) string {
	return fmt.Sprintf("mkdir -p %s && echo run >> %s/%s && sleep 0.5 && wc -l < %s/%s", counterDir, counterDir, tag, counterDir, tag)
}

// sandboxCounts reads every counter of a container: tag -> runs.
func sandboxCounts(ctx context.Context, container string) (map[string]int, error) {
	cmd := exec.CommandContext(ctx, "docker", "exec", container, "sh", "-c",
		"mkdir -p "+counterDir+" && cd "+counterDir+" && for f in *; do [ -f \"$f\" ] && echo \"$f $(wc -l < \"$f\")\"; done; true")
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("docker exec %s: %w: %s", container, err, bytes.TrimSpace(stderr.Bytes()))
	}
	m := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
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
