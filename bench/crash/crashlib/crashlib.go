// Package crashlib measures crash recovery: it drives turns against a real
// `baesrv serve` subprocess while a killer SIGKILLs it (or restarts
// Temporal) at random points, then checks from the public event log that
// every message became exactly one turn with exactly one answer, and that
// no provider call was logged twice. bench/crash is its command line;
// tests/crash_test.go runs a short version.
package crashlib

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/bae-go/bae-go/internal/ids"
)

// TurnTimeout is the BAE_TURN_TIMEOUT baesrv runs with: how long a turn
// paused on a client tool holds the gate.
const TurnTimeout = 5 * time.Second

// Options configure a run. Zero values take the defaults noted.
type Options struct {
	Turns    int // user turns across all sessions (default 100)
	Sessions int // default 4
	Kills    int // default 10; 0 runs without crashes
	// KillTemporal restarts the Temporal devstack (state on disk) instead
	// of killing baesrv.
	KillTemporal bool
	// ToolShare is the fraction of turns that are a client tool round trip
	// (tool_use, pause, tool_result continuation); default 0.3, <0 for none.
	ToolShare float64
	// AbandonShare is the fraction of tool turns whose continuation the
	// client never sends, so its next message abandons the pause; default
	// 0.2, <0 for none.
	AbandonShare float64
	// Seed makes the plan and kill points reproducible; 0 picks one.
	Seed uint64
	// BaesrvPath is a prebuilt baesrv; "" builds ./cmd/baesrv.
	BaesrvPath string
	// DatabaseURL is the maintenance database the run creates its own
	// bae_crash_<random> database from.
	DatabaseURL string
	// RecoverWithin bounds how long a client waits for a broken turn's
	// reply to appear in the log (default 90s).
	RecoverWithin time.Duration
	// MaxProviderDelay is the fake provider's random latency bound
	// (default 50ms).
	MaxProviderDelay time.Duration
	// MaxKillJitter is the random delay between a kill point and the kill
	// (default 80ms).
	MaxKillJitter time.Duration
	// Keep leaves the work dir (logs) and the database in place.
	Keep bool
	// Log receives progress; nil discards.
	Log *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.Turns <= 0 {
		o.Turns = 100
	}
	if o.Sessions <= 0 {
		o.Sessions = 4
	}
	if o.Kills < 0 {
		o.Kills = 0
	}
	if o.ToolShare == 0 {
		o.ToolShare = 0.3
	}
	if o.AbandonShare == 0 {
		o.AbandonShare = 0.2
	}
	if o.Seed == 0 {
		o.Seed = rand.Uint64()
	}
	if o.DatabaseURL == "" {
		o.DatabaseURL = DefaultDatabaseURL()
	}
	if o.RecoverWithin <= 0 {
		o.RecoverWithin = 90 * time.Second
	}
	if o.MaxProviderDelay == 0 {
		o.MaxProviderDelay = 50 * time.Millisecond
	}
	if o.MaxKillJitter == 0 {
		o.MaxKillJitter = 80 * time.Millisecond
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return o
}

// DefaultDatabaseURL is BAE_TEST_DATABASE_URL, else the local postgres
// maintenance database (as internal/testdb).
func DefaultDatabaseURL() string {
	if u := os.Getenv("BAE_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// Run performs one crash run. The error is for a run that could not be
// carried out; what the run found is in the report (Report.OK).
func Run(ctx context.Context, o Options) (*Report, error) {
	o = o.withDefaults()
	log := o.Log
	r := rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))
	t0 := time.Now()

	st, err := startStack(ctx, o, respond(o.MaxProviderDelay))
	if err != nil {
		return nil, err
	}
	rep := &Report{Options: o, WorkDir: st.workDir, Database: st.dbName}
	defer func() { st.close(o.Keep || !rep.OK()) }()
	rep.Setup = time.Since(t0)
	log.Info("stack ready", "baesrv", st.clientAddr, "admin", st.adminAddr, "temporal", st.dev.FrontendAddr(), "work_dir", st.workDir, "setup", rep.Setup.Round(time.Millisecond))

	a := newAPI(st.clientAddr, st.adminAddr, st.adminKey)
	clientKey, err := a.setup(ctx)
	if err != nil {
		return nil, err
	}
	runID := ids.New("")[:6]
	drivers := make([]*driver, o.Sessions)
	total := 0
	for i := range drivers {
		sess, err := a.open(ctx, clientKey)
		if err != nil {
			return nil, err
		}
		drivers[i] = &driver{n: i, api: a, st: st, sess: sess, runID: runID, within: o.RecoverWithin}
	}
	for j := range o.Turns {
		d := drivers[j%o.Sessions]
		var p turnPlan
		p.tool = o.ToolShare > 0 && r.Float64() < o.ToolShare
		p.abandon = p.tool && r.Float64() < o.AbandonShare
		d.plan = append(d.plan, p)
		total++
		if p.tool && !p.abandon {
			total++
		}
		if p.abandon {
			rep.PlannedAbandons++
		}
	}
	total += o.Sessions // each session's final message
	prog := newProgress()
	for _, d := range drivers {
		d.prog = prog
	}
	rep.PlannedCalls = total

	k := &killer{st: st, prog: prog, points: killPoints(r, o.Kills, total), maxJitter: o.MaxKillJitter, temporal: o.KillTemporal}
	driveStart := time.Now()
	driversDone := make(chan struct{})
	killerDone := make(chan struct{})
	go func() {
		defer close(killerDone)
		k.run(ctx, r, driversDone)
	}()
	var wg sync.WaitGroup
	for _, d := range drivers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.run(ctx)
		}()
	}
	wg.Wait()
	close(driversDone)
	<-killerDone
	rep.Drive = time.Since(driveStart)
	if ctx.Err() != nil {
		return nil, fmt.Errorf("run interrupted: %w", ctx.Err())
	}
	// Checks run against a healthy server, after any last restart.
	if err := st.awaitHealthy(ctx); err != nil {
		return nil, err
	}
	rep.Kills = k.kills
	rep.Unexpected = st.unexpectedExits()
	if err := verify(ctx, st, a, drivers, rep); err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	rep.Wall = time.Since(t0)
	return rep, nil
}
