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
// it: a throwaway database, an in-memory embedded Temporal and baesrv
// (app.Run) on loopback ports. bench/compaction and bench/live use it;
// bench/turns keeps its own, which has diagnostics these do not need.
type InProc struct {
	DB        *Database
	Temporal  client.Client
	ClientURL string
	AdminURL  string
	Admin     Admin
	Parts     *app.Parts

	log     *slog.Logger
	dev     *devstack.Server
	dataDir string
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
	// TemporalInterceptors wrap baesrv's Temporal client, for a bench that
	// counts what the server asks of Temporal.
	TemporalInterceptors []interceptor.ClientInterceptor
}

// StartInProc brings every part up; on error whatever started is torn down.
func StartInProc(ctx context.Context, log *slog.Logger, o InProcOptions) (_ *InProc, err error) {
	s := &InProc{log: log}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	srvLog := o.ServerLog
	if srvLog == nil {
		srvLog = slog.New(slog.DiscardHandler)
	}
	if s.dataDir, err = os.MkdirTemp("", "bae-bench-"); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	if s.DB, err = CreateDatabase(ctx, o.BaseDatabaseURL, "bae_bench_", o.DBSettings); err != nil {
		return nil, err
	}
	ports, err := FreePorts(1)
	if err != nil {
		return nil, err
	}
	if s.dev, err = devstack.Start(ctx, TemporalOptions(ports[0], "", srvLog)); err != nil {
		return nil, fmt.Errorf("start embedded temporal: %w", err)
	}
	copts := client.Options{HostPort: s.dev.FrontendAddr(), Namespace: s.dev.Namespace(), Logger: sdklog.NewStructuredLogger(srvLog),
		Interceptors: o.TemporalInterceptors}
	copts.ConnectionOptions.GrpcCompression = app.TemporalCompression(copts.HostPort, config.CompressionAuto)
	if s.Temporal, err = client.DialContext(ctx, copts); err != nil {
		return nil, fmt.Errorf("dial temporal: %w", err)
	}

	env := map[string]string{
		"BAE_ADDR": "127.0.0.1:0", "BAE_ADMIN_ADDR": "127.0.0.1:0", "BAE_DATABASE_URL": s.DB.URL,
		"BAE_DATA_DIR": s.dataDir, "BAE_SHUTDOWN_TIMEOUT": "5", "BAE_TASK_QUEUE": "bae-bench",
		"BAE_TEMPORAL_NAMESPACE":   s.dev.Namespace(),
		"BAE_MAX_SESSIONS_PER_KEY": "0", "BAE_MAX_SESSIONS_PER_PROFILE": "0", "BAE_SESSION_IDLE_TTL": "0",
		// One bench key drives many sessions at once.
		"BAE_MAX_STREAMS_PER_KEY": "0", "BAE_MAX_QUEUED_TURNS_PER_KEY": "0",
	}
	for k, v := range o.Env {
		env[k] = v
	}
	lookup := func(k string) (string, bool) {
		if v, ok := env[k]; ok {
			return v, true
		}
		return os.LookupEnv(k)
	}
	srvCfg, err := config.ServerFromEnv(lookup)
	if err != nil {
		return nil, fmt.Errorf("server config: %w", err)
	}
	file, err := config.Parse([]byte(o.ConfigTOML), lookup)
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
	if s.dataDir != "" {
		_ = os.RemoveAll(filepath.Clean(s.dataDir))
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
