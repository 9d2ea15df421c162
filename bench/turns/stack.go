package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"

	"github.com/bae-go/bae-go/bench/benchstack"
	"github.com/bae-go/bae-go/internal/app"
	"github.com/bae-go/bae-go/internal/config"
	"github.com/bae-go/bae-go/internal/lib/adminkey"
	"github.com/bae-go/bae-go/internal/testing/devstack"
)

// stack is everything the benchmark runs: a throwaway database, an
// in-memory Temporal (or an external Temporal server, -temporal), the fake
// provider and baesrv itself, in this process or as -replicas `baesrv
// serve` processes.
type stack struct {
	log      *slog.Logger
	baseURL  string // maintenance database the bench database is created from
	db       *benchstack.Database
	dbName   string
	DBURL    string
	dataDir  string
	dev      *devstack.Server
	Temporal client.Client
	// Namespace and TaskQueue are where baesrv's sessions run.
	Namespace string
	TaskQueue string
	// temporalPID is an external Temporal server's process, for its CPU.
	temporalPID int
	temporalDBs []string
	replicas    []*replica
	Fake        *timedFake
	FakeURL     string
	fakeSrv     *http.Server

	ClientURL  string
	ClientURLs []string // every replica's client API, ClientURL first
	AdminURL   string
	AdminKey   string
	Parts      *app.Parts

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
	// TemporalAddr, when set, is an external Temporal frontend used instead
	// of the embedded server, in TemporalNamespace; TemporalPID is its
	// process (0: its CPU is not counted).
	TemporalAddr      string
	TemporalNamespace string
	TemporalPID       int
	TemporalDBs       []string
	// Replicas > 0 runs baesrv as that many `BaesrvBin serve` processes
	// on one database and task queue instead of in this process.
	Replicas  int
	BaesrvBin string
}

// startStack brings every part up; on error whatever started is torn down.
func startStack(ctx context.Context, log *slog.Logger, o stackOptions) (_ *stack, err error) {
	s := &stack{log: log, baseURL: o.BaseDatabaseURL, extraPollers: o.ExtraPollers, TaskQueue: "bae-bench", temporalPID: o.TemporalPID, temporalDBs: o.TemporalDBs}
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
	var settings map[string]string
	if o.LogStatements {
		settings = map[string]string{"log_statement": "all"}
	}
	if s.db, err = benchstack.CreateDatabase(ctx, s.baseURL, "bae_bench_", settings); err != nil {
		return nil, err
	}
	s.dbName, s.DBURL = s.db.Name, s.db.URL
	if o.LogStatements {
		log.Info("postgres logs every statement of the bench database", "database", s.dbName)
	}

	t0 := time.Now()
	frontend := o.TemporalAddr
	s.Namespace = o.TemporalNamespace
	if frontend == "" {
		ports, err := benchstack.FreePorts(1)
		if err != nil {
			return nil, err
		}
		s.dev, err = devstack.Start(ctx, benchstack.TemporalOptions(ports[0], "", srvLog))
		if err != nil {
			return nil, fmt.Errorf("start embedded temporal: %w", err)
		}
		frontend, s.Namespace = s.dev.FrontendAddr(), s.dev.Namespace()
	} else {
		// A Temporal server outlives runs: a task queue of the run's own
		// keeps earlier runs' workflows away from this run's workers.
		s.TaskQueue = "bae-bench-" + s.dbName[len("bae_bench_"):]
	}
	// Dialled like app.Run dials (SDK defaults), so the bench measures the
	// client baesrv really uses.
	copts := client.Options{
		HostPort: frontend, Namespace: s.Namespace,
		Logger: sdklog.NewStructuredLogger(srvLog),
	}
	mode, err := config.ParseTemporalCompression(os.Getenv("BAE_TEMPORAL_COMPRESSION"))
	if err != nil {
		return nil, err
	}
	copts.ConnectionOptions.GrpcCompression = app.TemporalCompression(copts.HostPort, mode)
	if o.Gzip {
		copts.ConnectionOptions.GrpcCompression = &client.GrpcCompressionGzip{}
	}
	s.Temporal, err = client.DialContext(ctx, copts)
	if err != nil {
		return nil, fmt.Errorf("dial temporal: %w", err)
	}
	if s.dev == nil {
		if err := benchstack.SearchAttributesReady(ctx, s.Temporal, s.Namespace); err != nil {
			return nil, err
		}
	}
	log.Info("temporal ready", "frontend", frontend, "embedded", s.dev != nil, "took", time.Since(t0).Round(time.Millisecond))

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

	if o.Replicas > 0 {
		err = s.startReplicas(ctx, o, frontend)
	} else {
		err = s.startServer(ctx, srvLog, s.FakeURL)
	}
	if err != nil {
		return nil, err
	}
	s.ClientURLs = append([]string{s.ClientURL}, s.ClientURLs...)
	return s, nil
}

// serverEnv is the environment baesrv runs with in a bench.
func (s *stack) serverEnv() map[string]string {
	return map[string]string{
		"BAE_ADDR": "127.0.0.1:0", "BAE_ADMIN_ADDR": "127.0.0.1:0", "BAE_DATABASE_URL": s.DBURL,
		"BAE_DATA_DIR": s.dataDir, "BAE_SHUTDOWN_TIMEOUT": "5", "BAE_TASK_QUEUE": s.TaskQueue,
		"BAE_TEMPORAL_NAMESPACE": s.Namespace,
		// The benchmark opens thousands of sessions with one client key and
		// leaves most idle: lift the per-key and per-profile caps and the
		// idle-session TTL it is not measuring.
		"BAE_MAX_SESSIONS_PER_KEY": "0", "BAE_MAX_SESSIONS_PER_PROFILE": "0", "BAE_SESSION_IDLE_TTL": "0",
		"BAE_MAX_STREAMS_PER_KEY": "0", "BAE_MAX_QUEUED_TURNS_PER_KEY": "0",
	}
}

func (s *stack) startServer(ctx context.Context, srvLog *slog.Logger, fakeURL string) error {
	env := s.serverEnv()
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
	file, err := config.Parse([]byte(benchstack.ProviderTOML(fakeURL)), lookup)
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

// Close stops everything in reverse order and drops the database. It runs
// on a fresh context so an interrupted run still cleans up.
func (s *stack) Close() {
	if s.extra != nil {
		s.extra.Stop()
	}
	for _, r := range s.replicas {
		r.stop(s.log)
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
	if s.db != nil {
		if err := s.db.Drop(); err != nil {
			s.log.Warn("drop bench database", "err", err)
		}
	}
	if s.dataDir != "" {
		_ = os.RemoveAll(filepath.Clean(s.dataDir))
	}
}
