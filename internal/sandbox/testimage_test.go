package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	imagetypes "github.com/docker/docker/api/types/image"
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

// TestRemoveTestImageTakesItsContainers: the containers of a test image
// carry its labels (inherited), and RemoveTestImage removes them, running
// or not, before the image, so that no untagged image stays behind.
func TestRemoveTestImageTakesItsContainers(t *testing.T) {
	requireEngine(t)
	// Under make test the run's own id, so that the guard sees this test's
	// leftovers too; alone, one of the test's.
	run := os.Getenv(TestRunEnv)
	if run == "" {
		run = "run-" + randomHex(t)
		t.Setenv(TestRunEnv, run)
	}
	tag := "bae-sandbox-test-rm:" + randomHex(t)
	ctx := testCtx(t)
	t.Cleanup(func() { _ = RemoveTestImage(context.Background(), tag) })
	require.NoError(t, BuildBusyboxImage(ctx, tag, t.Name()))
	d, err := NewDockerDriver(discardLogger())
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })

	running, err := d.Start(ctx, tag, map[string]string{LabelManaged: "true"}, Policy{})
	require.NoError(t, err)
	// A container that never started (no AutoRemove would fire for it).
	created, err := d.cli.ContainerCreate(ctx, &container.Config{Image: tag, Entrypoint: []string{"true"}}, nil, nil, nil, "")
	require.NoError(t, err)

	byImage, err := d.List(ctx, LabelTestImage+"="+tag)
	require.NoError(t, err)
	var ids []string
	for _, c := range byImage {
		ids = append(ids, c.ID)
		assert.Equal(t, run, c.Labels[LabelTestRun])
		assert.Equal(t, t.Name(), c.Labels[LabelTestOwner])
		if c.ID == running.ID {
			assert.Equal(t, "true", c.Labels[LabelManaged], "the container's own labels stay")
		}
	}
	assert.ElementsMatch(t, []string{running.ID, created.ID}, ids, "containers inherit the image's labels")

	require.NoError(t, RemoveTestImage(ctx, tag))
	left, err := d.List(ctx, LabelTestImage+"="+tag)
	require.NoError(t, err)
	assert.Empty(t, left)
	images, err := d.cli.ImageList(ctx, imagetypes.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", LabelTestImage+"="+tag))})
	require.NoError(t, err)
	assert.Empty(t, images, "no image, tagged or not, is left")
	require.NoError(t, RemoveTestImage(ctx, tag), "removing what is gone succeeds")
}
