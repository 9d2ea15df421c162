package chaoslib

import (
	"bytes"
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
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bae-go/bae-go/bench/benchstack"
	"github.com/bae-go/bae-go/internal/config"
	"github.com/bae-go/bae-go/internal/lib/tcpproxy"
	"github.com/bae-go/bae-go/internal/testing/procserver"
)

// readyWithin bounds how long a (re)started process may take to serve.
const readyWithin = 3 * time.Minute

// topology is the production topology of one run: the Temporal server
// built from its module (scripts/temporal-up.sh) and N `baesrv serve`
// replicas, all on PostgreSQL reached through one TCP proxy, so that an
// outage or a fast restart of the database is the proxy refusing and
// severing every connection (the machine's PostgreSQL is shared and is
// never touched itself).
type topology struct {
	log     *slog.Logger
	root    string
	workDir string
	proxy   *tcpproxy.Proxy
	db      *benchstack.Database
	baseDB  string

	temporalEnv  []string
	temporalAddr string
	temporalDBs  []string
	tmu          sync.Mutex
	temporal     *exec.Cmd
	temporalDone chan struct{}
	temporalN    int

	replicas []*replica
}

// replica is one `baesrv serve` process; it may be killed and restarted
// on the same ports any number of times.
type replica struct {
	name       string
	bin        string
	env        []string
	clientAddr string
	adminAddr  string
	logDir     string

	mu          sync.Mutex
	cmd         *exec.Cmd
	done        chan struct{}
	incarnation int
	up          bool
	startedAt   time.Time
	unexpected  []string
	// open counts the clients' requests to this replica (either port)
	// whose response bodies are not closed yet: streams and calls in
	// flight, what its goroutines serve.
	open atomic.Int64
}

// moduleRoot finds the repository (scripts/ live there) from the working
// directory up.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.Contains(b, []byte("module github.com/bae-go/bae-go\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run from inside the bae-go repository (scripts/temporal-up.sh is needed)")
		}
		dir = parent
	}
}

// freePorts draws n distinct free loopback ports below 32768 (Temporal
// stores membership ports in a smallint).
func freePorts(n int) ([]int, error) {
	var ports []int
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for p := 20000 + int(time.Now().UnixNano()%10000); len(ports) < n && p < 32768; p++ {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		held = append(held, l)
		ports = append(ports, p)
	}
	if len(ports) < n {
		return nil, fmt.Errorf("no %d free ports below 32768", n)
	}
	return ports, nil
}

func startTopology(ctx context.Context, o Options, configTOML string) (_ *topology, err error) {
	t := &topology{log: o.Log, baseDB: o.DatabaseURL}
	defer func() {
		if err != nil {
			t.close(true)
		}
	}()
	if t.root, err = moduleRoot(); err != nil {
		return nil, err
	}
	if t.workDir, err = os.MkdirTemp("", "bae-chaos-"); err != nil {
		return nil, err
	}
	if t.db, err = benchstack.CreateDatabase(ctx, o.DatabaseURL, "bae_chaos_", nil); err != nil {
		return nil, err
	}
	u, err := url.Parse(t.db.URL)
	if err != nil {
		return nil, err
	}
	target := u.Host
	if u.Port() == "" {
		target = net.JoinHostPort(u.Hostname(), "5432")
	}
	if t.proxy, err = tcpproxy.Start(target); err != nil {
		return nil, err
	}
	u.Host = t.proxy.Addr()
	srvDB := u.String()

	ports, err := freePorts(9 + 2*o.Replicas)
	if err != nil {
		return nil, err
	}
	suffix := strings.ToLower(strings.TrimPrefix(t.db.Name, "bae_chaos_"))
	tdir := filepath.Join(t.workDir, "temporal")
	t.temporalDBs = []string{"temporal_chaos_" + suffix, "temporal_chaos_vis_" + suffix}
	env := map[string]string{
		"TEMPORAL_DIR": tdir, "TEMPORAL_PG_ADDR": t.proxy.Addr(),
		"TEMPORAL_DB": t.temporalDBs[0], "TEMPORAL_VISIBILITY_DB": t.temporalDBs[1],
		"TEMPORAL_PORT": strconv.Itoa(ports[0]), "TEMPORAL_HISTORY_PORT": strconv.Itoa(ports[1]),
		"TEMPORAL_MATCHING_PORT": strconv.Itoa(ports[2]), "TEMPORAL_WORKER_PORT": strconv.Itoa(ports[3]),
		"TEMPORAL_FRONTEND_MEMBERSHIP_PORT": strconv.Itoa(ports[4]), "TEMPORAL_HISTORY_MEMBERSHIP_PORT": strconv.Itoa(ports[5]),
		"TEMPORAL_MATCHING_MEMBERSHIP_PORT": strconv.Itoa(ports[6]), "TEMPORAL_WORKER_MEMBERSHIP_PORT": strconv.Itoa(ports[7]),
		"TEMPORAL_HTTP_PORT": strconv.Itoa(ports[8]),
		// The script's defaults, which a restart of the binary needs too.
		"TEMPORAL_PG_USER": envOr("TEMPORAL_PG_USER", "postgres"), "TEMPORAL_PG_PASSWORD": os.Getenv("TEMPORAL_PG_PASSWORD"),
	}
	t.temporalEnv = os.Environ()
	for k, v := range env {
		t.temporalEnv = append(t.temporalEnv, k+"="+v)
	}
	t.temporalAddr = "127.0.0.1:" + env["TEMPORAL_PORT"]
	t0 := time.Now()
	cmd := exec.CommandContext(ctx, filepath.Join(t.root, "scripts/temporal-up.sh"))
	cmd.Dir, cmd.Env = t.root, t.temporalEnv
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("scripts/temporal-up.sh: %w: %s", err, out)
	}
	pid, err := readPid(filepath.Join(tdir, "pid"))
	if err != nil {
		return nil, err
	}
	t.adoptTemporal(pid)
	t.log.Info("temporal server up", "addr", t.temporalAddr, "took", time.Since(t0).Round(time.Millisecond))

	bin := o.BaesrvPath
	if bin == "" {
		bin = filepath.Join(t.workDir, "baesrv")
		b := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/baesrv")
		b.Dir = t.root
		if out, err := b.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build ./cmd/baesrv: %w: %s", err, out)
		}
	}
	cfg := filepath.Join(t.workDir, "bae-config.toml")
	if err := os.WriteFile(cfg, []byte(configTOML), 0o600); err != nil {
		return nil, err
	}
	dataDir := filepath.Join(t.workDir, "data")
	logDir := filepath.Join(t.workDir, "logs")
	for _, d := range []string{dataDir, logDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	for i := range o.Replicas {
		r := &replica{
			name: string(rune('a' + i)), bin: bin, logDir: logDir,
			clientAddr: "127.0.0.1:" + strconv.Itoa(ports[9+2*i]),
			adminAddr:  "127.0.0.1:" + strconv.Itoa(ports[10+2*i]),
		}
		vars := map[string]string{
			"BAE_DATABASE_URL": srvDB, "BAE_TEMPORAL_ADDR": t.temporalAddr, "BAE_TEMPORAL_NAMESPACE": "default",
			"BAE_ADDR": r.clientAddr, "BAE_ADMIN_ADDR": r.adminAddr, "BAE_CONFIG": cfg, "BAE_DATA_DIR": dataDir,
			"BAE_TASK_QUEUE": "bae-chaos", "BAE_ACTIVITY_HEARTBEAT_TIMEOUT": "1s", "BAE_SHUTDOWN_TIMEOUT": "10",
			"BAE_TURN_TIMEOUT": TurnTimeout.String(), "BAE_METRICS_ADDR": "admin", "BAE_PPROF": "1",
		}
		// Every sandbox session's sandbox is started with the campaign's
		// one profile, and may be by one key: the default caps (4 a key)
		// would refuse the fifth of a 50-session run at setup.
		if o.Sandboxes > config.DefaultMaxSandboxesPerKey {
			vars["BAE_MAX_SANDBOXES_PER_KEY"] = strconv.Itoa(o.Sandboxes)
		}
		if o.Sandboxes > config.DefaultMaxSandboxesPerProfile {
			vars["BAE_MAX_SANDBOXES_PER_PROFILE"] = strconv.Itoa(o.Sandboxes)
		}
		for k, v := range o.ServerEnv {
			vars[k] = v
		}
		r.env = procserver.ServerEnv(vars)
		t.replicas = append(t.replicas, r)
		// One at a time: the first migrates and writes the admin key.
		if err := r.start(ctx); err != nil {
			return nil, err
		}
	}
	return t, nil
}

func readPid(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("temporal pid file: %w", err)
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// adoptTemporal watches the server the script started (not our child: it
// is polled by pid).
func (t *topology) adoptTemporal(pid int) {
	t.tmu.Lock()
	defer t.tmu.Unlock()
	done := make(chan struct{})
	p, _ := os.FindProcess(pid)
	t.temporal = &exec.Cmd{Process: p}
	t.temporalDone = done
	go func() {
		for syscall.Kill(pid, 0) == nil {
			time.Sleep(100 * time.Millisecond)
		}
		close(done)
	}()
}

// killTemporal SIGKILLs the Temporal server and starts it again on the
// same ports and databases; the replicas reconnect on their own.
func (t *topology) killTemporal(ctx context.Context) error {
	t.tmu.Lock()
	cmd, done := t.temporal, t.temporalDone
	t.tmu.Unlock()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill temporal: %w", err)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		return errors.New("temporal server survived SIGKILL for 30s")
	}
	return t.startTemporal(ctx)
}

// startTemporal starts the Temporal server binary on the run's ports and
// databases, again while it exits before it listens (a supervisor's loop).
func (t *topology) startTemporal(ctx context.Context) error {
	t.tmu.Lock()
	defer t.tmu.Unlock()
	var err error
	for range 40 {
		t.temporalN++
		logf, ferr := os.Create(filepath.Join(t.workDir, fmt.Sprintf("temporal-%02d.log", t.temporalN)))
		if ferr != nil {
			return ferr
		}
		c := exec.Command(filepath.Join(t.root, "bin/temporal-server"), "--allow-no-auth", "--config-file", "scripts/temporal/config.yaml", "start")
		c.Dir, c.Env, c.Stdout, c.Stderr = t.root, t.temporalEnv, logf, logf
		if err = c.Start(); err != nil {
			logf.Close()
			return fmt.Errorf("restart temporal: %w", err)
		}
		d := make(chan struct{})
		go func() { _ = c.Wait(); logf.Close(); close(d) }()
		t.temporal, t.temporalDone = c, d
		if err = awaitTCP(ctx, t.temporalAddr, d); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
	return err
}

func awaitTCP(ctx context.Context, addr string, exited <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, readyWithin)
	defer cancel()
	for {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("%s: process exited before it listened", addr)
		case <-ctx.Done():
			return fmt.Errorf("%s not listening within %s", addr, readyWithin)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// start runs a new incarnation and waits until it is ready. Like a
// supervisor, it starts the process again while it exits before it is
// ready (its database or Temporal server may be away).
func (r *replica) start(ctx context.Context) error {
	var err error
	for range 40 {
		if err = r.startOnce(ctx); err == nil || !errors.Is(err, errExited) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
	return err
}

var errExited = errors.New("exited before it was ready")

func (r *replica) startOnce(ctx context.Context) error {
	r.mu.Lock()
	r.incarnation++
	logPath := filepath.Join(r.logDir, fmt.Sprintf("baesrv-%s-%02d.log", r.name, r.incarnation))
	f, err := os.Create(logPath)
	if err != nil {
		r.mu.Unlock()
		return err
	}
	cmd := exec.Command(r.bin, "serve")
	cmd.Env, cmd.Stdout, cmd.Stderr = r.env, f, f
	if err := cmd.Start(); err != nil {
		r.mu.Unlock()
		f.Close()
		return fmt.Errorf("start baesrv %s: %w", r.name, err)
	}
	done := make(chan struct{})
	r.cmd, r.done = cmd, done
	r.mu.Unlock()
	go func() {
		err := cmd.Wait()
		f.Close()
		close(done)
		r.mu.Lock()
		mine := r.cmd == cmd && r.up
		if mine {
			// It died on its own: note it, and restart it as a
			// supervisor would.
			r.up = false
			r.unexpected = append(r.unexpected, fmt.Sprintf("baesrv %s incarnation %d exited on its own (%v); log %s", r.name, r.incarnation, err, logPath))
		}
		r.mu.Unlock()
		if mine {
			go func() { _ = r.start(context.Background()) }()
		}
	}()
	if err := awaitReady(ctx, r.clientAddr, done); err != nil {
		if errors.Is(err, errExited) {
			return err
		}
		log, _ := os.ReadFile(logPath)
		if len(log) > 3000 {
			log = log[len(log)-3000:]
		}
		return fmt.Errorf("baesrv %s: %w\n%s", r.name, err, log)
	}
	r.mu.Lock()
	r.up, r.startedAt = true, time.Now()
	r.mu.Unlock()
	return nil
}

// stop signals the running incarnation and waits for it to exit.
func (r *replica) stop(sig syscall.Signal) {
	r.mu.Lock()
	cmd, done := r.cmd, r.done
	r.cmd, r.up = nil, false
	r.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		<-done
	}
}

func (r *replica) isUp() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.up
}

func (r *replica) pid() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return 0
	}
	return r.cmd.Process.Pid
}

func awaitReady(ctx context.Context, addr string, exited <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, readyWithin)
	defer cancel()
	hc := &http.Client{Timeout: time.Second}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-exited:
			return errExited
		case <-ctx.Done():
			return fmt.Errorf("not ready within %s", readyWithin)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// live is the replicas serving now.
func (t *topology) live() []*replica {
	var out []*replica
	for _, r := range t.replicas {
		if r.isUp() {
			out = append(out, r)
		}
	}
	return out
}

// close stops everything; keep leaves the work dir and databases.
func (t *topology) close(keep bool) {
	for _, r := range t.replicas {
		r.stop(syscall.SIGTERM)
	}
	t.tmu.Lock()
	if t.temporal != nil && t.temporal.Process != nil {
		_ = t.temporal.Process.Signal(syscall.SIGTERM)
		select {
		case <-t.temporalDone:
		case <-time.After(20 * time.Second):
			_ = t.temporal.Process.Kill()
		}
	}
	t.tmu.Unlock()
	if t.proxy != nil {
		_ = t.proxy.Close()
	}
	if keep {
		t.log.Warn("kept for inspection", "work_dir", t.workDir, "database", t.dbName())
		return
	}
	if t.db != nil {
		_ = t.db.Drop()
		dropDatabases(t.baseDB, t.temporalDBs...)
	}
	if t.workDir != "" {
		_ = os.RemoveAll(t.workDir)
	}
}

func (t *topology) dbName() string {
	if t.db == nil {
		return ""
	}
	return t.db.Name
}

// dropDatabases drops the Temporal server's databases (best effort).
func dropDatabases(baseURL string, names ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, baseURL)
	if err != nil {
		return
	}
	defer c.Close(ctx)
	for _, n := range names {
		_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+n+" WITH (FORCE)")
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
