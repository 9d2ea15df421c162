package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"
	"unicode/utf8"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	imagetypes "github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
)

// DefaultOutputLimit caps each of an exec's stdout and stderr.
const DefaultOutputLimit = 1 << 20

const (
	defaultStopTimeout = 3 * time.Second
	// keepAliveScript idles forever without relying on `sleep infinity`
	// (busybox and some minimal images lack it) and exits at once on SIGTERM:
	// as PID 1 the shell would otherwise ignore TERM until the stop timeout.
	keepAliveScript = `trap "exit 0" TERM; while :; do sleep 3600 & wait; done`
	// execMarkerEnv tags every process of one exec (children inherit it), so a
	// cancelled exec's whole process tree can be found and killed: the Engine
	// API has no "kill exec" call.
	execMarkerEnv = "BAE_SANDBOX_EXEC"
	// killBudget bounds the clean-up after a cancelled exec.
	killBudget = 5 * time.Second
	// exitStatusBudget bounds the wait for the daemon to record an exec's
	// exit after its output stream closed.
	exitStatusBudget = 10 * time.Second
	pollInterval     = 25 * time.Millisecond
)

// DockerDriver is the Driver backed by a Docker Engine API endpoint.
type DockerDriver struct {
	cli         *client.Client
	log         *slog.Logger
	outputLimit int
	stopTimeout time.Duration
}

var _ Driver = (*DockerDriver)(nil)

// DockerOption configures a DockerDriver.
type DockerOption func(*DockerDriver)

// WithOutputLimit caps each of stdout and stderr of an exec at n bytes
// (default DefaultOutputLimit). Values <= 0 are ignored.
func WithOutputLimit(n int) DockerOption {
	return func(d *DockerDriver) {
		if n > 0 {
			d.outputLimit = n
		}
	}
}

// WithStopTimeout sets how long Stop waits for a graceful exit before the
// engine kills the container (default 3s, whole seconds).
func WithStopTimeout(t time.Duration) DockerOption {
	return func(d *DockerDriver) {
		if t >= 0 {
			d.stopTimeout = t
		}
	}
}

// NewDockerDriver connects to the engine named by the environment
// (DOCKER_HOST etc., default /var/run/docker.sock). It does not contact the
// engine; the first call will. It logs to log.
func NewDockerDriver(log *slog.Logger, opts ...DockerOption) (*DockerDriver, error) {
	cli, err := newDockerClient()
	if err != nil {
		return nil, err
	}
	d := &DockerDriver{
		cli:         cli,
		log:         log,
		outputLimit: DefaultOutputLimit,
		stopTimeout: defaultStopTimeout,
	}
	for _, o := range opts {
		o(d)
	}
	return d, nil
}

func newDockerClient() (*client.Client, error) {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("docker client: %w", err)
	}
	return cli, nil
}

// Close releases the engine connection.
func (d *DockerDriver) Close() error {
	return d.cli.Close()
}

// EnsureImage inspects image and pulls it when absent.
func (d *DockerDriver) EnsureImage(ctx context.Context, image string) error {
	_, err := d.cli.ImageInspect(ctx, image)
	if err == nil {
		d.log.DebugContext(ctx, "sandbox image already present", "image", image)
		return nil
	}
	if !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("ensure sandbox image %s: inspect: %w", image, err)
	}
	rc, err := d.cli.ImagePull(ctx, image, imagetypes.PullOptions{})
	if err != nil {
		return fmt.Errorf("ensure sandbox image %s: pull failed: %w", image, err)
	}
	defer rc.Close()
	if err := drainProgress(rc); err != nil {
		return fmt.Errorf("ensure sandbox image %s: pull failed: %w", image, err)
	}
	d.log.InfoContext(ctx, "sandbox image pulled", "image", image)
	return nil
}

// drainProgress consumes an engine JSON progress stream (pull, import) and
// returns the first error it reports: the HTTP status is 200 even when the
// operation fails midway.
func drainProgress(r io.Reader) error {
	dec := json.NewDecoder(r)
	for {
		var msg struct {
			Error       string `json:"error"`
			ErrorDetail *struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&msg); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("read progress: %w", err)
		}
		if msg.ErrorDetail != nil && msg.ErrorDetail.Message != "" {
			return errors.New(msg.ErrorDetail.Message)
		}
		if msg.Error != "" {
			return errors.New(msg.Error)
		}
	}
}

// Start creates and starts an idle container from image with labels,
// bounded by policy. The container is auto-removed once stopped.
func (d *DockerDriver) Start(ctx context.Context, image string, labels map[string]string, policy Policy) (Handle, error) {
	lbls := make(map[string]string, len(labels))
	for k, v := range labels {
		lbls[k] = v
	}
	cfg := &container.Config{
		Image: image,
		// Entrypoint (not Cmd) so an image's own ENTRYPOINT cannot swallow the
		// keep-alive script as arguments; it also drops the image's CMD.
		Entrypoint: []string{"sh", "-c", keepAliveScript},
		Labels:     lbls,
	}
	host, err := hostConfig(policy)
	if err != nil {
		return Handle{}, fmt.Errorf("start sandbox from %s: %w", image, err)
	}
	cfg.User = policy.User
	created, err := d.cli.ContainerCreate(ctx, cfg, host, nil, nil, "")
	if err != nil {
		return Handle{}, fmt.Errorf("start sandbox from %s: %w", image, err)
	}
	if err := d.cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		// AutoRemove only fires for a container that ran; remove it ourselves
		// so a failed start leaves nothing behind.
		rmCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killBudget)
		defer cancel()
		if rmErr := d.cli.ContainerRemove(rmCtx, created.ID, container.RemoveOptions{Force: true}); rmErr != nil && !cerrdefs.IsNotFound(rmErr) {
			d.log.WarnContext(ctx, "remove sandbox container after failed start", "container_id", created.ID, "error", rmErr)
		}
		return Handle{}, fmt.Errorf("start sandbox from %s: %w", image, err)
	}
	d.log.InfoContext(ctx, "sandbox started", "image", image, "container_id", created.ID)
	return Handle{ID: created.ID, Image: image}, nil
}

// hostConfig turns a policy into the engine's container settings: every
// capability dropped but the listed ones, resource limits, the network mode
// and, unless allowed, no privilege gain through setuid binaries.
func hostConfig(policy Policy) (*container.HostConfig, error) {
	p := policy.Resolved()
	cpus, err := nanoCPUs(p.CPUs)
	if err != nil {
		return nil, err
	}
	mem := p.MemoryMiB << 20
	pids := p.Pids
	host := &container.HostConfig{
		AutoRemove:  true,
		NetworkMode: container.NetworkMode(p.Network),
		CapDrop:     []string{"ALL"},
		CapAdd:      append([]string(nil), p.CapAdd...),
		Resources: container.Resources{
			Memory: mem,
			// Equal to Memory: no swap on top of the limit.
			MemorySwap: mem,
			NanoCPUs:   cpus,
			PidsLimit:  &pids,
		},
	}
	if !p.AllowNewPrivileges {
		host.SecurityOpt = []string{"no-new-privileges:true"}
	}
	return host, nil
}

// Exec runs `sh -c command` in container id. When ctx ends first, Exec stops
// waiting, kills the command's processes (best effort, bounded) and returns
// ctx's error.
func (d *DockerDriver) Exec(ctx context.Context, id, command string, stdin io.Reader) (ExecResult, error) {
	marker, err := newMarker()
	if err != nil {
		return ExecResult{}, fmt.Errorf("exec in sandbox %s: %w", id, err)
	}
	opts := container.ExecOptions{
		Cmd: []string{"sh", "-c", command},
		Env: []string{execMarkerEnv + "=" + marker},
	}
	stdout, stderr, code, err := d.attachRun(ctx, id, opts, stdin, d.outputLimit, d.outputLimit, func(execID string) {
		d.killExec(ctx, id, execID, marker)
	})
	if err != nil {
		return ExecResult{}, err
	}
	res := ExecResult{ExitCode: code}
	var outCut, errCut bool
	res.Stdout, outCut = stdout.result()
	res.Stderr, errCut = stderr.result()
	res.Truncated = outCut || errCut
	return res, nil
}

// exitCode waits for the daemon to record the exec's exit: the output stream
// can close a moment before the exec stops reporting Running.
func (d *DockerDriver) exitCode(ctx context.Context, execID string) (int, error) {
	deadline := time.Now().Add(exitStatusBudget)
	for {
		ins, err := d.cli.ContainerExecInspect(ctx, execID)
		if err != nil {
			return 0, fmt.Errorf("inspect exec: %w", err)
		}
		if !ins.Running {
			return ins.ExitCode, nil
		}
		if time.Now().After(deadline) {
			return 0, errors.New("exec output ended but the command still runs")
		}
		if err := pause(ctx, pollInterval); err != nil {
			return 0, err
		}
	}
}

// killExec kills every process carrying the exec's marker until the daemon
// reports the exec finished, within killBudget. It runs on a context detached
// from the (already cancelled) caller's, and only logs failures: the caller's
// error is the cancellation.
func (d *DockerDriver) killExec(ctx context.Context, containerID, execID, marker string) {
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killBudget)
	defer cancel()
	// Scans /proc inside the container because exec'd processes live in the
	// container's PID namespace and the daemon may be remote.
	script := `for f in /proc/[0-9]*/environ; do ` +
		`if tr '\0' '\n' <"$f" 2>/dev/null | grep -qx '` + execMarkerEnv + `=` + marker + `'; then ` +
		`p=${f#/proc/}; kill -KILL "${p%/environ}" 2>/dev/null; fi; done`
	for {
		ins, err := d.cli.ContainerExecInspect(kctx, execID)
		if err != nil {
			d.log.WarnContext(kctx, "inspect cancelled sandbox exec", "container_id", containerID, "error", err)
			return
		}
		if ins.Pid != 0 && !ins.Running {
			return
		}
		// Pid 0 means the daemon has not spawned the process yet: wait for it
		// rather than let it start after we gave up.
		if ins.Running {
			if err := d.runQuiet(kctx, containerID, []string{"sh", "-c", script}); err != nil {
				d.log.WarnContext(kctx, "kill cancelled sandbox exec", "container_id", containerID, "error", err)
				return
			}
		}
		if err := pause(kctx, pollInterval); err != nil {
			d.log.WarnContext(kctx, "cancelled sandbox exec still running", "container_id", containerID, "exec_id", execID)
			return
		}
	}
}

// runQuiet runs cmd in the container to completion, discarding its output.
func (d *DockerDriver) runQuiet(ctx context.Context, containerID string, cmd []string) error {
	created, err := d.cli.ContainerExecCreate(ctx, containerID, container.ExecOptions{
		Cmd: cmd, AttachStdout: true, AttachStderr: true,
	})
	if err != nil {
		return err
	}
	att, err := d.cli.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{})
	if err != nil {
		return err
	}
	defer att.Close()
	done := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(io.Discard, io.Discard, att.Reader)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		att.Close()
		<-done
		return ctx.Err()
	}
}

// Stop stops container id (the keep-alive exits at once on SIGTERM; the
// timeout only matters if it is wedged) and removes it.
func (d *DockerDriver) Stop(ctx context.Context, id string) error {
	secs := int(d.stopTimeout / time.Second)
	if err := d.cli.ContainerStop(ctx, id, container.StopOptions{Timeout: &secs}); err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("stop sandbox %s: %w", id, err)
	}
	err := d.cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true})
	switch {
	case err == nil, cerrdefs.IsNotFound(err):
	case cerrdefs.IsConflict(err):
		// AutoRemove is already removing it; wait so that callers (and the
		// reaper) never see a stopped-but-listed container after Stop.
		if err := d.waitRemoved(ctx, id); err != nil {
			return fmt.Errorf("remove sandbox %s: %w", id, err)
		}
	default:
		return fmt.Errorf("remove sandbox %s: %w", id, err)
	}
	d.log.InfoContext(ctx, "sandbox stopped", "container_id", id)
	return nil
}

func (d *DockerDriver) waitRemoved(ctx context.Context, id string) error {
	resC, errC := d.cli.ContainerWait(ctx, id, container.WaitConditionRemoved)
	select {
	case <-resC:
		return nil
	case err := <-errC:
		if err == nil || cerrdefs.IsNotFound(err) {
			return nil
		}
		return err
	}
}

// List returns every container (running or not) matching the label filter.
func (d *DockerDriver) List(ctx context.Context, labelKey string) ([]Container, error) {
	if labelKey == "" {
		// An empty filter would list every container on the host.
		return nil, errors.New("list sandboxes: empty label filter")
	}
	found, err := d.cli.ContainerList(ctx, container.ListOptions{
		All:     true,
		Filters: filters.NewArgs(filters.Arg("label", labelKey)),
	})
	if err != nil {
		return nil, fmt.Errorf("list sandboxes with label %s: %w", labelKey, err)
	}
	out := make([]Container, 0, len(found))
	for _, c := range found {
		out = append(out, Container{ID: c.ID, Image: c.Image, Labels: c.Labels})
	}
	return out, nil
}

func newMarker() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("exec marker: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// pause waits for d or until ctx ends.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// cappedBuffer keeps the first limit bytes written and counts the rest, so a
// runaway command is still drained (it would block on a full pipe otherwise)
// without growing memory.
type cappedBuffer struct {
	limit   int
	buf     []byte
	omitted int64
}

func newCappedBuffer(limit int) *cappedBuffer {
	return &cappedBuffer{limit: limit}
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if room := c.limit - len(c.buf); room > 0 {
		k := min(room, len(p))
		c.buf = append(c.buf, p[:k]...)
		p = p[k:]
	}
	c.omitted += int64(len(p))
	return n, nil
}

// result returns the kept output, with the truncation notice appended when
// anything was dropped.
func (c *cappedBuffer) result() (string, bool) {
	if c.omitted == 0 {
		return string(c.buf), false
	}
	kept := c.buf
	// Do not end on half a UTF-8 character; the dropped bytes count as omitted.
	if start := lastRuneStart(kept); start >= 0 && !utf8.FullRune(kept[start:]) {
		c.omitted += int64(len(kept) - start)
		kept = kept[:start]
		c.buf = kept
	}
	return fmt.Sprintf("%s\n[output truncated: %d bytes omitted]", kept, c.omitted), true
}

// lastRuneStart returns the index of the start of the last (possibly
// incomplete) UTF-8 sequence in b, or -1.
func lastRuneStart(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			return i
		}
	}
	return -1
}
