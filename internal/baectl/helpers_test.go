package baectl

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// result is one in-process baectl run.
type result struct {
	code           int
	stdout, stderr string
}

// runCLI runs baectl with exactly env as its environment. BAE_DATA_DIR
// defaults to an empty temp dir so a developer's ./bae-data never leaks in.
func runCLI(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	full := map[string]string{"BAE_DATA_DIR": t.TempDir()}
	for k, v := range env {
		full[k] = v
	}
	var out, errOut bytes.Buffer
	code := Run(context.Background(), args, &out, &errOut, func(k string) (string, bool) {
		v, ok := full[k]
		return v, ok
	})
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}

// writeFile writes content into a fresh temp dir and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}
