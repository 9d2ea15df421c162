// Package procserver runs `baesrv serve` as a child process that a test
// can SIGKILL and start again on the same ports, database and Temporal, the
// way a supervisor restarts a crashed replica. Nothing in the process gets
// a chance to clean up: that is the point.
package procserver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/lib/adminkey"
	"github.com/bae-go/bae-go/internal/sessionclient"
	"github.com/bae-go/bae-go/internal/testing/devstack"
	"github.com/bae-go/bae-go/internal/testing/testenv"
)

const modulePath = "github.com/bae-go/bae-go"

// Build builds ./cmd/baesrv into a stable path per checkout under the temp
// dir, so go build skips the link when the binary is up to date and two
// checkouts never swap binaries under each other.
func Build(ctx context.Context) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(root))
	out := filepath.Join(os.TempDir(), fmt.Sprintf("bae-crash-bin-%d-%x", os.Getuid(), sum[:6]), "baesrv")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/baesrv")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/baesrv: %w: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out, nil
}

// moduleRoot finds this module's go.mod from the working directory up.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.Contains(b, []byte("module "+modulePath+"\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod for %s above the working directory (run from the repository, or pass a baesrv binary)", modulePath)
		}
		dir = parent
	}
}

// Temporal starts an in-memory Temporal (the devstack) in the test's
// process, which outlives every baesrv it starts. Its frontend takes a
// free port, not the default 7233: another test process (a second go test
// run, `baesrv dev`) may hold that one, and a baesrv of this test would
// then talk to that other Temporal.
func Temporal(t testing.TB) *devstack.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dev, err := devstack.Start(ctx, devstack.Options{
		FrontendPort: freePorts(t, 1)[0],
		UIPort:       -1, Logger: slog.New(slog.DiscardHandler), SearchAttributes: sessionclient.SearchAttributes,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = dev.Stop() })
	return dev
}

// Options describe one replica.
type Options struct {
	// Bin is a baesrv binary (Build).
	Bin         string
	DatabaseURL string
	Temporal    *devstack.Server
	ConfigTOML  string
	// DataDir holds the admin key; replicas of one deployment share it.
	DataDir string
	// Env adds or overrides BAE_* variables (BAE_TASK_QUEUE, ...).
	Env map[string]string
}

// Server is one replica as a child process.
type Server struct {
	t    testing.TB
	bin  string
	env  []string
	logs string
	// API reaches the replica's ports with the testenv helpers.
	API *testenv.Server

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	n    int
}

// Start starts a replica on fresh loopback ports and waits for it to serve.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "bae-config.toml")
	require.NoError(t, os.WriteFile(cfg, []byte(o.ConfigTOML), 0o600))
	ports := freePorts(t, 2)
	clientAddr, adminAddr := "127.0.0.1:"+strconv.Itoa(ports[0]), "127.0.0.1:"+strconv.Itoa(ports[1])
	vars := map[string]string{
		"BAE_DATABASE_URL": o.DatabaseURL, "BAE_TEMPORAL_ADDR": o.Temporal.FrontendAddr(), "BAE_TEMPORAL_NAMESPACE": o.Temporal.Namespace(),
		"BAE_ADDR": clientAddr, "BAE_ADMIN_ADDR": adminAddr, "BAE_CONFIG": cfg, "BAE_DATA_DIR": o.DataDir,
		"BAE_ACTIVITY_HEARTBEAT_TIMEOUT": "1", "BAE_SHUTDOWN_TIMEOUT": "2",
	}
	for k, v := range o.Env {
		vars[k] = v
	}
	s := &Server{t: t, bin: o.Bin, env: ServerEnv(vars), logs: dir, API: &testenv.Server{ClientURL: "http://" + clientAddr, AdminURL: "http://" + adminAddr, DatabaseURL: o.DatabaseURL}}
	s.Start()
	key, err := adminkey.ReadKeyFile(filepath.Join(o.DataDir, "admin-key.pem"))
	require.NoError(t, err)
	s.API.AdminKey = key
	t.Cleanup(s.stop)
	return s
}

// Start starts a new incarnation (after Kill) and waits until it serves.
func (s *Server) Start() {
	s.t.Helper()
	s.mu.Lock()
	s.n++
	logPath := filepath.Join(s.logs, fmt.Sprintf("baesrv-%02d.log", s.n))
	f, err := os.Create(logPath)
	require.NoError(s.t, err)
	cmd := exec.Command(s.bin, "serve")
	cmd.Env = s.env
	cmd.Stdout, cmd.Stderr = f, f
	require.NoError(s.t, cmd.Start())
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(done)
	}()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	s.awaitHealthy(logPath, done)
}

// Kill SIGKILLs the running incarnation and waits for it to be gone.
func (s *Server) Kill() {
	s.t.Helper()
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	require.NotNil(s.t, cmd, "no baesrv running")
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		s.t.Fatalf("kill baesrv: %v", err)
	}
	<-done
}

// Log is the log of the latest incarnation, for failure messages.
func (s *Server) Log() string {
	b, _ := os.ReadFile(filepath.Join(s.logs, fmt.Sprintf("baesrv-%02d.log", s.n)))
	return string(b)
}

func (s *Server) stop() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
	}
}

func (s *Server) awaitHealthy(logPath string, done <-chan struct{}) {
	s.t.Helper()
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	ok := func(base string) bool {
		resp, err := hc.Get(base + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	deadline := time.Now().Add(2 * time.Minute)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !ok(s.API.ClientURL) || !ok(s.API.AdminURL) {
		select {
		case <-done:
			b, _ := os.ReadFile(logPath)
			s.t.Fatalf("baesrv exited before serving:\n%s", b)
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logPath)
			s.t.Fatalf("baesrv not healthy within 2m:\n%s", b)
		}
	}
}

func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var out []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer l.Close()
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out
}

// ServerEnv is the parent environment without any BAE_* variable (so the
// caller's shell cannot change a run), plus vars: the environment of a
// baesrv child process.
func ServerEnv(vars map[string]string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BAE_") {
			env = append(env, kv)
		}
	}
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	return env
}
