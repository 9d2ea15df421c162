package benchstack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	sdklog "go.temporal.io/sdk/log"

	"github.com/bae-go/bae-go/internal/app"
	"github.com/bae-go/bae-go/internal/config"
	"github.com/bae-go/bae-go/internal/lib/adminkey"
	"github.com/bae-go/bae-go/internal/testing/devstack"
)

// InProc is a whole stack in the bench's own process, as `baesrv dev` runs
// it: a throwaway database, an in-memory embedded Temporal (or an external
// Temporal frontend) and baesrv (app.Run) on loopback ports. Every bench
// that runs baesrv starts it here, so a change to how a bench stack comes
// up is made once; bench/turns adds its diagnostics (replicas, an extra
// worker) on top.
type InProc struct {
	DB        *Database
	Temporal  client.Client
	ClientURL string
	AdminURL  string
	Admin     Admin
	Parts     *app.Parts
	// Frontend, Namespace and TaskQueue are where baesrv's sessions run.
	Frontend  string
	Namespace string
	TaskQueue string
	// DataDir is baesrv's data directory (its admin key among others).
	DataDir string
	// Embedded: Temporal is the embedded server, not an external one.
	Embedded bool

	log     *slog.Logger
	env     map[string]string
	dev     *devstack.Server
	stopApp context.CancelFunc
	appDone chan error
}

// InProcOptions configure StartInProc.
type InProcOptions struct {
	BaseDatabaseURL string
	// ConfigTOML is the bae-config.toml (the provider entries).
	ConfigTOML string
	// Env overrides BAE_* variables; others pass through from the
	// environment, so a run can be tuned without editing the bench.
	Env map[string]string
	// ServerLog gets baesrv's and Temporal's warnings; nil discards them.
	ServerLog *slog.Logger
	// DBSettings are set on the bench database (ALTER DATABASE … SET), for
	// example log_min_duration_statement to see what a turn waits on.
	DBSettings map[string]string
	// TemporalAddr, when set, is an external Temporal frontend used instead
	// of the embedded server, in TemporalNamespace; the run's sessions get
	// a task queue of their own there.
	TemporalAddr      string
	TemporalNamespace string
	// Gzip compresses Temporal gRPC calls although the frontend is on
	// loopback (else BAE_TEMPORAL_COMPRESSION decides, as in baesrv).
	Gzip bool
	// NoServer brings up the database and Temporal only: the caller runs
	// baesrv itself (as processes, with ServerEnv).
	NoServer bool
	// TemporalInterceptors wrap baesrv's Temporal client, for a bench that
	// counts what the server asks of Temporal.
	TemporalInterceptors []interceptor.ClientInterceptor
}

// StartInProc brings every part up; on error whatever started is torn down.
func StartInProc(ctx context.Context, log *slog.Logger, o InProcOptions) (_ *InProc, err error) {
	s := &InProc{log: log, TaskQueue: "bae-bench"}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	srvLog := o.ServerLog
	if srvLog == nil {
		srvLog = slog.New(slog.DiscardHandler)
	}
	if s.DataDir, err = os.MkdirTemp("", "bae-bench-"); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	if s.DB, err = CreateDatabase(ctx, o.BaseDatabaseURL, "bae_bench_", o.DBSettings); err != nil {
		return nil, err
	}
	t0 := time.Now()
	s.Frontend, s.Namespace = o.TemporalAddr, o.TemporalNamespace
	if s.Frontend == "" {
		// As `baesrv dev` does: before the embedded Temporal's workers.
		size, err := config.WorkflowCacheSizeFromEnv(func(k string) (string, bool) {
			if v, ok := o.Env[k]; ok {
				return v, true
			}
			return os.LookupEnv(k)
		})
		if err != nil {
			return nil, err
		}
		app.SetWorkflowCacheSize(size)
		ports, err := FreePorts(1)
		if err != nil {
			return nil, err
		}
		if s.dev, err = devstack.Start(ctx, TemporalOptions(ports[0], "", srvLog)); err != nil {
			return nil, fmt.Errorf("start embedded temporal: %w", err)
		}
		s.Frontend, s.Namespace, s.Embedded = s.dev.FrontendAddr(), s.dev.Namespace(), true
	} else {
		// A Temporal server outlives runs: a task queue of the run's own
		// keeps earlier runs' workflows away from this run's workers.
		s.TaskQueue = "bae-bench-" + s.DB.Name[len("bae_bench_"):]
	}
	// Dialled like app.Run dials (SDK defaults), so the bench measures the
	// client baesrv really uses.
	copts := client.Options{HostPort: s.Frontend, Namespace: s.Namespace, Logger: sdklog.NewStructuredLogger(srvLog)}
	mode, err := config.ParseTemporalCompression(os.Getenv("BAE_TEMPORAL_COMPRESSION"))
	if err != nil {
		return nil, err
	}
	copts.ConnectionOptions.GrpcCompression = app.TemporalCompression(copts.HostPort, mode)
	if o.Gzip {
		copts.ConnectionOptions.GrpcCompression = &client.GrpcCompressionGzip{}
	}
	copts.Interceptors = o.TemporalInterceptors
	if s.Temporal, err = client.DialContext(ctx, copts); err != nil {
		return nil, fmt.Errorf("dial temporal: %w", err)
	}
	if !s.Embedded {
		if err := SearchAttributesReady(ctx, s.Temporal, s.Namespace); err != nil {
			return nil, err
		}
	}
	log.Info("temporal ready", "frontend", s.Frontend, "embedded", s.Embedded, "took", time.Since(t0).Round(time.Millisecond))

	s.env = map[string]string{
		"BAE_ADDR": "127.0.0.1:0", "BAE_ADMIN_ADDR": "127.0.0.1:0", "BAE_DATABASE_URL": s.DB.URL,
		"BAE_DATA_DIR": s.DataDir, "BAE_SHUTDOWN_TIMEOUT": "5", "BAE_TASK_QUEUE": s.TaskQueue,
		"BAE_TEMPORAL_NAMESPACE": s.Namespace,
		// A bench opens many sessions with one client key and leaves most
		// idle: lift the per-key and per-profile caps and the idle-session
		// TTL it is not measuring.
		"BAE_MAX_SESSIONS_PER_KEY": "0", "BAE_MAX_SESSIONS_PER_PROFILE": "0", "BAE_SESSION_IDLE_TTL": "0",
		"BAE_MAX_STREAMS_PER_KEY": "0", "BAE_MAX_QUEUED_TURNS_PER_KEY": "0",
	}
	for k, v := range o.Env {
		s.env[k] = v
	}
	if o.NoServer {
		return s, nil
	}
	srvCfg, err := config.ServerFromEnv(s.Lookup)
	if err != nil {
		return nil, fmt.Errorf("server config: %w", err)
	}
	file, err := config.Parse([]byte(o.ConfigTOML), s.Lookup)
	if err != nil {
		return nil, fmt.Errorf("bench config: %w", err)
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
		s.appDone <- err
		return nil, fmt.Errorf("baesrv exited before serving: %w", err)
	case <-time.After(60 * time.Second):
		return nil, errors.New("baesrv did not start within 60s")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	key, err := adminkey.ReadKeyFile(srvCfg.AdminKeyFile)
	if err != nil {
		return nil, fmt.Errorf("read admin key: %w", err)
	}
	s.Admin = Admin{HTTP: HTTPClient(16), URL: s.AdminURL, Key: key}
	return s, nil
}

// ServerEnv is the environment baesrv runs with (a copy): the bench's
// database, data directory, Temporal namespace and task queue, and the
// caps a bench lifts.
func (s *InProc) ServerEnv() map[string]string {
	out := make(map[string]string, len(s.env))
	for k, v := range s.env {
		out[k] = v
	}
	return out
}

// Lookup reads a variable as baesrv sees it: ServerEnv, else the process
// environment.
func (s *InProc) Lookup(k string) (string, bool) {
	if v, ok := s.env[k]; ok {
		return v, true
	}
	return os.LookupEnv(k)
}

// Close stops everything in reverse order and drops the database, on a
// fresh context so an interrupted run still cleans up.
func (s *InProc) Close() {
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
	if s.Temporal != nil {
		s.Temporal.Close()
	}
	if s.dev != nil {
		if err := s.dev.Stop(); err != nil {
			s.log.Warn("stop temporal", "err", err)
		}
	}
	if s.DB != nil {
		if err := s.DB.Drop(); err != nil {
			s.log.Warn("drop bench database", "err", err)
		}
	}
	if s.DataDir != "" {
		_ = os.RemoveAll(filepath.Clean(s.DataDir))
	}
}

// HTTPClient is a client with conns keep-alive connections per host (the
// default of 2 would make most concurrent requests dial a new socket) and
// no transparent gzip.
func HTTPClient(conns int) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = conns + 64
	tr.MaxIdleConnsPerHost = conns + 64
	tr.DisableCompression = true
	return &http.Client{Transport: tr}
}
