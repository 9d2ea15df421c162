package sandbox

// Test support. Nothing in this file is used by the server: it lives outside
// _test.go files only so that other packages' tests can build a real sandbox
// image on machines that cannot pull from any registry.

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	imagetypes "github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
)

// Labels on every test image. A container inherits its image's labels, so
// every container started from a test image, by a test or by a server under
// test, carries them too: that is how the image's owner finds them.
const (
	// LabelTestImage carries the test image's tag.
	LabelTestImage = "bae.test.image"
	// LabelTestOwner names what built the test image (a test's name).
	LabelTestOwner = "bae.test.owner"
	// LabelTestRun carries TestRunEnv, the id of the suite run (make test)
	// that built the image; its guard fails the run if anything so labelled
	// outlives it.
	LabelTestRun = "bae.test.run"
	// TestRunEnv names the environment variable holding the run id.
	TestRunEnv = "BAE_TEST_RUN"
)

// busyboxApplets lists the applets given a /bin symlink in the test image: a
// shell plus the usual tools commands and the driver's exec kill script use.
func busyboxApplets() []string {
	return []string{
		"sh", "ash", "sleep", "echo", "cat", "ls", "env", "true", "false",
		"printf", "grep", "tr", "kill", "ps", "head", "tail", "wc", "sed",
		"awk", "cut", "sort", "uniq", "test", "[", "mkdir", "rm", "cp", "mv",
		"touch", "id", "pwd", "date", "uname", "yes", "dd", "seq", "xargs",
		"which", "hostname", "chmod", "ln", "stat", "tee", "mkfifo",
	}
}

// BuildBusyboxImage (test support) imports a tiny image tagged tag from the
// host's static busybox, without pulling anything: /bin/busybox with applet
// symlinks, /tmp, and a minimal /etc/passwd and /etc/group. The image is
// labelled LabelTestImage=tag, LabelTestOwner=owner (the test or tool that
// builds it, so that a leftover names its culprit) and, when TestRunEnv is
// set, LabelTestRun. RemoveTestImage removes it with every container
// started from it.
func BuildBusyboxImage(ctx context.Context, tag, owner string) error {
	// Where busybox-static installs its binary.
	bin, err := findStaticBusybox("/bin/busybox", "/usr/bin/busybox")
	if err != nil {
		return err
	}
	rootfs, err := busyboxRootfs(bin)
	if err != nil {
		return fmt.Errorf("build busybox image %s: %w", tag, err)
	}
	cli, err := newDockerClient()
	if err != nil {
		return err
	}
	defer cli.Close()
	rc, err := cli.ImageImport(ctx,
		imagetypes.ImportSource{Source: bytes.NewReader(rootfs), SourceName: "-"},
		tag,
		imagetypes.ImportOptions{Changes: testImageChanges(tag, owner, os.Getenv(TestRunEnv))},
	)
	if err != nil {
		return fmt.Errorf("import busybox image %s: %w", tag, err)
	}
	defer rc.Close()
	if err := drainProgress(rc); err != nil {
		return fmt.Errorf("import busybox image %s: %w", tag, err)
	}
	return nil
}

// testImageChanges are the Dockerfile instructions applied on import.
func testImageChanges(tag, owner, run string) []string {
	changes := []string{
		"ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		`CMD ["/bin/sh"]`,
		"LABEL " + LabelTestImage + "=" + strconv.Quote(tag),
		"LABEL " + LabelTestOwner + "=" + strconv.Quote(owner),
	}
	if run != "" {
		changes = append(changes, "LABEL "+LabelTestRun+"="+strconv.Quote(run))
	}
	return changes
}

// findStaticBusybox returns the first statically linked busybox found: the
// image has no libc, so a dynamically linked one would not run in it.
func findStaticBusybox(paths ...string) ([]byte, error) {
	var errs []error
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := requireStatic(data); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", path, err))
			continue
		}
		return data, nil
	}
	return nil, fmt.Errorf("no static busybox found (run `apt-get install -y busybox-static`): %w", errors.Join(errs...))
}

func requireStatic(data []byte) error {
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("not an ELF binary: %w", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return errors.New("dynamically linked")
		}
	}
	return nil
}

// busyboxRootfs returns the image's root filesystem as an uncompressed tar.
func busyboxRootfs(busybox []byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	// A fixed timestamp keeps the tar (hence the layer) reproducible.
	mtime := time.Unix(0, 0)
	add := func(h *tar.Header, body []byte) error {
		h.ModTime = mtime
		h.Uname, h.Gname = "root", "root"
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := tw.Write(body)
		return err
	}
	dir := func(name string, mode int64) error {
		return add(&tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: mode}, nil)
	}
	file := func(name string, mode int64, body []byte) error {
		return add(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(body))}, body)
	}
	steps := []func() error{
		func() error { return dir("bin/", 0o755) },
		func() error { return dir("etc/", 0o755) },
		func() error { return dir("root/", 0o700) },
		func() error { return dir("tmp/", 0o1777) },
		func() error { return dir("proc/", 0o555) },
		func() error { return dir("dev/", 0o755) },
		func() error { return dir("sys/", 0o555) },
		func() error { return file("bin/busybox", 0o755, busybox) },
		func() error {
			return file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n"))
		},
		func() error { return file("etc/group", 0o644, []byte("root:x:0:\nnogroup:x:65534:\n")) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, err
		}
	}
	for _, applet := range busyboxApplets() {
		if err := add(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + applet, Linkname: "busybox", Mode: 0o777}, nil); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// RemoveTestImage (test support) removes the image BuildBusyboxImage built
// under tag together with every container started from it, whoever started
// it and whatever state it is in, then checks that none of them is left.
// An image still used by a container is only untagged by a forced removal,
// so containers go first, and both are found by the image's label rather
// than its tag: a container started between the two steps, or an image
// left untagged by an earlier attempt, is still found. Nothing left is not
// an error.
func RemoveTestImage(ctx context.Context, tag string) error {
	cli, err := newDockerClient()
	if err != nil {
		return err
	}
	defer cli.Close()
	label := filters.NewArgs(filters.Arg("label", LabelTestImage+"="+tag))
	var errs []error
	// A second round catches a container that started while the first
	// removed the image (its removal then only untagged it).
	for range 2 {
		errs = errs[:0]
		containers, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: label})
		if err != nil {
			return fmt.Errorf("remove test image %s: list containers: %w", tag, err)
		}
		for _, c := range containers {
			if err := forceRemoveContainer(ctx, cli, c.ID); err != nil {
				errs = append(errs, fmt.Errorf("remove container %s of test image %s: %w", c.ID, tag, err))
			}
		}
		images, err := cli.ImageList(ctx, imagetypes.ListOptions{All: true, Filters: label})
		if err != nil {
			return fmt.Errorf("remove test image %s: list images: %w", tag, err)
		}
		for _, img := range images {
			_, err := cli.ImageRemove(ctx, img.ID, imagetypes.RemoveOptions{Force: true, PruneChildren: true})
			if err != nil && !cerrdefs.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("remove test image %s (%s): %w", tag, img.ID, err))
			}
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	left, err := testImageLeftovers(ctx, cli, label)
	if err != nil {
		return fmt.Errorf("remove test image %s: %w", tag, err)
	}
	if left != "" {
		return fmt.Errorf("remove test image %s: still present: %s", tag, left)
	}
	return nil
}

// forceRemoveContainer kills and removes container id; one already gone,
// or already being removed (AutoRemove), is waited for, not an error.
func forceRemoveContainer(ctx context.Context, cli *client.Client, id string) error {
	err := cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true})
	switch {
	case err == nil, cerrdefs.IsNotFound(err):
		return nil
	case cerrdefs.IsConflict(err):
		resC, errC := cli.ContainerWait(ctx, id, container.WaitConditionRemoved)
		select {
		case <-resC:
			return nil
		case err := <-errC:
			if err == nil || cerrdefs.IsNotFound(err) {
				return nil
			}
			return err
		}
	default:
		return err
	}
}

// testImageLeftovers describes the containers and images matching f, ""
// when there are none.
func testImageLeftovers(ctx context.Context, cli *client.Client, f filters.Args) (string, error) {
	containers, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return "", fmt.Errorf("list containers: %w", err)
	}
	images, err := cli.ImageList(ctx, imagetypes.ListOptions{All: true, Filters: f})
	if err != nil {
		return "", fmt.Errorf("list images: %w", err)
	}
	var left []string
	for _, c := range containers {
		left = append(left, "container "+c.ID[:12]+" ("+c.State+")")
	}
	for _, img := range images {
		left = append(left, "image "+img.ID)
	}
	return strings.Join(left, ", "), nil
}

// EngineAvailable (test support) pings the engine named by the environment,
// so tests can skip when none is reachable.
func EngineAvailable(ctx context.Context) error {
	cli, err := newDockerClient()
	if err != nil {
		return err
	}
	defer cli.Close()
	if _, err := cli.Ping(ctx); err != nil {
		return fmt.Errorf("ping docker engine: %w", err)
	}
	return nil
}
