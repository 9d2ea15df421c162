package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"go.temporal.io/sdk/worker"

	"github.com/bae-go/bae-go/bench/benchstack"
)

// stack is everything the benchmark runs: benchstack's stack (a throwaway
// database, the embedded Temporal or an external server, -temporal, and
// baesrv in this process or, with -replicas, as `baesrv serve` processes)
// and the timed fake provider.
type stack struct {
	*benchstack.InProc
	log    *slog.Logger
	dbName string
	DBURL  string
	// temporalPID is an external Temporal server's process, for its CPU.
	temporalPID int
	temporalDBs []string
	replicas    []*replica
	Fake        *timedFake
	FakeURL     string
	fakeSrv     *http.Server

	ClientURLs []string // every replica's client API, ClientURL first
	AdminKey   string

	extra worker.Worker
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
	s := &stack{log: log, temporalPID: o.TemporalPID, temporalDBs: o.TemporalDBs}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	var srvLog *slog.Logger
	if o.ServerLog != nil {
		srvLog = slog.New(slog.NewTextHandler(o.ServerLog, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	// The fake is served by our own listener so every request passes
	// through timedFake, which times it and attributes it to a turn.
	s.Fake = newTimedFake()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for fake provider: %w", err)
	}
	s.fakeSrv = &http.Server{Handler: s.Fake, ReadHeaderTimeout: 10 * time.Second, ConnState: s.Fake.connState}
	go s.fakeSrv.Serve(ln) //nolint:errcheck // ends with ErrServerClosed on Close
	s.FakeURL = "http://" + ln.Addr().String()

	var settings map[string]string
	if o.LogStatements {
		settings = map[string]string{"log_statement": "all"}
	}
	s.InProc, err = benchstack.StartInProc(ctx, log, benchstack.InProcOptions{
		BaseDatabaseURL: o.BaseDatabaseURL, ConfigTOML: benchstack.ProviderTOML(s.FakeURL), ServerLog: srvLog,
		DBSettings: settings, TemporalAddr: o.TemporalAddr, TemporalNamespace: o.TemporalNamespace, Gzip: o.Gzip,
		NoServer: o.Replicas > 0,
	})
	if err != nil {
		return nil, err
	}
	s.dbName, s.DBURL = s.DB.Name, s.DB.URL
	if o.LogStatements {
		log.Info("postgres logs every statement of the bench database", "database", s.dbName)
	}
	if o.Replicas > 0 {
		err = s.startReplicas(ctx, o, s.Frontend)
	} else {
		s.AdminKey = s.Admin.Key
		err = s.startExtraWorker(o.ExtraPollers)
	}
	if err != nil {
		return nil, err
	}
	s.ClientURLs = append([]string{s.ClientURL}, s.ClientURLs...)
	return s, nil
}

// startExtraWorker is a diagnostic: a second worker in the same process on
// baesrv's task queue, as a second replica would add, with more pollers
// than the SDK default of 2 per task type.
func (s *stack) startExtraWorker(pollers int) error {
	if pollers <= 0 {
		return nil
	}
	s.extra = worker.New(s.Temporal, s.TaskQueue, worker.Options{
		MaxConcurrentWorkflowTaskPollers: pollers, MaxConcurrentActivityTaskPollers: pollers,
	})
	s.Parts.Activities.Register(s.extra)
	if err := s.extra.Start(); err != nil {
		return fmt.Errorf("start extra worker: %w", err)
	}
	s.log.Info("extra worker started", "pollers", pollers)
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
	if s.InProc != nil {
		s.InProc.Close()
	}
	if s.fakeSrv != nil {
		_ = s.fakeSrv.Close()
	}
}
