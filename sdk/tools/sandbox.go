package tools

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/bae-go/bae-go/sandboxlimits"
	"github.com/bae-go/bae-go/sdk"
)

// Executor runs one shell command somewhere and returns its result. A
// non-zero exit code is a result; an error means the command could not run.
type Executor interface {
	Exec(ctx context.Context, command string) (sdk.ExecResult, error)
}

// errNoSession: an executor that needs the session ran outside a turn.
var errNoSession = errors.New("no session in context (run inside a tool handler, or use sdk.ContextWithSession)")

// Remote runs commands in the session's remote sandbox through
// session.execRemoteSandbox: manual dispatch, the handler sees the raw
// result. Start the sandbox first with Session.StartRemoteSandbox.
type Remote struct{}

// Exec implements Executor.
func (Remote) Exec(ctx context.Context, command string) (sdk.ExecResult, error) {
	s := sdk.SessionFromContext(ctx)
	if s == nil {
		return sdk.ExecResult{}, errNoSession
	}
	return s.ExecRemoteSandbox(ctx, command)
}

// Host runs commands through /bin/sh -c on the harness host, with the
// harness's own privileges: no isolation at all. Each run is reported as an
// unsandboxed local sandbox lifecycle.
type Host struct{}

// Exec implements Executor.
func (Host) Exec(ctx context.Context, command string) (sdk.ExecResult, error) {
	report(ctx, sdk.LocalSandboxReport{State: sdk.SandboxRunning, Unsandboxed: true})
	res, err := runProcess(ctx, nil, 0, "/bin/sh", "-c", command)
	if err != nil {
		report(ctx, sdk.LocalSandboxReport{State: sdk.SandboxFailed, Unsandboxed: true, Detail: err.Error()})
		return sdk.ExecResult{}, err
	}
	report(ctx, sdk.LocalSandboxReport{State: sdk.SandboxStopped, Unsandboxed: true})
	return res.ExecResult, nil
}

// report sends a local sandbox report when ctx carries a session. Reports
// are telemetry: a refusal is logged, never returned.
func report(ctx context.Context, r sdk.LocalSandboxReport) {
	s := sdk.SessionFromContext(ctx)
	if s == nil {
		return
	}
	if err := s.ReportLocalSandbox(context.WithoutCancel(ctx), r); err != nil {
		s.Logger().WarnContext(ctx, "bae: local sandbox report failed", "state", r.State, "image", r.Image, "err", err)
	}
}

// LocalSandbox is one container of the harness's own Docker engine, started
// lazily from Image on the first Exec (sleep infinity keeps it alive) and
// stopped by Stop or, with Option, by Session.Close. Every transition is
// reported with session.reportLocalSandbox. The container is bounded like
// the server's remote sandboxes (see SandboxLimits): no capabilities, no
// privilege gain, no network, and memory, CPU and process limits. The image
// must still hold no secret you would not hand the model.
type LocalSandbox struct {
	Image string
	// Engine is the docker-compatible CLI (default "docker").
	Engine string
	// Limits overrides the container's bounds; the zero value keeps every
	// default.
	Limits SandboxLimits

	mu sync.Mutex
	id string
}

// SandboxLimits bounds a LocalSandbox's container. Each zero field means
// the default of the server's remote sandboxes (package sandboxlimits and
// docs/operations.md, "Sandbox defaults"): 512 MiB of memory and no swap, 1
// CPU, 256 processes, every capability dropped, no-new-privileges, the
// image's user, and network "none" (loopback only).
type SandboxLimits struct {
	MemoryMiB int64
	CPUs      float64
	Pids      int64
	// CapAdd lists capabilities added back after dropping all of them, such
	// as "CHOWN", "SETUID", "SETGID" for a package manager.
	CapAdd []string
	// AllowNewPrivileges lets setuid binaries (sudo) raise privileges.
	AllowNewPrivileges bool
	// User runs the container's processes ("1000", "app:app"); "" keeps
	// the image's.
	User string
	// Network is the network mode: "none" by default; "bridge" or a network
	// of your own to let commands reach the network.
	Network string
}

// runFlags are the docker run flags for l, each as one --flag=value
// argument so no value can be read as another flag.
func (l SandboxLimits) runFlags() []string {
	mem, cpus, pids, network := l.MemoryMiB, l.CPUs, l.Pids, l.Network
	if mem <= 0 {
		mem = sandboxlimits.MemoryMiB
	}
	if !(cpus > 0) {
		cpus = sandboxlimits.CPUs
	}
	if pids <= 0 {
		pids = sandboxlimits.Pids
	}
	if network == "" {
		network = sandboxlimits.Network
	}
	flags := []string{"--cap-drop=ALL"}
	for _, c := range l.CapAdd {
		flags = append(flags, "--cap-add="+c)
	}
	if !l.AllowNewPrivileges {
		flags = append(flags, "--security-opt=no-new-privileges")
	}
	if l.User != "" {
		flags = append(flags, "--user="+l.User)
	}
	m := strconv.FormatInt(mem, 10) + "m"
	return append(flags,
		"--network="+network,
		"--memory="+m, "--memory-swap="+m, // equal: no swap on top
		"--cpus="+strconv.FormatFloat(cpus, 'f', -1, 64),
		"--pids-limit="+strconv.FormatInt(pids, 10))
}

// NewLocalSandbox returns a LocalSandbox for image.
func NewLocalSandbox(image string) *LocalSandbox { return &LocalSandbox{Image: image} }

func (l *LocalSandbox) engine() string {
	if l.Engine == "" {
		return "docker"
	}
	return l.Engine
}

// docker runs one engine command; a non-zero exit becomes an error that
// carries stderr.
func (l *LocalSandbox) docker(ctx context.Context, args ...string) (string, error) {
	res, err := runProcess(ctx, nil, 64<<10, l.engine(), args...)
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", l.engine(), args[0], err)
	}
	if res.ExitCode != 0 {
		return "", fmt.Errorf("%s %s: exit %d: %s", l.engine(), args[0], res.ExitCode, strings.TrimSpace(res.Stderr))
	}
	return res.Stdout, nil
}

// Start makes sure the container runs (pulling the image if needed) and
// returns its id. Exec calls it.
func (l *LocalSandbox) Start(ctx context.Context) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.id != "" {
		return l.id, nil
	}
	id, err := l.start(ctx)
	if err != nil {
		report(ctx, sdk.LocalSandboxReport{State: sdk.SandboxFailed, Image: l.Image, Detail: err.Error()})
		return "", err
	}
	l.id = id
	report(ctx, sdk.LocalSandboxReport{State: sdk.SandboxRunning, Image: l.Image, ContainerID: id})
	return id, nil
}

func (l *LocalSandbox) start(ctx context.Context) (string, error) {
	if l.Image == "" {
		return "", errors.New("local sandbox without an image")
	}
	if _, err := l.docker(ctx, "image", "inspect", l.Image); err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		if _, err := l.docker(ctx, "pull", l.Image); err != nil {
			return "", err
		}
	}
	args := append(append([]string{"run", "-d", "--rm"}, l.Limits.runFlags()...), l.Image, "sleep", "infinity")
	out, err := l.docker(ctx, args...)
	if err != nil {
		return "", err
	}
	id := strings.TrimSpace(out)
	if id == "" {
		return "", errors.New("docker run printed no container id")
	}
	return id, nil
}

// Exec implements Executor: it runs command with sh -c in the container.
func (l *LocalSandbox) Exec(ctx context.Context, command string) (sdk.ExecResult, error) {
	res, err := l.exec(ctx, nil, 0, command)
	return res.ExecResult, err
}

func (l *LocalSandbox) exec(ctx context.Context, stdin []byte, limit int, command string) (procResult, error) {
	id, err := l.Start(ctx)
	if err != nil {
		return procResult{}, err
	}
	args := []string{"exec", id, "sh", "-c", command}
	if stdin != nil {
		args = []string{"exec", "-i", id, "sh", "-c", command}
	}
	res, err := runProcess(ctx, stdin, limit, l.engine(), args...)
	if err != nil && ctx.Err() == nil {
		report(ctx, sdk.LocalSandboxReport{State: sdk.SandboxFailed, Image: l.Image, ContainerID: id, Detail: err.Error()})
	}
	return res, err
}

// Stop removes the container, if one was started, and reports it stopped.
func (l *LocalSandbox) Stop(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.id == "" {
		return nil
	}
	id := l.id
	l.id = ""
	if _, err := l.docker(ctx, "rm", "-f", id); err != nil && !strings.Contains(err.Error(), "No such container") {
		report(ctx, sdk.LocalSandboxReport{State: sdk.SandboxFailed, Image: l.Image, ContainerID: id, Detail: err.Error()})
		return fmt.Errorf("stop local sandbox %s: %w", l.Image, err)
	}
	report(ctx, sdk.LocalSandboxReport{State: sdk.SandboxStopped, Image: l.Image, ContainerID: id})
	return nil
}

// Option makes Session.Close stop the container.
func (l *LocalSandbox) Option() sdk.Option {
	return sdk.WithCloseHook(func(ctx context.Context, s *sdk.Session) error {
		return l.Stop(sdk.ContextWithSession(ctx, s))
	})
}
