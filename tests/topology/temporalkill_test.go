//go:build topology

package topology

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// killTemporal SIGKILLs the suite's Temporal server (the pid
// scripts/temporal-up.sh recorded) and waits until it is gone; start it
// again with scripts/temporal-up.sh and temporalEnv.
func killTemporal(t *testing.T) {
	t.Helper()
	pidFile := filepath.Join(temporalEnv["TEMPORAL_DIR"], "pid")
	b, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	// Not our child (the script started it): poll until the pid is gone.
	deadline := time.Now().Add(time.Minute)
	for !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		require.True(t, time.Now().Before(deadline), "temporal-server pid %d still there a minute after SIGKILL", pid)
		time.Sleep(20 * time.Millisecond) // polling a process's end; nothing to wait on
	}
	require.NoError(t, os.Remove(pidFile))
}
