package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bae-go/bae-go/bench/benchstack"
	"github.com/bae-go/bae-go/internal/config"
	"github.com/bae-go/bae-go/internal/lib/adminkey"
)

// replica is one `baesrv serve` process of the stack (-replicas).
type replica struct {
	cmd       *exec.Cmd
	done      chan error
	logPath   string
	ClientURL string
	AdminURL  string
}

// startReplicas starts o.Replicas `baesrv serve` processes on the stack's
// database, task queue and Temporal frontend, one after the other: the
// first migrates the database and writes the admin key the others read.
func (s *stack) startReplicas(ctx context.Context, o stackOptions, frontend string) error {
	if o.BaesrvBin == "" {
		return errors.New("-replicas needs -baesrv (a baesrv binary: go build -o bin/baesrv ./cmd/baesrv)")
	}
	cfgPath := filepath.Join(s.DataDir, "bae-config.toml")
	if err := os.WriteFile(cfgPath, []byte(benchstack.ProviderTOML(s.FakeURL)), 0o600); err != nil {
		return fmt.Errorf("write bench config: %w", err)
	}
	base := s.ServerEnv()
	base["BAE_CONFIG"] = cfgPath
	base["BAE_TEMPORAL_ADDR"] = frontend
	ports, err := benchstack.FreePorts(2 * o.Replicas)
	if err != nil {
		return err
	}
	for i := range o.Replicas {
		env := os.Environ() // other BAE_* variables pass through; ours come last and win
		for k, v := range base {
			env = append(env, k+"="+v)
		}
		env = append(env, fmt.Sprintf("BAE_ADDR=127.0.0.1:%d", ports[2*i]), fmt.Sprintf("BAE_ADMIN_ADDR=127.0.0.1:%d", ports[2*i+1]))
		r := &replica{
			logPath:   filepath.Join(s.DataDir, fmt.Sprintf("baesrv-%d.log", i)),
			ClientURL: fmt.Sprintf("http://127.0.0.1:%d", ports[2*i]),
			AdminURL:  fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]),
		}
		logf, err := os.Create(r.logPath)
		if err != nil {
			return fmt.Errorf("replica log: %w", err)
		}
		r.cmd = exec.Command(o.BaesrvBin, "serve")
		r.cmd.Env, r.cmd.Stdout, r.cmd.Stderr = env, logf, logf
		if err := r.cmd.Start(); err != nil {
			logf.Close()
			return fmt.Errorf("start %s serve: %w", o.BaesrvBin, err)
		}
		r.done = make(chan error, 1)
		go func() { r.done <- r.cmd.Wait(); logf.Close() }()
		s.replicas = append(s.replicas, r)
		if err := r.ready(ctx); err != nil {
			return err
		}
		s.log.Info("replica ready", "n", i, "pid", r.cmd.Process.Pid, "client", r.ClientURL)
		if i == 0 {
			s.ClientURL, s.AdminURL = r.ClientURL, r.AdminURL
		} else {
			s.ClientURLs = append(s.ClientURLs, r.ClientURL)
		}
	}
	lookup := func(k string) (string, bool) {
		if v, ok := base[k]; ok {
			return v, true
		}
		return os.LookupEnv(k)
	}
	srvCfg, err := config.ServerFromEnv(lookup)
	if err != nil {
		return fmt.Errorf("server config: %w", err)
	}
	if s.AdminKey, err = adminkey.ReadKeyFile(srvCfg.AdminKeyFile); err != nil {
		return fmt.Errorf("read admin key: %w", err)
	}
	return nil
}

// ready waits for the replica's /readyz.
func (r *replica) ready(ctx context.Context) error {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.ClientURL+"/readyz", nil)
		if err != nil {
			return err
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-r.done:
			r.done <- err
			return fmt.Errorf("baesrv exited before ready (%v): %s", err, tail(r.logPath))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("baesrv not ready within 2m: %s", tail(r.logPath))
}

func (r *replica) stop(log *slog.Logger) {
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(15 * time.Second):
		log.Warn("replica did not stop within 15s; killing it", "pid", r.cmd.Process.Pid)
		_ = r.cmd.Process.Kill()
		<-r.done
	}
}

func tail(path string) string {
	raw, _ := os.ReadFile(path)
	if len(raw) > 2000 {
		raw = raw[len(raw)-2000:]
	}
	return string(raw)
}

// procs are the system under test's processes other than this one, by
// role, for CPU accounting; nil when everything runs in this process. With
// pg, the external Temporal server's PostgreSQL backends are one role per
// database, "postgres <db>" (persistence and visibility apart). A phase
// lists them at its start and its end, so a connection its pool opens
// during the phase is counted too.
func (s *stack) procs(ctx context.Context, pg *pgSampler) map[string][]int {
	m := map[string][]int{}
	for _, r := range s.replicas {
		m["baesrv"] = append(m["baesrv"], r.cmd.Process.Pid)
	}
	if s.temporalPID > 0 {
		m["temporal"] = []int{s.temporalPID}
	}
	if pg != nil && len(s.temporalDBs) > 0 {
		for db, pids := range pg.backendPIDsOf(ctx, s.temporalDBs) {
			m["postgres "+db] = pids
		}
	}
	if len(m) == 0 {
		return nil
	}
	return m
}

// replicaRSS is the resident memory of the baesrv processes, summed.
func (s *stack) replicaRSS() int64 {
	var total int64
	for _, r := range s.replicas {
		total += procRSS(r.cmd.Process.Pid)
	}
	return total
}

// procRSS is a process's VmRSS in bytes (0 when unreadable).
func procRSS(pid int) int64 {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb * 1024
			}
		}
	}
	return 0
}
