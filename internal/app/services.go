package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bae-go/bae-go/internal/config"
	"github.com/bae-go/bae-go/internal/lib/live"
	"github.com/bae-go/bae-go/internal/mcp"
	"github.com/bae-go/bae-go/internal/sandbox"
	"github.com/bae-go/bae-go/internal/sessiontools"
	"github.com/bae-go/bae-go/internal/telemetry"
	"github.com/bae-go/bae-go/store"
	"github.com/bae-go/bae-go/workflows"
)

// services are the server-side tool backends: MCP connections, the sandbox
// driver and image provisioning.
type services struct {
	mcp         *mcp.Manager
	driver      sandbox.Driver
	provisioner *sandbox.Provisioner
	tools       *sessiontools.Service
	closers     []func()
	deployment  string
}

// Provisioner exposes image provisioning, so tests can wait for a profile's
// images instead of polling the admin status endpoint.
func (s *services) Provisioner() *sandbox.Provisioner { return s.provisioner }

// Driver is the server's sandbox driver.
func (s *services) Driver() sandbox.Driver { return s.driver }

func (s *services) close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
}

// newSandboxDriver picks BAE_SANDBOX_DRIVER's implementation.
func newSandboxDriver(kind string, log *slog.Logger) (sandbox.Driver, error) {
	switch kind {
	case config.SandboxAppleContainer:
		if runtime.GOOS != "darwin" {
			return unsupportedDriver{reason: "the apple-container sandbox driver only runs on macOS"}, nil
		}
		return unsupportedDriver{reason: "the apple-container sandbox driver is not implemented in bae-go"}, nil
	default:
		d, err := sandbox.NewDockerDriver(log)
		if err != nil {
			log.Warn("docker sandbox driver unavailable; remote sandboxes will fail to start", "err", err)
			return unsupportedDriver{reason: "docker is unavailable: " + err.Error()}, nil
		}
		return d, nil
	}
}

func newServices(ctx context.Context, st *store.Store, file *config.File, cfg config.Server, log *slog.Logger) (*services, error) {
	s := &services{}
	s.mcp = mcp.New(mcp.Options{Lookup: file.MCPServer, Log: log, IdleTimeout: cfg.MCPIdleTimeout})
	s.closers = append(s.closers, s.mcp.Close)

	driver, err := newSandboxDriver(cfg.SandboxDriver, log)
	if err != nil {
		return nil, err
	}
	s.driver = driver
	if c, ok := driver.(io.Closer); ok {
		s.closers = append(s.closers, func() { _ = c.Close() })
	}
	s.provisioner = sandbox.NewProvisioner(driver, log)
	s.closers = append(s.closers, s.provisioner.Close)

	profiles, err := st.AllLiveProfiles(ctx)
	if err != nil {
		return nil, err
	}
	for _, p := range profiles {
		if len(p.AvailableSandboxes) == 0 {
			continue
		}
		if u, ok := driver.(unsupportedDriver); ok && cfg.SandboxDriver == config.SandboxAppleContainer {
			return nil, &config.ValidationError{Msg: fmt.Sprintf("BAE_SANDBOX_DRIVER=apple-container: %s, and profile %s declares available_sandboxes", u.reason, p.ID)}
		}
		s.provisioner.Provision(p.ID, p.AvailableSandboxes)
	}
	dep, err := st.DeploymentID(ctx)
	if err != nil {
		return nil, err
	}
	s.deployment = dep
	s.tools = &sessiontools.Service{Store: st, Driver: driver, Provisioner: s.provisioner, Log: log, Deployment: dep, Config: file}
	return s, nil
}

// sweepSandboxes removes, at start and then every interval (0: at start
// only) until ctx ends, the sandbox containers of this deployment whose
// session is not open. A session's sandbox is normally stopped when the
// session closes, by whichever replica runs the close; the sweep catches
// what that missed: containers of a replica killed before its session was
// closed elsewhere, stops that failed, a start that raced a close, and
// sessions a restored database no longer has. Containers of other
// deployments on the same engine are never touched (sandbox.Reap).
func (s *services) sweepSandboxes(ctx context.Context, st *store.Store, metrics *telemetry.Metrics, interval time.Duration, log *slog.Logger) {
	for _, r := range sandbox.ReapReasons() {
		metrics.SandboxesReaped(ctx, string(r), 0)
	}
	var tick <-chan time.Time
	if interval > 0 {
		t := time.NewTicker(interval)
		defer t.Stop()
		tick = t.C
	}
	// The engine can still list a container a sweep has just removed, and
	// the next sweep's stop of it then finds nothing to do: the last two
	// sweeps' removals are not counted or logged again (container ids are
	// never reused).
	var last, before map[string]bool
	for {
		last, before = s.reap(ctx, st, metrics, log, func(id string) bool { return last[id] || before[id] }), last
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
	}
}

// reap runs one sweep of the engine and returns the containers it
// removed; one counted by an earlier sweep is left out of the figures.
func (s *services) reap(ctx context.Context, st *store.Store, metrics *telemetry.Metrics, log *slog.Logger, counted func(id string) bool) map[string]bool {
	reaped, err := sandbox.Reap(ctx, s.driver, s.deployment, func(ctx context.Context, sessionID string) (sandbox.SessionState, error) {
		sess, err := st.GetSession(ctx, sessionID)
		if errors.Is(err, store.ErrNotFound) {
			return sandbox.SessionUnknown, nil
		}
		if err != nil {
			return sandbox.SessionOpen, err
		}
		if sess.State == store.StateOpen {
			return sandbox.SessionOpen, nil
		}
		return sandbox.SessionEnded, nil
	})
	removed := make(map[string]bool, len(reaped))
	n := 0
	for _, r := range reaped {
		removed[r.ID] = true
		if counted(r.ID) {
			continue
		}
		n++
		metrics.SandboxesReaped(ctx, string(r.Reason), 1)
		log.Info("removed a sandbox container whose session is not open",
			"container_id", r.ID, "image", r.Image, "session_id", r.Labels[sandbox.LabelSession], "reason", r.Reason)
	}
	if err != nil && ctx.Err() == nil {
		// An engine that is down (or absent where nothing uses sandboxes)
		// fails every sweep: not worth more than debug.
		log.Debug("sandbox sweep", "err", err)
	}
	if n > 0 {
		log.Info("removed sandbox containers of ended sessions", "count", n)
	}
	return removed
}

// sandboxStatus adapts the provisioner to the admin API.
type sandboxStatus struct{ p *sandbox.Provisioner }

func (s sandboxStatus) Status() []map[string]any {
	out := []map[string]any{}
	for _, ps := range s.p.Status() {
		out = append(out, map[string]any{"profile_id": ps.ProfileID, "images": ps.Images})
	}
	return out
}

// mcpCleaner announces a session's end to every replica, each of which
// closes its own MCP connections for it.
type mcpCleaner struct{ pool *pgxpool.Pool }

func (c mcpCleaner) CleanupSession(ctx context.Context, in workflows.CleanupInput) error {
	return live.Publish(ctx, c.pool, "closed:"+in.SessionID)
}

// unsupportedDriver fails every call with reason.
type unsupportedDriver struct{ reason string }

func (u unsupportedDriver) err() error                                { return errors.New(u.reason) }
func (u unsupportedDriver) EnsureImage(context.Context, string) error { return u.err() }
func (u unsupportedDriver) Start(context.Context, string, map[string]string, sandbox.Policy) (sandbox.Handle, error) {
	return sandbox.Handle{}, u.err()
}
func (u unsupportedDriver) Exec(context.Context, string, string, io.Reader) (sandbox.ExecResult, error) {
	return sandbox.ExecResult{}, u.err()
}
func (u unsupportedDriver) ExecOnce(context.Context, string, sandbox.ExecRequest) (sandbox.ExecResult, error) {
	return sandbox.ExecResult{}, u.err()
}
func (u unsupportedDriver) CancelExec(context.Context, string, string) error  { return u.err() }
func (u unsupportedDriver) ReleaseExec(context.Context, string, string) error { return u.err() }
func (u unsupportedDriver) Stop(context.Context, string) error                { return u.err() }
func (u unsupportedDriver) List(context.Context, string) ([]sandbox.Container, error) {
	return nil, u.err()
}
