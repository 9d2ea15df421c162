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

	// Skipped over in favour of a later, usable candidate.
	_, err = findStaticBusybox(notELF, "/bin/busybox")
	assert.NoError(t, err, "the engine tests need /bin/busybox from busybox-static")
}
