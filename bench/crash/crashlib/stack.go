package crashlib

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/bae-go/bae-go/bench/benchstack"
	"github.com/bae-go/bae-go/internal/lib/adminkey"
	"github.com/bae-go/bae-go/internal/lib/tcpproxy"
	"github.com/bae-go/bae-go/internal/testing/devstack"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/procserver"
)

const (
	// healthWithin bounds how long a restarted baesrv (or Temporal) may take
	// to serve again before the run gives up.
	healthWithin = 2 * time.Minute
	healthPoll   = 50 * time.Millisecond
)

// stack is the environment of one run: a fresh database, a Temporal that
// outlives baesrv, the fake provider, and baesrv itself as a subprocess that
// the killer may SIGKILL at any moment.
type stack struct {
	log     *slog.Logger
	o       Options
	workDir string
	logDir  string

	baseDB string
	db     *benchstack.Database // dialled directly for the bench's own checks
	// proxy sits between baesrv and PostgreSQL: Down/Up is an outage.
	proxy *tcpproxy.Proxy

	fake *fakeprovider.Server

	devMu   sync.Mutex
	devOpts devstack.Options
	dev     *devstack.Server
	tc      client.Client // the run's own Temporal client, for Control queries

	bin        string
	clientAddr string
	adminAddr  string
	dataDir    string
	env        []string
	adminKey   string

	srvMu       sync.Mutex
	srv         *exec.Cmd
	srvDone     chan struct{}
	incarnation int
	closing     bool
	// unexpected counts baesrv exits nobody asked for (a crash of its own).
	unexpected []string
}

func startStack(ctx context.Context, o Options, respond func(fakeprovider.Recorded) fakeprovider.Reply, extraTOML string) (_ *stack, err error) {
	s := &stack{log: o.Log, o: o, baseDB: o.DatabaseURL}
	defer func() {
		if err != nil {
			s.close(true)
		}
	}()
	if s.workDir, err = os.MkdirTemp("", "bae-crash-"); err != nil {
		return nil, fmt.Errorf("create work dir: %w", err)
	}
	s.logDir = filepath.Join(s.workDir, "logs")
	s.dataDir = filepath.Join(s.workDir, "data")
	for _, d := range []string{s.logDir, s.dataDir} {
		if err = os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("create %s: %w", d, err)
		}
	}

	s.bin = o.BaesrvPath
	if s.bin == "" {
		if s.bin, err = buildServer(ctx, s.log); err != nil {
			return nil, err
		}
	}
	if s.db, err = benchstack.CreateDatabase(ctx, s.baseDB, "bae_crash_", nil); err != nil {
		return nil, err
	}
	srvDB, err := url.Parse(s.db.URL)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	target := srvDB.Host
	if srvDB.Port() == "" {
		target = net.JoinHostPort(srvDB.Hostname(), "5432")
	}
	if s.proxy, err = tcpproxy.Start(target); err != nil {
		return nil, err
	}
	srvDB.Host = s.proxy.Addr()

	s.fake = fakeprovider.Start()
	s.fake.Respond(respond)

	if err = s.startTemporal(ctx); err != nil {
		return nil, err
	}
	tlog, err := s.fileLogger("temporal-client.log")
	if err != nil {
		return nil, err
	}
	if s.tc, err = client.DialContext(ctx, client.Options{
		HostPort: s.dev.FrontendAddr(), Namespace: s.dev.Namespace(), Logger: sdklog.NewStructuredLogger(tlog),
	}); err != nil {
		return nil, fmt.Errorf("dial temporal: %w", err)
	}

	ports, err := benchstack.FreePorts(2)
	if err != nil {
		return nil, err
	}
	// Fixed ports: a restarted baesrv must answer where clients already point.
	s.clientAddr = "127.0.0.1:" + strconv.Itoa(ports[0])
	s.adminAddr = "127.0.0.1:" + strconv.Itoa(ports[1])
	cfgPath := filepath.Join(s.workDir, "bae-config.toml")
	toml := benchstack.ProviderTOML(s.fake.URL()) + extraTOML
	if err = os.WriteFile(cfgPath, []byte(toml), 0o600); err != nil {
		return nil, fmt.Errorf("write config: %w", err)
	}
	s.env = procserver.ServerEnv(map[string]string{
		"BAE_DATABASE_URL":               srvDB.String(),
		"BAE_TEMPORAL_ADDR":              s.dev.FrontendAddr(),
		"BAE_TEMPORAL_NAMESPACE":         s.dev.Namespace(),
		"BAE_ADDR":                       s.clientAddr,
		"BAE_ADMIN_ADDR":                 s.adminAddr,
		"BAE_CONFIG":                     cfgPath,
		"BAE_DATA_DIR":                   s.dataDir,
		"BAE_ACTIVITY_HEARTBEAT_TIMEOUT": "1s",
		"BAE_TURN_TIMEOUT":               TurnTimeout.String(),
		"BAE_TASK_QUEUE":                 "bae-crash",
	})

	if err = s.startServer(); err != nil {
		return nil, err
	}
	if err = s.awaitHealthy(ctx); err != nil {
		return nil, err
	}
	if s.adminKey, err = adminkey.ReadKeyFile(filepath.Join(s.dataDir, "admin-key.pem")); err != nil {
		return nil, fmt.Errorf("read admin key: %w", err)
	}
	return s, nil
}

func (s *stack) fileLogger(name string) (*slog.Logger, error) {
	f, err := os.OpenFile(filepath.Join(s.logDir, name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log %s: %w", name, err)
	}
	return slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelWarn})), nil
}

// buildServer builds ./cmd/baesrv (procserver.Build: a stable path per
// checkout, so the slow link is skipped when the binary is up to date).
func buildServer(ctx context.Context, log *slog.Logger) (string, error) {
	t0 := time.Now()
	out, err := procserver.Build(ctx)
	if err != nil {
		return "", err
	}
	log.Info("baesrv built", "path", out, "took", time.Since(t0).Round(time.Millisecond))
	return out, nil
}

// startTemporal starts the devstack. With -kill-temporal its state lives in
// a SQLite file, so a Stop/Start keeps every workflow.
func (s *stack) startTemporal(ctx context.Context) error {
	if s.devOpts.FrontendPort == 0 {
		ports, err := benchstack.FreePorts(1)
		if err != nil {
			return err
		}
		tlog, err := s.fileLogger("temporal.log")
		if err != nil {
			return err
		}
		dataDir := ""
		if s.o.KillTemporal {
			dataDir = filepath.Join(s.workDir, "temporal")
		}
		s.devOpts = benchstack.TemporalOptions(ports[0], dataDir, tlog)
	}
	dev, err := devstack.Start(ctx, s.devOpts)
	if err != nil {
		return fmt.Errorf("start temporal: %w", err)
	}
	s.dev = dev
	return nil
}

// restartTemporal stops the devstack and starts it again on the same port
// and data dir; baesrv's client and worker reconnect on their own.
func (s *stack) restartTemporal(ctx context.Context) error {
	s.devMu.Lock()
	defer s.devMu.Unlock()
	if err := s.dev.Stop(); err != nil {
		s.log.Warn("stop temporal", "err", err)
	}
	return s.startTemporal(ctx)
}

// startServer launches a new baesrv incarnation.
func (s *stack) startServer() error {
	s.srvMu.Lock()
	defer s.srvMu.Unlock()
	return s.startServerLocked()
}

func (s *stack) startServerLocked() error {
	s.incarnation++
	logPath := filepath.Join(s.logDir, fmt.Sprintf("baesrv-%02d.log", s.incarnation))
	f, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("create %s: %w", logPath, err)
	}
	cmd := exec.Command(s.bin, "serve")
	cmd.Env = s.env
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start baesrv: %w", err)
	}
	done := make(chan struct{})
	s.srv, s.srvDone = cmd, done
	n := s.incarnation
	go func() {
		err := cmd.Wait()
		f.Close()
		close(done)
		s.srvMu.Lock()
		defer s.srvMu.Unlock()
		if s.srv != cmd || s.closing {
			return // killed on purpose, or replaced
		}
		// baesrv died by itself: note it and bring it back, as a supervisor
		// would, so the run measures recovery rather than stopping.
		s.unexpected = append(s.unexpected, fmt.Sprintf("baesrv incarnation %d exited on its own (%v); log %s", n, err, logPath))
		s.log.Warn("baesrv exited unexpectedly; restarting", "incarnation", n, "err", err, "log", logPath)
		if err := s.startServerLocked(); err != nil {
			s.log.Error("restart baesrv", "err", err)
		}
	}()
	return nil
}

// killServer SIGKILLs the running baesrv (no shutdown of any kind) and
// starts a new one with the same environment.
func (s *stack) killServer() error {
	s.srvMu.Lock()
	defer s.srvMu.Unlock()
	cmd, done := s.srv, s.srvDone
	s.srv = nil // tells the exit watcher this death was ours
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill baesrv pid %d: %w", cmd.Process.Pid, err)
	}
	<-done
	return s.startServerLocked()
}

// awaitHealthy polls /healthz on both ports until they answer 200.
func (s *stack) awaitHealthy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, healthWithin)
	defer cancel()
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	ok := func(addr string) bool {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/healthz", nil)
		if err != nil {
			return false
		}
		resp, err := hc.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	tick := time.NewTicker(healthPoll)
	defer tick.Stop()
	for !ok(s.clientAddr) || !ok(s.adminAddr) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("baesrv not healthy on %s within %s (logs in %s): %w", s.clientAddr, healthWithin, s.logDir, ctx.Err())
		case <-tick.C:
		}
	}
	return nil
}

// dbName is the run's database, "" before it is created.
func (s *stack) dbName() string {
	if s.db == nil {
		return ""
	}
	return s.db.Name
}

func (s *stack) unexpectedExits() []string {
	s.srvMu.Lock()
	defer s.srvMu.Unlock()
	return append([]string(nil), s.unexpected...)
}

// close stops everything. The work dir (logs) and database stay when keep
// is set, for post-mortems.
func (s *stack) close(keep bool) {
	s.srvMu.Lock()
	s.closing = true
	cmd, done := s.srv, s.srvDone
	s.srvMu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Signal(syscall.SIGKILL)
			<-done
		}
	}
	if s.tc != nil {
		s.tc.Close()
	}
	s.devMu.Lock()
	if s.dev != nil {
		if err := s.dev.Stop(); err != nil {
			s.log.Warn("stop temporal", "err", err)
		}
	}
	s.devMu.Unlock()
	if s.fake != nil {
		s.fake.Close()
	}
	if s.proxy != nil {
		_ = s.proxy.Close()
	}
	if keep {
		if s.workDir != "" {
			s.log.Info("kept for inspection", "work_dir", s.workDir, "database", s.dbName())
		}
		return
	}
	if s.db != nil {
		if err := s.db.Drop(); err != nil {
			s.log.Warn("drop crash database", "err", err)
		}
	}
	if s.workDir != "" {
		_ = os.RemoveAll(s.workDir)
	}
}
