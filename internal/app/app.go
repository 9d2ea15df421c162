// Package app wires the server together: store, Temporal client and worker,
// the live event hub and the two HTTP listeners, with graceful shutdown.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"

	"github.com/bae-go/bae-go/activities"
	"github.com/bae-go/bae-go/api"
	"github.com/bae-go/bae-go/console"
	"github.com/bae-go/bae-go/internal/config"
	"github.com/bae-go/bae-go/internal/lib/adminkey"
	"github.com/bae-go/bae-go/internal/lib/keyhash"
	"github.com/bae-go/bae-go/internal/lib/live"
	"github.com/bae-go/bae-go/internal/lib/secretguard"
	"github.com/bae-go/bae-go/internal/provider"
	"github.com/bae-go/bae-go/internal/sessionclient"
	"github.com/bae-go/bae-go/internal/sessiontools"
	"github.com/bae-go/bae-go/internal/telemetry"
	"github.com/bae-go/bae-go/store"
)

// Version is the server version reported by /api/v1/meta.
const Version = "0.1.0"

// Options are the command-line choices.
type Options struct {
	Server config.Server
	File   *config.File
	Admin  adminkey.Options
	// Temporal is an already dialed client; when nil, Run dials
	// Server.TemporalAddr. It is used as is: build it with
	// Telemetry.TemporalOptions for Temporal spans and SDK metrics.
	Temporal client.Client
	Log      *slog.Logger // required
	// Ready, when set, receives the bound addresses once serving.
	Ready func(clientAddr, adminAddr string)
	// ConsoleReady, when set and the console is on, receives its URL once
	// serving.
	ConsoleReady func(url string)
	// Extra lets callers (issue 4 services) add collaborators.
	Extend func(*Parts) error
	// Telemetry, when set, replaces the pipeline built from File's
	// [telemetry] (tests record spans and metrics in memory); the caller
	// owns its providers.
	Telemetry *telemetry.Telemetry
	// KeyHasher, when set, replaces the one BAE_KEY_HASH names (tests use
	// cheap Argon2id costs).
	KeyHasher keyhash.Hasher
}

// Parts are the assembled collaborators, exposed so tests and extensions
// can reach them.
type Parts struct {
	Store      *store.Store
	Temporal   client.Client
	Engine     *sessionclient.Client
	Hub        *live.Hub
	Deps       *api.Deps
	Activities *activities.Activities
	Worker     worker.Worker
	AdminAuth  api.AdminAuth
	Sandbox    api.SandboxStatus
	Services   *services
}

// Run serves until ctx is cancelled, then shuts down within
// Server.ShutdownTimeout.
func Run(ctx context.Context, opts Options) error {
	log := opts.Log
	if log == nil {
		return errors.New("app: Options.Log is required")
	}
	cfg := opts.Server
	if err := Check(opts); err != nil {
		return err
	}
	hasher := opts.KeyHasher
	if hasher == nil {
		var err error
		if hasher, err = keyhash.ForScheme(cfg.KeyHash); err != nil {
			return err
		}
	}
	st, err := store.Open(ctx, cfg.DatabaseURL, store.Options{KeyHasher: hasher})
	if err != nil {
		return err
	}
	// Closed last: the telemetry flush below reads the store-backed gauges
	// one final time.
	defer st.Close()
	tel, err := newTelemetry(ctx, opts, log)
	if err != nil {
		return err
	}
	var flushBy time.Time // set when shutdown starts
	// Deferred before everything but the store, so it runs after the
	// worker's final spans.
	defer func() { flushTelemetry(tel, flushBy, cfg.ShutdownTimeout, log) }()
	if err := tel.Metrics.ObserveCounts(st); err != nil {
		return err
	}
	if err := adminkey.Bootstrap(ctx, st, opts.Admin, log); err != nil {
		return err
	}
	// Keys that shared a prefix before prefixes were kept unique cost each
	// request under that prefix one verification more (and are refused past
	// four): say so where operators look.
	if shared, err := st.SharedPrefixKeys(ctx); err != nil {
		return err
	} else if len(shared) > 0 {
		log.Warn("client keys share a key prefix: each request under it verifies every one (refused past four); revoke all but one of each prefix and mint their holders new keys (see docs/operations.md, keys and secrets)", "key_ids", shared)
	}

	tc := opts.Temporal
	if tc == nil {
		copts := client.Options{
			HostPort: cfg.TemporalAddr, Namespace: cfg.TemporalNamespace, Logger: newTemporalLogger(log),
			DataConverter: secretguard.FromConfig(opts.File, os.LookupEnv).DataConverter(),
		}
		if err := temporalConnection(&copts, cfg.Temporal); err != nil {
			return err
		}
		tc, err = client.Dial(tel.TemporalOptions(copts))
		if err != nil {
			return fmt.Errorf("connect to temporal at %s: %w", cfg.TemporalAddr, err)
		}
		defer tc.Close()
	}
	eng := &sessionclient.Client{Client: tc, TaskQueue: cfg.TaskQueue, TurnTimeout: cfg.TurnTimeout, HeartbeatTimeout: cfg.HeartbeatTimeout, DBRetryBudget: cfg.DBRetryBudget, Log: log}
	eng.EnsureSearchAttributes(ctx, cfg.TemporalNamespace)

	hub := live.New(st.Pool, log)
	if !cfg.DeltasInterest {
		hub.Deltas().WithoutInterest()
	}
	hub.UseNotices(st)
	st.OnLocalAppend(hub.Wake)
	st.OnTurnResult(hub.TurnDone)
	svc, err := newServices(ctx, st, opts.File, cfg, log)
	if err != nil {
		return err
	}
	defer svc.close()
	if err := tel.Metrics.ObserveMCPSessions(svc.mcp.LiveSessions); err != nil {
		return err
	}
	hub.OnSessionClosed(svc.mcp.CloseSession)
	svc.tools.Engine = eng
	acts := &activities.Activities{
		Store: st, Config: opts.File, Provider: &provider.Client{HTTP: provider.NewHTTPClient()}, Log: log,
		MCP: svc.mcp, Sandbox: sessiontools.Execer{Driver: svc.driver},
		Cleaners:      []activities.Cleaner{svc.tools, mcpCleaner{pool: st.Pool}},
		DBRetryBudget: cfg.DBRetryBudget,
		Deltas:        hub.Deltas(),
	}
	// An interrupt's stop message ends the turn's provider call on the
	// replica running it (api: the interrupt's fast path).
	hub.OnStopTurn(func(sessionID, turnID string) { acts.StopProviderCalls(sessionID, turnID) })
	deps := &api.Deps{
		Store: st, Config: opts.File, Engine: eng, Hub: hub, Log: log, Version: Version,
		MCP: svc.mcp, Tools: svc.tools, MaxBodyBytes: cfg.MaxBodyBytes, BodyReadTimeout: cfg.BodyReadTimeout,
		AuthFailures:       authFailures(cfg.AuthFailureLimit),
		IdleUpdate:         cfg.IdleUpdate,
		TrustedProxies:     cfg.TrustedProxies,
		MaxConcurrentOpens: cfg.MaxConcurrentOpens,
		Caps: store.Caps{
			SessionsPerKey: cfg.MaxSessionsPerKey, SessionsPerProfile: cfg.MaxSessionsPerProfile,
			SandboxesPerKey: cfg.MaxSandboxesPerKey, SandboxesPerProfile: cfg.MaxSandboxesPerProfile,
			QueuedTurnsPerSession: cfg.MaxQueuedTurnsPerSession, QueuedTurnsPerKey: cfg.MaxQueuedTurnsPerKey,
		},
		MaxStreamsPerSession: cfg.MaxStreamsPerSession,
		MaxStreamsPerKey:     cfg.MaxStreamsPerKey,
		OnProfileWritten:     func(p store.Profile) { svc.provisioner.Provision(p.ID, p.AvailableSandboxes) },
	}
	if cfg.MaxStreamsPerSession > 0 || cfg.MaxStreamsPerKey > 0 {
		// The caps count every replica's streams (nothing to share without).
		deps.StreamCounts = api.NewStreamCounts(st, log, 0)
	}
	svc.tools.Caps = deps.Caps
	acts.Metrics, deps.Metrics = tel.Metrics, tel.Metrics
	acts.Spans, deps.Spans = tel.Spans, tel.Spans
	parts := &Parts{Store: st, Temporal: tc, Engine: eng, Hub: hub, Deps: deps, Activities: acts, Sandbox: sandboxStatus{svc.provisioner}, Services: svc}
	if !opts.Admin.Disabled {
		parts.AdminAuth = &adminkey.Verifier{Store: st}
	}
	if opts.Extend != nil {
		if err := opts.Extend(parts); err != nil {
			return err
		}
	}

	SetWorkflowCacheSize(cfg.WorkflowCacheSize)
	w := worker.New(tc, cfg.TaskQueue, worker.Options{
		Interceptors:               []interceptor.WorkerInterceptor{telemetry.TurnInterceptor(tel.Spans, log), activities.NotOpenInterceptor()},
		WorkflowTaskPollerBehavior: worker.NewPollerBehaviorAutoscaling(worker.PollerBehaviorAutoscalingOptions{}),
		ActivityTaskPollerBehavior: worker.NewPollerBehaviorAutoscaling(worker.PollerBehaviorAutoscalingOptions{}),
	})
	acts.Register(w)
	parts.Worker = w
	if err := w.Start(); err != nil {
		return fmt.Errorf("start temporal worker: %w", err)
	}
	defer w.Stop()

	hubCtx, stopHub := context.WithCancel(context.WithoutCancel(ctx))
	defer stopHub()
	go hub.Run(hubCtx)
	go deps.StreamCounts.Run(hubCtx)
	go svc.sweepSandboxes(hubCtx, st, tel.Metrics, cfg.SandboxSweepInterval, log)
	go sweepOrphans(hubCtx, st, eng, log)
	go closeIdleSessions(hubCtx, st, eng, cfg.SessionIdleTTL, log)
	select {
	case <-hub.Ready():
	case <-ctx.Done():
		return nil
	}

	clientLn, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on BAE_ADDR %s: %w", cfg.Addr, err)
	}
	adminLn, err := net.Listen("tcp", cfg.AdminAddr)
	if err != nil {
		clientLn.Close()
		return fmt.Errorf("listen on BAE_ADMIN_ADDR %s: %w", cfg.AdminAddr, err)
	}
	clientSrv := &http.Server{Handler: tel.HTTP(api.ClientRouter(deps)), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	adminSrv := &http.Server{Handler: tel.HTTP(api.AdminRouter(deps, parts.AdminAuth, parts.Sandbox)), ReadHeaderTimeout: 10 * time.Second}
	type listener struct {
		srv *http.Server
		ln  net.Listener
	}
	listeners := []listener{{clientSrv, clientLn}, {adminSrv, adminLn}}
	metricsSrv, metricsLn, err := serveMetrics(cfg.MetricsAddr, cfg.Pprof, tel, adminSrv, log)
	if err != nil {
		clientLn.Close()
		adminLn.Close()
		return err
	}
	if metricsSrv != nil {
		listeners = append(listeners, listener{metricsSrv, metricsLn})
	}
	con, err := startConsole(ctx, cfg, parts, svc.deployment, log)
	if err != nil {
		clientLn.Close()
		adminLn.Close()
		if metricsLn != nil {
			metricsLn.Close()
		}
		return err
	}
	if con != nil {
		defer con.stopStreams()
		listeners = append(listeners, listener{con.srv, con.ln})
	}
	errs := make(chan error, len(listeners))
	var wg sync.WaitGroup
	for _, s := range listeners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errs <- err
			}
		}()
	}
	log.Info("baesrv serving", "client_addr", clientLn.Addr().String(), "admin_addr", adminLn.Addr().String(), "temporal", cfg.TemporalAddr, "task_queue", cfg.TaskQueue)
	if metricsLn != nil {
		log.Info("prometheus metrics serving", "url", "http://"+metricsLn.Addr().String()+"/metrics")
	}
	if con != nil {
		log.Info("operator console serving", "url", con.url, "password_file", con.passwordFile)
		if opts.ConsoleReady != nil {
			opts.ConsoleReady(con.url)
		}
	}
	if opts.Ready != nil {
		opts.Ready(clientLn.Addr().String(), adminLn.Addr().String())
	}

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errs:
	}
	log.Info("shutting down", "timeout", cfg.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	flushBy, _ = sctx.Deadline()
	_ = adminSrv.Shutdown(sctx)
	if metricsSrv != nil {
		_ = metricsSrv.Shutdown(sctx)
	}
	if con != nil {
		con.stopStreams() // live streams never finish on their own
		_ = con.srv.Shutdown(sctx)
	}
	if err := clientSrv.Shutdown(sctx); err != nil {
		// Streams still open past the budget are cut; their turns continue
		// in the workflow and remain readable from the event log.
		_ = clientSrv.Close()
	}
	wg.Wait()
	return runErr
}

// Check reads the files the settings name (Temporal and console TLS
// material) and checks the console password file, so that every
// configuration error is reported, with exit code 2, before the server
// connects to PostgreSQL or writes anything. Run calls it first; baesrv dev
// calls it before starting its embedded Temporal.
func Check(opts Options) error {
	if opts.Temporal == nil {
		if _, err := opts.Server.Temporal.TLSConfig(); err != nil {
			return err
		}
	}
	c := opts.Server.Console
	if !c.Enabled() {
		return nil
	}
	if _, err := c.TLSConfig(); err != nil {
		return err
	}
	return console.CheckPasswordFile(c)
}

// Exit codes.
const (
	ExitOK    = 0
	ExitError = 1
	ExitUsage = 2
)

// ExitCode maps an error from Run or option loading to a process exit code.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var ue *adminkey.UsageError
	var ve *config.ValidationError
	if errors.As(err, &ue) || errors.As(err, &ve) {
		return ExitUsage
	}
	return ExitError
}

// Fatal prints err and exits with its code.
func Fatal(err error) {
	fmt.Fprintln(os.Stderr, "baesrv:", err)
	os.Exit(ExitCode(err))
}

// authFailures maps BAE_AUTH_FAILURE_LIMIT (0 = off) to api.Deps.
func authFailures(limit int) int {
	if limit == 0 {
		return -1
	}
	return limit
}

// SetWorkflowCacheSize sizes the Temporal worker's sticky workflow cache
// (BAE_WORKFLOW_CACHE_SIZE; 0 leaves the SDK's default). The cache is one
// per process, created when the process's first worker starts: a process
// embedding a Temporal server must call this before the server starts, as
// that server's own workers would otherwise create it at the default size.
func SetWorkflowCacheSize(size int) {
	if size > 0 {
		worker.SetStickyWorkflowCacheSize(size)
	}
}
