package sandbox

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFindStaticBusybox(t *testing.T) {
	dir := t.TempDir()
	notELF := filepath.Join(dir, "busybox")
	require.NoError(t, os.WriteFile(notELF, []byte("#!/bin/sh\n"), 0o755))

	_, err := findStaticBusybox(filepath.Join(dir, "missing"), notELF)
	require.Error(t, err)
	assert.ErrorContains(t, err, "apt-get install -y busybox-static")
	assert.ErrorContains(t, err, "not an ELF binary")

	if _, err := os.Stat("/bin/busybox"); err != nil {
		return // the engine tests report the missing package themselves
	}
	// An unusable candidate is skipped over in favour of a later one.
	data, err := findStaticBusybox(notELF, "/bin/busybox")
	require.NoError(t, err, "/bin/busybox must be busybox-static")
	assert.NotEmpty(t, data)
}
