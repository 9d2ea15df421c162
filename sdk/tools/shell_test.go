package tools

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/sandbox"
	"github.com/bae-go/bae-go/internal/testing/sandboxtest"
	"github.com/bae-go/bae-go/sdk"
)

func run(t *testing.T, ctx context.Context, tool sdk.Tool, input any) (any, error) {
	t.Helper()
	raw, err := json.Marshal(input)
	require.NoError(t, err)
	return tool.Handler(ctx, raw)
}

func TestShellQuote(t *testing.T) {
	assert.Equal(t, `'it'\''s'`, ShellQuote("it's"))
}

func TestRunShellNamedQuotesInput(t *testing.T) {
	_, ctx, _ := fakeSession(t)
	tool, err := RunShellNamed("say", "Print a message.", "printf %s {msg}", Host{}, nil)
	require.NoError(t, err)
	assert.Equal(t, []string{"msg"}, tool.InputSchema.(map[string]any)["required"])

	hostile := `a'; echo pwned; '$(id)`
	out, err := run(t, ctx, tool, map[string]string{"msg": hostile})
	require.NoError(t, err)
	res := out.(sdk.ExecResult)
	assert.Equal(t, hostile, res.Stdout, "one literal argument, no second command")

	_, err = run(t, ctx, tool, map[string]any{"msg": 3})
	assert.ErrorContains(t, err, "missing required string parameter")
}

// TestRunShellNamedRefusesInjections reproduces the two injections a
// single-quoting template allowed, on the host's shell: a quoted
// placeholder ran $(…), and a value beginning with "-" became an option.
func TestRunShellNamedRefusesInjections(t *testing.T) {
	_, ctx, rec := fakeSession(t)
	dir := t.TempDir()

	_, err := RunShellNamed("say", "Print a message.", `echo "{msg}"`, Host{}, nil)
	assert.ErrorContains(t, err, "placeholder {msg} is inside double quotes")
	_, err = RunShellNamed("say", "Print a message.", `echo '{msg}'`, Host{}, nil)
	assert.ErrorContains(t, err, "placeholder {msg} is inside single quotes")

	written := filepath.Join(dir, "written")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "in"), []byte("b\na\n"), 0o644))
	sorter, err := RunShellNamed("sort", "Sort a file.", "cd "+ShellQuote(dir)+" && sort {file}", Host{}, nil)
	require.NoError(t, err)
	out, err := run(t, ctx, sorter, map[string]string{"file": "-o" + written})
	require.NoError(t, err, "a refused value is an in-band result the model can read")
	assert.Contains(t, out, `begins with \"-\"`)
	assert.NoFileExists(t, written)
	assert.Empty(t, rec.byMethod("session.reportLocalSandbox"), "nothing ran")

	out, err = run(t, ctx, sorter, map[string]string{"file": "in"})
	require.NoError(t, err)
	assert.Equal(t, "a\nb\n", out.(sdk.ExecResult).Stdout)

	afterDashes, err := RunShellNamed("sort", "Sort a file.", "cd "+ShellQuote(dir)+" && sort -- {file}", Host{}, nil)
	require.NoError(t, err)
	out, err = run(t, ctx, afterDashes, map[string]string{"file": "-o" + written})
	require.NoError(t, err)
	assert.NotZero(t, out.(sdk.ExecResult).ExitCode, "after --, the value is a file name sort cannot find")
	assert.NoFileExists(t, written)
}

func TestRunShellCommandOnHost(t *testing.T) {
	_, ctx, rec := fakeSession(t)
	tool := RunShellCommand(Host{}, nil)
	out, err := run(t, ctx, tool, map[string]string{"command": "echo out; echo err >&2; exit 3"})
	require.NoError(t, err, "a non-zero exit is a result")
	assert.Equal(t, sdk.ExecResult{Stdout: "out\n", Stderr: "err\n", ExitCode: 3}, out)

	reports := rec.byMethod("session.reportLocalSandbox")
	require.Len(t, reports, 2)
	assert.Equal(t, map[string]any{"state": "running", "image": nil, "unsandboxed": true, "container_id": nil, "detail": nil}, reports[0])
	assert.Equal(t, "stopped", reports[1]["state"])

	_, err = run(t, ctx, tool, map[string]string{})
	assert.ErrorContains(t, err, "requires a string command")

	rendered := RunShellCommand(Host{}, func(r sdk.ExecResult) any { return strings.ToUpper(r.Stdout) })
	out, err = run(t, ctx, rendered, map[string]string{"command": "echo hi"})
	require.NoError(t, err)
	assert.Equal(t, "HI\n", out)
}

func TestHostExecCancelKillsTheProcessGroup(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	marker := filepath.Join(t.TempDir(), "started")
	go func() {
		_, err := Host{}.Exec(ctx, "sleep 60 & touch "+marker+"; wait")
		done <- err
	}()
	require.Eventually(t, func() bool { _, err := os.Stat(marker); return err == nil }, 10*time.Second, 5*time.Millisecond)
	start := time.Now()
	cancel()
	assert.ErrorIs(t, <-done, context.Canceled)
	// Were the background sleep spared, it would hold the pipes open until
	// WaitDelay (2s) gives up on it.
	assert.Less(t, time.Since(start), 1500*time.Millisecond)
}

func TestRemoteExecutorUsesSessionRPC(t *testing.T) {
	_, ctx, rec := fakeSession(t)
	rec.results["session.execRemoteSandbox"] = map[string]any{"stdout": "Python 3.12\n", "stderr": "", "exit_code": 0}
	tool := RunShellCommand(Remote{}, func(r sdk.ExecResult) any { return map[string]any{"stdout": r.Stdout} })
	out, err := run(t, ctx, tool, map[string]string{"command": "python --version"})
	require.NoError(t, err)
	assert.Equal(t, map[string]any{"stdout": "Python 3.12\n"}, out)
	assert.Equal(t, []map[string]any{{"command": "python --version"}}, rec.byMethod("session.execRemoteSandbox"))

	_, err = Remote{}.Exec(context.Background(), "true")
	assert.ErrorIs(t, err, errNoSession)
}

func TestRemoteShellCommandSpecRequiresCommand(t *testing.T) {
	spec := RemoteShellCommandSpec()
	assert.Equal(t, "run_shell_command", spec.Name)
	assert.Equal(t, []string{"command"}, spec.InputSchema.(map[string]any)["required"])
}

// fakeDocker writes a docker-compatible script that logs its arguments.
func fakeDocker(t *testing.T, imagePresent bool) (engine, log string) {
	dir := t.TempDir()
	log = filepath.Join(dir, "calls")
	inspect := "exit 1"
	if imagePresent {
		inspect = "exit 0"
	}
	script := `#!/bin/sh
echo "$*" >> ` + log + `
case "$1" in
  image) ` + inspect + ` ;;
  pull) exit 0 ;;
  run) echo cid123 ;;
  exec) shift; [ "$1" = "-i" ] && shift; shift; "$@" ;;
  rm) exit 0 ;;
esac
`
	engine = filepath.Join(dir, "docker")
	require.NoError(t, os.WriteFile(engine, []byte(script), 0o755))
	return engine, log
}

func TestLocalSandboxLifecycle(t *testing.T) {
	s, ctx, rec := fakeSession(t)
	engine, log := fakeDocker(t, false)
	sb := &LocalSandbox{Image: "alpine:3", Engine: engine}

	tool := RunShellCommand(sb, nil)
	out, err := run(t, ctx, tool, map[string]string{"command": "echo inside"})
	require.NoError(t, err)
	assert.Equal(t, "inside\n", out.(sdk.ExecResult).Stdout)
	_, err = run(t, ctx, tool, map[string]string{"command": "true"})
	require.NoError(t, err)
	require.NoError(t, sb.Stop(sdk.ContextWithSession(context.Background(), s)))
	require.NoError(t, sb.Stop(ctx), "stopping twice is a no-op")

	calls, err := os.ReadFile(log)
	require.NoError(t, err)
	assert.Equal(t, []string{
		"image inspect alpine:3",
		"pull alpine:3",
		"run -d --rm --cap-drop=ALL --security-opt=no-new-privileges --network=none --memory=512m --memory-swap=512m --cpus=1 --pids-limit=256 alpine:3 sleep infinity",
		"exec cid123 sh -c echo inside",
		"exec cid123 sh -c true",
		"rm -f cid123",
	}, strings.Split(strings.TrimSpace(string(calls)), "\n"), "the container starts once and is reused")

	reports := rec.byMethod("session.reportLocalSandbox")
	require.Len(t, reports, 2)
	assert.Equal(t, map[string]any{"state": "running", "image": "alpine:3", "container_id": "cid123", "detail": nil}, reports[0])
	assert.Equal(t, map[string]any{"state": "stopped", "image": "alpine:3", "container_id": "cid123", "detail": nil}, reports[1])
}

func TestLocalSandboxStartFailureIsReported(t *testing.T) {
	_, ctx, rec := fakeSession(t)
	sb := &LocalSandbox{Image: "alpine:3", Engine: filepath.Join(t.TempDir(), "no-such-docker")}
	_, err := sb.Exec(ctx, "true")
	require.Error(t, err)
	reports := rec.byMethod("session.reportLocalSandbox")
	require.Len(t, reports, 1)
	assert.Equal(t, "error", reports[0]["state"])
	assert.NotEmpty(t, reports[0]["detail"])
}

func TestLocalSandboxCloseHook(t *testing.T) {
	engine, log := fakeDocker(t, true)
	sb := &LocalSandbox{Image: "alpine:3", Engine: engine}
	s, ctx, _ := fakeSession(t, sb.Option())
	_, err := sb.Exec(ctx, "true")
	require.NoError(t, err)
	_ = s.Close(context.Background()) // the fake answers DELETE with a non-JSON body; only the hook matters
	calls, _ := os.ReadFile(log)
	assert.Contains(t, string(calls), "rm -f cid123")
}

// busyboxTestImage builds a busybox image for t on the real engine (no
// registry is needed, as in the server's Docker tests); it goes at test
// end with every container started from it (sandboxtest.Image).
func busyboxTestImage(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("docker test")
	}
	return sandboxtest.Image(t, "bae-sdk-tools-test")
}

// TestLocalSandboxRealDocker runs the local sandbox against the real
// engine, on a busybox image it builds itself.
func TestLocalSandboxRealDocker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	image := busyboxTestImage(t)

	_, sctx, rec := fakeSession(t)
	sb := NewLocalSandbox(image)
	t.Cleanup(func() { _ = sb.Stop(sctx) })
	res, err := sb.Exec(sctx, "echo $((6*7)); exit 4")
	require.NoError(t, err)
	assert.Equal(t, sdk.ExecResult{Stdout: "42\n", ExitCode: 4}, res)
	id, err := sb.Start(sctx)
	require.NoError(t, err)
	res, err = sb.Exec(sctx, "cat /etc/hostname")
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(id, strings.TrimSpace(res.Stdout)), "one container serves every call: %s vs %s", id, res.Stdout)

	require.NoError(t, sb.Stop(sctx))
	reports := rec.byMethod("session.reportLocalSandbox")
	require.Len(t, reports, 2)
	assert.Equal(t, string(sdk.SandboxRunning), reports[0]["state"])
	assert.Equal(t, string(sdk.SandboxStopped), reports[1]["state"])
	out, err := exec.CommandContext(ctx, "docker", "ps", "-aq", "--no-trunc", "--filter", "id="+id).Output()
	require.NoError(t, err)
	assert.Empty(t, strings.TrimSpace(string(out)), "Stop removes the container")
}

// hostConfig is the part of `docker inspect`'s HostConfig the bounds set.
type hostConfig struct {
	CapDrop     []string
	CapAdd      []string
	SecurityOpt []string
	NetworkMode string
	Memory      int64
	MemorySwap  int64
	NanoCpus    int64
	PidsLimit   *int64
}

func inspectHostConfig(t *testing.T, ctx context.Context, id string) (hostConfig, string) {
	t.Helper()
	out, err := exec.CommandContext(ctx, "docker", "inspect", "--format", "{{json .HostConfig}}|{{.Config.User}}", id).Output()
	require.NoError(t, err)
	hc, user, _ := strings.Cut(strings.TrimSpace(string(out)), "|")
	var h hostConfig
	require.NoError(t, json.Unmarshal([]byte(hc), &h))
	return h, user
}

// TestLocalSandboxBoundsRealDocker: the SDK's local sandbox starts with the
// server's bounded defaults, as `docker inspect` shows them, and each bound
// can be overridden.
func TestLocalSandboxBoundsRealDocker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	image := busyboxTestImage(t)
	_, sctx, _ := fakeSession(t)

	sb := NewLocalSandbox(image)
	t.Cleanup(func() { _ = sb.Stop(sctx) })
	id, err := sb.Start(sctx)
	require.NoError(t, err)
	h, user := inspectHostConfig(t, ctx, id)
	pids := int64(sandbox.DefaultPids)
	assert.Equal(t, hostConfig{
		CapDrop: []string{"ALL"}, SecurityOpt: []string{"no-new-privileges"}, NetworkMode: "none",
		Memory: sandbox.DefaultMemoryMiB << 20, MemorySwap: sandbox.DefaultMemoryMiB << 20,
		NanoCpus: int64(sandbox.DefaultCPUs * 1e9), PidsLimit: &pids,
	}, h)
	assert.Empty(t, user)
	// What the bounds mean inside: no effective capability, loopback only.
	res, err := sb.Exec(sctx, "grep CapEff /proc/self/status; ls /sys/class/net")
	require.NoError(t, err)
	assert.Equal(t, "CapEff:\t0000000000000000\nlo\n", res.Stdout)
	require.NoError(t, sb.Stop(sctx))

	custom := &LocalSandbox{Image: image, Limits: SandboxLimits{
		MemoryMiB: 64, CPUs: 0.5, Pids: 64, CapAdd: []string{"CHOWN"}, AllowNewPrivileges: true, User: "65534", Network: "bridge",
	}}
	t.Cleanup(func() { _ = custom.Stop(sctx) })
	id, err = custom.Start(sctx)
	require.NoError(t, err)
	h, user = inspectHostConfig(t, ctx, id)
	pids = 64
	assert.Equal(t, hostConfig{
		CapDrop: []string{"ALL"}, CapAdd: []string{"CAP_CHOWN"}, NetworkMode: "bridge", // the CLI adds the prefix
		Memory: 64 << 20, MemorySwap: 64 << 20, NanoCpus: 5e8, PidsLimit: &pids,
	}, h)
	assert.Equal(t, "65534", user)
	res, err = custom.Exec(sctx, "id -u")
	require.NoError(t, err)
	assert.Equal(t, "65534\n", res.Stdout)
}
