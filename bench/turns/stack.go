package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"

	"github.com/bae-go/bae-go/internal/adminkey"
	"github.com/bae-go/bae-go/internal/app"
	"github.com/bae-go/bae-go/internal/config"
	"github.com/bae-go/bae-go/internal/devstack"
	"github.com/bae-go/bae-go/internal/engine"
	"github.com/bae-go/bae-go/internal/ids"
)

// stack is everything the benchmark runs in-process: a throwaway database,
// an in-memory Temporal, the fake provider and baesrv itself.
type stack struct {
	log      *slog.Logger
	baseURL  string // maintenance database the bench database is created from
	dbName   string
	DBURL    string
	dataDir  string
	dev      *devstack.Server
	Temporal client.Client
	Fake     *timedFake
	FakeURL  string
	fakeSrv  *http.Server

	ClientURL string
	AdminURL  string
	AdminKey  string
	Parts     *app.Parts

	stopApp context.CancelFunc
	appDone chan error
	extra   worker.Worker

	extraPollers int
}

type stackOptions struct {
	BaseDatabaseURL string
	ServerLog       io.Writer // baesrv and Temporal warnings; nil discards
	Gzip            bool      // gzip Temporal gRPC calls although the frontend is on loopback
	// LogStatements makes PostgreSQL log every statement on the bench
	// database (to its server log), to see what a turn costs in queries.
	LogStatements bool
	// ExtraPollers > 0 starts a second worker with that many pollers.
	ExtraPollers int
}

// startStack brings every part up; on error whatever started is torn down.
func startStack(ctx context.Context, log *slog.Logger, o stackOptions) (_ *stack, err error) {
	s := &stack{log: log, baseURL: o.BaseDatabaseURL, extraPollers: o.ExtraPollers}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	srvLog := slog.New(slog.DiscardHandler)
	if o.ServerLog != nil {
		srvLog = slog.New(slog.NewTextHandler(o.ServerLog, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}

	if s.dataDir, err = os.MkdirTemp("", "bae-bench-"); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	if err = s.createDatabase(ctx, o.LogStatements); err != nil {
		return nil, err
	}

	t0 := time.Now()
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s.dev, err = devstack.Start(ctx, devstack.Options{
		DataDir: "", FrontendPort: port, UIPort: -1, Logger: srvLog,
		SearchAttributes: engine.SearchAttributes,
	})
	if err != nil {
		return nil, fmt.Errorf("start embedded temporal: %w", err)
	}
	// Dialled like app.Run dials (SDK defaults), so the bench measures the
	// client baesrv really uses.
	copts := client.Options{
		HostPort: s.dev.FrontendAddr(), Namespace: s.dev.Namespace(),
		Logger: sdklog.NewStructuredLogger(srvLog),
	}
	comp, err := app.TemporalCompression(copts.HostPort, os.LookupEnv)
	if err != nil {
		return nil, err
	}
	copts.ConnectionOptions.GrpcCompression = comp
	if o.Gzip {
		copts.ConnectionOptions.GrpcCompression = &client.GrpcCompressionGzip{}
	}
	s.Temporal, err = client.DialContext(ctx, copts)
	if err != nil {
		return nil, fmt.Errorf("dial temporal: %w", err)
	}
	log.Info("temporal ready", "frontend", s.dev.FrontendAddr(), "took", time.Since(t0).Round(time.Millisecond))

	// The fake is served by our own listener so every request passes
	// through timedFake, which times it and attributes it to a turn.
	s.Fake = newTimedFake()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for fake provider: %w", err)
	}
	s.fakeSrv = &http.Server{Handler: s.Fake, ReadHeaderTimeout: 10 * time.Second}
	go s.fakeSrv.Serve(ln) //nolint:errcheck // ends with ErrServerClosed on Close
	s.FakeURL = "http://" + ln.Addr().String()

	if err = s.startServer(ctx, srvLog, s.FakeURL); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *stack) startServer(ctx context.Context, srvLog *slog.Logger, fakeURL string) error {
	env := map[string]string{
		"BAE_ADDR": "127.0.0.1:0", "BAE_ADMIN_ADDR": "127.0.0.1:0", "BAE_DATABASE_URL": s.DBURL,
		"BAE_DATA_DIR": s.dataDir, "BAE_SHUTDOWN_TIMEOUT": "5", "BAE_TASK_QUEUE": "bae-bench",
		"BAE_TEMPORAL_NAMESPACE": s.dev.Namespace(),
	}
	// Other BAE_* variables (BAE_TURN_TIMEOUT, ...) pass through, so a run
	// can be tuned without editing the benchmark.
	lookup := func(k string) (string, bool) {
		if v, ok := env[k]; ok {
			return v, true
		}
		return os.LookupEnv(k)
	}
	srvCfg, err := config.ServerFromEnv(lookup)
	if err != nil {
		return fmt.Errorf("server config: %w", err)
	}
	toml := fmt.Sprintf(`
[[providers.entries]]
name       = "fake"
provider   = "anthropic"
base_url   = %q
model      = "fake-model"
auth_token = "not-a-secret"
`, fakeURL)
	file, err := config.Parse([]byte(toml), lookup)
	if err != nil {
		return fmt.Errorf("bench config: %w", err)
	}

	appCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.stopApp, s.appDone = cancel, make(chan error, 1)
	ready := make(chan struct{})
	go func() {
		s.appDone <- app.Run(appCtx, app.Options{
			Server: srvCfg, File: file, Temporal: s.Temporal, Log: srvLog,
			Admin: adminkey.Options{KeyFile: srvCfg.AdminKeyFile, HashFile: srvCfg.AdminKeyHashFile},
			Ready: func(c, a string) {
				s.ClientURL, s.AdminURL = "http://"+c, "http://"+a
				close(ready)
			},
			Extend: func(p *app.Parts) error { s.Parts = p; return nil },
		})
	}()
	select {
	case <-ready:
	case err := <-s.appDone:
		s.appDone <- err // Close waits on it again
		return fmt.Errorf("baesrv exited before serving: %w", err)
	case <-time.After(60 * time.Second):
		return errors.New("baesrv did not start within 60s")
	case <-ctx.Done():
		return ctx.Err()
	}
	if s.AdminKey, err = adminkey.ReadKeyFile(srvCfg.AdminKeyFile); err != nil {
		return fmt.Errorf("read admin key: %w", err)
	}
	if s.extraPollers > 0 {
		// Diagnostic: a second worker in the same process on baesrv's task
		// queue, as a second replica would add, with more pollers than the
		// SDK default of 2 per task type.
		s.extra = worker.New(s.Temporal, srvCfg.TaskQueue, worker.Options{
			MaxConcurrentWorkflowTaskPollers: s.extraPollers, MaxConcurrentActivityTaskPollers: s.extraPollers,
		})
		s.Parts.Activities.Register(s.extra)
		if err := s.extra.Start(); err != nil {
			return fmt.Errorf("start extra worker: %w", err)
		}
		s.log.Info("extra worker started", "pollers", s.extraPollers)
	}
	return nil
}

// createDatabase makes bae_bench_<random>, as internal/testdb does for tests.
func (s *stack) createDatabase(ctx context.Context, logStatements bool) error {
	conn, err := pgx.Connect(ctx, s.baseURL)
	if err != nil {
		return fmt.Errorf("connect to %s (is PostgreSQL running? scripts/pg-up.sh): %w", redact(s.baseURL), err)
	}
	defer conn.Close(ctx)
	name := "bae_bench_" + ids.New("")[:16]
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	s.dbName = name
	if logStatements {
		if _, err := conn.Exec(ctx, "ALTER DATABASE "+name+" SET log_statement = 'all'"); err != nil {
			return fmt.Errorf("enable statement logging: %w", err)
		}
		s.log.Info("postgres logs every statement of the bench database", "database", name)
	}
	u, err := url.Parse(s.baseURL)
	if err != nil {
		return fmt.Errorf("parse database url: %w", err)
	}
	u.Path = "/" + name
	s.DBURL = u.String()
	return nil
}

// Close stops everything in reverse order and drops the database. It runs
// on a fresh context so an interrupted run still cleans up.
func (s *stack) Close() {
	if s.extra != nil {
		s.extra.Stop()
	}
	if s.stopApp != nil {
		s.stopApp()
		select {
		case err := <-s.appDone:
			if err != nil {
				s.log.Warn("baesrv stopped with error", "err", err)
			}
		case <-time.After(30 * time.Second):
			s.log.Warn("baesrv did not stop within 30s")
		}
	}
	if s.fakeSrv != nil {
		_ = s.fakeSrv.Close()
	}
	if s.Temporal != nil {
		s.Temporal.Close()
	}
	if s.dev != nil {
		if err := s.dev.Stop(); err != nil {
			s.log.Warn("stop temporal", "err", err)
		}
	}
	if s.dbName != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if conn, err := pgx.Connect(ctx, s.baseURL); err != nil {
			s.log.Warn("drop bench database: connect", "db", s.dbName, "err", err)
		} else {
			if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+s.dbName+" WITH (FORCE)"); err != nil {
				s.log.Warn("drop bench database", "db", s.dbName, "err", err)
			}
			_ = conn.Close(ctx)
		}
	}
	if s.dataDir != "" {
		_ = os.RemoveAll(filepath.Clean(s.dataDir))
	}
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick a free port: %w", err)
	}
	defer ln.Close()
	_, p, _ := net.SplitHostPort(ln.Addr().String())
	return strconv.Atoi(p)
}

func redact(u string) string {
	p, err := url.Parse(u)
	if err != nil || p.User == nil {
		return u
	}
	p.User = url.User(p.User.Username())
	return p.String()
}
