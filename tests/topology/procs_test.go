//go:build topology

package topology

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/lib/adminkey"
	"github.com/bae-go/bae-go/internal/lib/ids"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/procserver"
	"github.com/bae-go/bae-go/internal/testing/testdb"
	"github.com/bae-go/bae-go/internal/testing/testenv"
)

// The restart tests run each replica as a real `baesrv serve` process, so
// that it can be SIGKILLed (an in-process server can only be cancelled) and
// restarted on the ports its clients already use.

var (
	buildOnce sync.Once
	builtPath string
	buildErr  error
)

// baesrvBinary builds ./cmd/baesrv once per run (procserver.Build: a path
// per checkout, so go build skips the link when the binary is current).
func baesrvBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() { builtPath, buildErr = procserver.Build(context.Background()) })
	require.NoError(t, buildErr)
	return builtPath
}

// proc is one baesrv replica process; Start, Kill and Stop may repeat.
type proc struct {
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
}

// cluster is replicas of one bae-go deployment: one database, one data dir
// (the admin key), one task queue, the suite's Temporal server. Each
// replica calls the fake provider under its own lane, so a request's lane
// names the replica that made it.
type cluster struct {
	fake     *fakeprovider.Server
	dbURL    string
	dataDir  string
	reps     map[string]*proc
	adminKey string
}

// clusterOptions vary a cluster.
type clusterOptions struct {
	// Namespace is the Temporal namespace (default "default").
	Namespace string
	// Names are the replicas, started in order (default a, b).
	Names []string
	// Env is more server environment.
	Env map[string]string
}

func startCluster(t *testing.T, o clusterOptions) *cluster {
	t.Helper()
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	if len(o.Names) == 0 {
		o.Names = []string{"a", "b"}
	}
	bin := baesrvBinary(t)
	c := &cluster{fake: fakeprovider.New(t), dbURL: testdb.New(t), dataDir: t.TempDir(), reps: map[string]*proc{}}
	work := t.TempDir()
	ports, err := freePorts(2 * len(o.Names))
	require.NoError(t, err)
	queue := "topology-" + ids.New("")[:12]
	for i, name := range o.Names {
		cfg := filepath.Join(work, "bae-config-"+name+".toml")
		require.NoError(t, os.WriteFile(cfg, []byte(testenv.PrimaryProviderTOML(c.fake.Lane(name).URL())), 0o600))
		p := &proc{
			name: name, bin: bin, logDir: work,
			clientAddr: "127.0.0.1:" + strconv.Itoa(ports[2*i]),
			adminAddr:  "127.0.0.1:" + strconv.Itoa(ports[2*i+1]),
		}
		vars := map[string]string{
			"BAE_DATABASE_URL":       c.dbURL,
			"BAE_TEMPORAL_ADDR":      temporalAddr,
			"BAE_TEMPORAL_NAMESPACE": o.Namespace,
			"BAE_ADDR":               p.clientAddr,
			"BAE_ADMIN_ADDR":         p.adminAddr,
			"BAE_CONFIG":             cfg,
			"BAE_DATA_DIR":           c.dataDir,
			"BAE_TASK_QUEUE":         queue,
			"BAE_KEY_HASH":           "sha256",
			// A lost server-side tool call moves on within 3 s.
			"BAE_ACTIVITY_HEARTBEAT_TIMEOUT": "1",
			"BAE_SHUTDOWN_TIMEOUT":           "10",
		}
		for k, v := range o.Env {
			vars[k] = v
		}
		p.env = serverEnv(vars)
		c.reps[name] = p
		t.Cleanup(func() { p.Stop(t) })
		// One at a time: the first migrates the database and writes the
		// admin key the others read.
		p.Start(t)
	}
	key, err := adminkey.ReadKeyFile(filepath.Join(c.dataDir, "admin-key.pem"))
	require.NoError(t, err)
	c.adminKey = key
	return c
}

// serverEnv is the test's environment without its BAE_* variables, plus vars.
func serverEnv(vars map[string]string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if len(kv) < 4 || kv[:4] != "BAE_" {
			env = append(env, kv)
		}
	}
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	return env
}

// api is the replica's client and admin API for testenv's helpers.
func (c *cluster) api(name string) *testenv.Server {
	p := c.reps[name]
	return &testenv.Server{ClientURL: "http://" + p.clientAddr, AdminURL: "http://" + p.adminAddr, AdminKey: c.adminKey}
}

// other is the replica that is not name (of two).
func (c *cluster) other(name string) string {
	for n := range c.reps {
		if n != name {
			return n
		}
	}
	return ""
}

// Start runs a new incarnation and waits until it reports ready.
func (p *proc) Start(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	p.incarnation++
	logPath := filepath.Join(p.logDir, fmt.Sprintf("baesrv-%s-%d.log", p.name, p.incarnation))
	f, err := os.Create(logPath)
	require.NoError(t, err)
	cmd := exec.Command(p.bin, "serve")
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = f, f
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(done)
	}()
	if err := awaitReady(p.clientAddr, done, 2*time.Minute); err != nil {
		log, _ := os.ReadFile(logPath)
		require.FailNow(t, "baesrv "+p.name+" not ready", "%v\n%s", err, tail(log, 4000))
	}
}

// Kill SIGKILLs the running incarnation: no shutdown of any kind.
func (p *proc) Kill(t *testing.T) {
	t.Helper()
	p.signal(t, syscall.SIGKILL)
}

// Stop is a graceful stop (SIGTERM), as a rolling restart does; it waits
// for the process to exit.
func (p *proc) Stop(t *testing.T) {
	t.Helper()
	p.signal(t, syscall.SIGTERM)
}

func (p *proc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("signal baesrv %s: %v", p.name, err)
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		<-done
		t.Errorf("baesrv %s ignored %v for a minute", p.name, sig)
	}
}

// awaitReady polls /readyz until it answers 200; it fails early when the
// process exits.
func awaitReady(addr string, exited <-chan struct{}, within time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	hc := &http.Client{Timeout: time.Second}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
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
			return errors.New("exited before it was ready")
		case <-ctx.Done():
			return fmt.Errorf("not ready within %s", within)
		case <-tick.C:
		}
	}
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
