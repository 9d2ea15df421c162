package compose

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The stand-in images, built once per run by standins and removed by
// TestMain's sweep.
type images struct {
	// binaries holds /out/<command> for every command the Dockerfiles
	// build, and /etc/ssl/certs/ca-certificates.crt: what their build
	// stages produce, in place of those stages.
	binaries string
	// base is a busybox image with a POSIX shell, in place of
	// debian:bookworm-slim.
	base string
	// temporal is the Temporal CLI stand-in (internal/testing/temporalcli)
	// laid out as temporalio/temporal is: /usr/local/bin/temporal, user
	// temporal (uid 1000) owning /home/temporal.
	temporal string
	// baesrv is built from Dockerfile; schedule, api and webapp from
	// launchers/Dockerfile's targets.
	baesrv, schedule, api, webapp string
}

var (
	standinsOnce sync.Once
	standinsImgs images
	standinsErr  error
)

// revision is what the stand-in binaries report in --version.
const revision = "compose-test"

// commands are what the two Dockerfiles' build stages compile, plus the
// Temporal CLI stand-in; built once, statically linked, since the
// stand-in images have no libc.
var commands = []string{"./cmd/baesrv", "./cmd/baectl", "./cmd/fakeprovider", "./examples/mcp-words",
	"./cmd/baesched", "./cmd/baeapi", "./internal/testing/temporalcli"}

// standins builds the binaries and every image once per run.
func standins(t *testing.T) images {
	t.Helper()
	standinsOnce.Do(func() { standinsImgs, standinsErr = buildStandins(repoRoot(t)) })
	if standinsErr != nil {
		t.Fatalf("build the stand-in images: %v", standinsErr)
	}
	return standinsImgs
}

func tag(name string) string { return "bae-compose-test/" + name + ":" + runID }

func buildStandins(root string) (images, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	bin, err := buildBinaries(ctx, root)
	if err != nil {
		return images{}, err
	}
	img := images{binaries: tag("binaries"), base: tag("base"), temporal: tag("temporal"),
		baesrv: tag("baesrv"), schedule: tag("launcher-schedule"), api: tag("launcher-api"), webapp: tag("launcher-webapp")}

	certs, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	if err != nil {
		return images{}, fmt.Errorf("the binaries image carries the host's CA bundle: %w", err)
	}
	out := &rootfs{}
	for _, c := range commands[:6] {
		if err := out.addFile(bin, filepath.Base(c), "out/"+filepath.Base(c), 0, 0); err != nil {
			return images{}, err
		}
	}
	out.file("etc/ssl/certs/ca-certificates.crt", 0o644, 0, 0, certs)
	if err := importImage(ctx, out, img.binaries); err != nil {
		return images{}, err
	}

	busybox, err := staticBusybox()
	if err != nil {
		return images{}, err
	}
	base := &rootfs{}
	base.file("bin/busybox", 0o755, 0, 0, busybox)
	for _, a := range []string{"sh", "echo", "mkdir", "chown", "cat", "ls", "id", "true", "sleep", "env"} {
		base.symlink("bin/"+a, "busybox")
	}
	base.file("etc/passwd", 0o644, 0, 0, []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"))
	base.file("etc/group", 0o644, 0, 0, []byte("root:x:0:\nnogroup:x:65534:\n"))
	base.dir("tmp", 0o1777, 0, 0)
	base.dir("root", 0o700, 0, 0)
	if err := importImage(ctx, base, img.base, `ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin`, `CMD ["/bin/sh"]`); err != nil {
		return images{}, err
	}

	// As temporalio/temporal: alpine with the CLI, user temporal (1000),
	// ENTRYPOINT ["temporal"].
	tmp := &rootfs{}
	if err := tmp.addFile(bin, "temporalcli", "usr/local/bin/temporal", 0, 0); err != nil {
		return images{}, err
	}
	tmp.file("etc/passwd", 0o644, 0, 0, []byte("root:x:0:0:root:/root:/sbin/nologin\ntemporal:x:1000:1000::/home/temporal:/sbin/nologin\n"))
	tmp.file("etc/group", 0o644, 0, 0, []byte("root:x:0:\ntemporal:x:1000:\n"))
	tmp.dir("home/temporal", 0o755, 1000, 1000)
	tmp.dir("tmp", 0o1777, 0, 0)
	if err := importImage(ctx, tmp, img.temporal, "USER temporal", "WORKDIR /home/temporal",
		"ENV PATH=/usr/local/bin:/usr/bin:/bin", `ENTRYPOINT ["temporal"]`); err != nil {
		return images{}, err
	}

	if err := buildDockerfile(ctx, root, "Dockerfile", "", img, img.baesrv); err != nil {
		return images{}, err
	}
	for target, tg := range map[string]string{"schedule": img.schedule, "api": img.api, "webapp": img.webapp} {
		if err := buildDockerfile(ctx, root, "launchers/Dockerfile", target, img, tg); err != nil {
			return images{}, err
		}
	}
	return img, nil
}

// buildBinaries links the commands into a directory per checkout, so that
// go build finds them current on the next run. They are linked statically
// through the C linker instead of with CGO_ENABLED=0 as the Dockerfiles do:
// the packages then come from the build cache the rest of the test suite
// fills, and only the link is new.
func buildBinaries(ctx context.Context, root string) (string, error) {
	sum := sha256.Sum256([]byte(root))
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("bae-compose-bin-%d-%x", os.Getuid(), sum[:6]))
	ldflags := "-linkmode=external -extldflags=-static -X github.com/bae-go/bae-go/internal/lib/version.Revision=" + revision
	args := append([]string{"build", "-ldflags", ldflags, "-o", dir + "/"}, commands...)
	if _, err := runErr(ctx, root, nil, "go", args...); err != nil {
		return "", err
	}
	for _, c := range commands {
		if err := requireStatic(filepath.Join(dir, filepath.Base(c))); err != nil {
			return "", err
		}
	}
	return dir, nil
}

func requireStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked: the stand-in images have no libc", path)
		}
	}
	return nil
}

func staticBusybox() ([]byte, error) {
	for _, p := range []string{"/bin/busybox", "/usr/bin/busybox"} {
		if requireStatic(p) == nil {
			return os.ReadFile(p)
		}
	}
	return nil, fmt.Errorf("no static busybox (apt-get install busybox-static; scripts/test-deps.sh installs it)")
}

// buildDockerfile builds target of the Dockerfile at path (relative to
// root) with the stand-ins: BASE_IMAGE is the busybox image, and the stage
// named build, which compiles with the golang image and the module proxy
// (neither reachable here, and minutes of compiling), is replaced by the
// binaries image it would produce. Every other line is built as written.
func buildDockerfile(ctx context.Context, root, path, target string, img images, tagName string) error {
	src, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		return err
	}
	df, err := replaceBuildStage(string(src), img.binaries)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	// No stage but build reads the build context: an empty one will do.
	ctxDir, err := os.MkdirTemp("", "bae-compose-ctx-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(ctxDir)
	if err := os.WriteFile(filepath.Join(ctxDir, "Dockerfile"), []byte(df), 0o644); err != nil {
		return err
	}
	args := []string{"build", "--rm", "--force-rm", "--label", labelKey + "=" + runID,
		"--build-arg", "BASE_IMAGE=" + img.base, "-t", tagName}
	if target != "" {
		args = append(args, "--target", target)
	}
	// The classic builder: this engine has no buildx.
	_, err = runErr(ctx, ctxDir, []string{"DOCKER_BUILDKIT=0"}, "docker", append(args, ".")...)
	return err
}

// replaceBuildStage swaps the stage `FROM ${GO_IMAGE} AS build` for
// `FROM image AS build`, and fails unless the file has exactly that stage.
func replaceBuildStage(src, image string) (string, error) {
	lines := strings.Split(src, "\n")
	start, end := -1, len(lines)
	for i, l := range lines {
		f := strings.Fields(l)
		if len(f) == 0 || !strings.EqualFold(f[0], "FROM") {
			continue
		}
		if start >= 0 {
			end = i
			break
		}
		if len(f) == 4 && f[1] == "${GO_IMAGE}" && strings.EqualFold(f[2], "AS") && f[3] == "build" {
			start = i
		}
	}
	if start < 0 {
		return "", fmt.Errorf("no stage `FROM ${GO_IMAGE} AS build`")
	}
	out := append(append(append([]string{}, lines[:start]...), "FROM "+image+" AS build", ""), lines[end:]...)
	return strings.Join(out, "\n"), nil
}

// rootfs is a root filesystem for docker import, as an uncompressed tar.
type rootfs struct {
	buf  bytes.Buffer
	tw   *tar.Writer
	err  error
	dirs map[string]bool
}

func (r *rootfs) writer() *tar.Writer {
	if r.tw == nil {
		r.tw = tar.NewWriter(&r.buf)
		r.dirs = map[string]bool{}
	}
	return r.tw
}

func (r *rootfs) header(h *tar.Header, body []byte) {
	if r.err != nil {
		return
	}
	// Parents first, root-owned, unless added explicitly before.
	if d := filepath.Dir(strings.TrimSuffix(h.Name, "/")); d != "." && !r.dirs[d] {
		r.dir(d, 0o755, 0, 0)
	}
	h.ModTime = time.Unix(0, 0)
	if err := r.writer().WriteHeader(h); err != nil {
		r.err = err
		return
	}
	if _, err := r.tw.Write(body); err != nil {
		r.err = err
	}
}

func (r *rootfs) dir(name string, mode int64, uid, gid int) {
	r.writer()
	if r.dirs[name] {
		return
	}
	r.dirs[name] = true
	r.header(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, Uid: uid, Gid: gid}, nil)
}

func (r *rootfs) file(name string, mode int64, uid, gid int, body []byte) {
	r.header(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Uid: uid, Gid: gid, Size: int64(len(body))}, body)
}

func (r *rootfs) symlink(name, target string) {
	r.header(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777}, nil)
}

func (r *rootfs) addFile(dir, name, as string, uid, gid int) error {
	body, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return err
	}
	r.file(as, 0o755, uid, gid, body)
	return nil
}

// importImage imports the rootfs as image tag, labelled with the run.
func importImage(ctx context.Context, r *rootfs, tagName string, changes ...string) error {
	if r.err != nil {
		return r.err
	}
	if err := r.writer().Close(); err != nil {
		return err
	}
	args := []string{"import", "--change", "LABEL " + labelKey + "=" + runID}
	for _, c := range changes {
		args = append(args, "--change", c)
	}
	cmd := exec.CommandContext(ctx, "docker", append(args, "-", tagName)...)
	cmd.Stdin = &r.buf
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("docker import %s: %w: %s", tagName, err, out)
	}
	return nil
}
