// Package crashlib measures crash recovery: it drives turns (plain, client
// tool, Auto-mode sandbox and MCP tool turns) against a real `baesrv serve`
// subprocess through the Go SDK while a killer SIGKILLs it (or restarts
// Temporal) at random or aimed points and cuts its PostgreSQL connections
// for a while, then checks from the public event log, the sandbox
// containers and the MCP server that every message became exactly one turn
// with exactly one answer and that no side effect ran twice. bench/crash
// is its command line; tests/crash_test.go runs a short version.
package crashlib

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/bae-go/bae-go/internal/lib/ids"
	"github.com/bae-go/bae-go/internal/testing/testdb"
	"github.com/bae-go/bae-go/sdk"
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
	// KillAt lists the kill points (PointRandom, PointAccept, ...) the kills
	// are aimed at, in turn; default PointRandom only.
	KillAt []string
	// Outages are database outages, one per entry: PostgreSQL connections
	// cut (through a TCP proxy) for that long, starting mid provider call.
	Outages []time.Duration
	// ToolShare is the fraction of turns that are a client tool round trip
	// (tool_use, pause, tool_result continuation); default 0.3, <0 for none.
	ToolShare float64
	// AbandonShare is the fraction of tool turns whose continuation the
	// client never sends, so its next message abandons the pause; default
	// 0.2, <0 for none.
	AbandonShare float64
	// SandboxShare and MCPShare are the fractions of turns that run an
	// Auto-mode sandbox command or an MCP call server-side (0: none).
	// Sandbox turns need a Docker engine; the image is built locally.
	SandboxShare, MCPShare float64
	// ToolDuration is how long a sandbox command or MCP call runs
	// (default 1s): the window a tool-execution kill lands in.
	ToolDuration time.Duration
	// Seed makes the plan and kill points reproducible; 0 picks one.
	Seed uint64
	// BaesrvPath is a prebuilt baesrv; "" builds ./cmd/baesrv.
	BaesrvPath string
	// DatabaseURL is the maintenance database the run creates its own
	// bae_crash_<random> database from.
	DatabaseURL string
	// RecoverWithin bounds how long a client keeps resending one message
	// before it counts it undelivered (default 3m: longer than an outage).
	RecoverWithin time.Duration
	// MaxProviderDelay is the fake provider's random latency bound
	// (default 50ms).
	MaxProviderDelay time.Duration
	// MaxKillJitter is the random delay between a random kill point and
	// the kill (default 80ms).
	MaxKillJitter time.Duration
	// AimWithin bounds the wait for an aimed point (default 30s); a point
	// not seen by then fires at once and counts as a random kill.
	AimWithin time.Duration
	// Keep leaves the work dir (logs) and the database in place.
	Keep bool
	// Log receives progress; nil discards.
	Log *slog.Logger
}

func (o Options) withDefaults() (Options, error) {
	if o.Turns <= 0 {
		o.Turns = 100
	}
	if o.Sessions <= 0 {
		o.Sessions = 4
	}
	if o.Kills < 0 {
		o.Kills = 0
	}
	if len(o.KillAt) == 0 {
		o.KillAt = []string{PointRandom}
	}
	if o.ToolShare == 0 {
		o.ToolShare = 0.3
	}
	if o.AbandonShare == 0 {
		o.AbandonShare = 0.2
	}
	if o.ToolDuration <= 0 {
		o.ToolDuration = time.Second
	}
	if o.Seed == 0 {
		o.Seed = rand.Uint64()
	}
	if o.DatabaseURL == "" {
		o.DatabaseURL = DefaultDatabaseURL()
	}
	if o.RecoverWithin <= 0 {
		o.RecoverWithin = 3 * time.Minute
	}
	if o.MaxProviderDelay == 0 {
		o.MaxProviderDelay = 50 * time.Millisecond
	}
	if o.MaxKillJitter == 0 {
		o.MaxKillJitter = 80 * time.Millisecond
	}
	if o.AimWithin <= 0 {
		o.AimWithin = 30 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if max(o.ToolShare, 0)+max(o.SandboxShare, 0)+max(o.MCPShare, 0) > 1 {
		return o, fmt.Errorf("tool, sandbox and MCP shares add up to more than 1")
	}
	for _, p := range o.KillAt {
		switch {
		case !slices.Contains(KillPoints, p):
			return o, fmt.Errorf("unknown kill point %q (want one of %v)", p, KillPoints)
		case p == PointSandbox && o.SandboxShare <= 0:
			return o, fmt.Errorf("kill point %q needs sandbox turns", p)
		case p == PointMCP && o.MCPShare <= 0:
			return o, fmt.Errorf("kill point %q needs MCP turns", p)
		case p == PointResume && o.ToolShare <= 0:
			return o, fmt.Errorf("kill point %q needs client tool turns", p)
		}
	}
	return o, nil
}

// DefaultDatabaseURL is BAE_TEST_DATABASE_URL, else the local postgres
// maintenance database (as internal/testing/testdb).
func DefaultDatabaseURL() string {
	return testdb.BaseDatabaseURL()
}

// Run performs one crash run. The error is for a run that could not be
// carried out; what the run found is in the report (Report.OK).
func Run(ctx context.Context, o Options) (*Report, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	log := o.Log
	r := rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))
	t0 := time.Now()
	aim := &aimer{}

	var sb *sandboxes
	if o.SandboxShare > 0 {
		if sb, err = buildSandboxImage(ctx); err != nil {
			return nil, err
		}
	}
	var mc *mcpCounter
	extraTOML := ""
	if o.MCPShare > 0 {
		if mc, err = startMCPCounter(o.ToolDuration, aim); err != nil {
			return nil, err
		}
		defer mc.close()
		extraTOML = fmt.Sprintf("\n[[mcp.servers]]\nname = %q\ntransport = \"http\"\nurl = %q\n", mcpServerName, mc.url)
	}
	st, err := startStack(ctx, o, respond(o.MaxProviderDelay, o.ToolDuration, aim), extraTOML)
	if err != nil {
		if sb != nil {
			_ = sb.close()
		}
		return nil, err
	}
	rep := &Report{Options: o, WorkDir: st.workDir, Database: st.dbName()}
	var drivers []*driver
	defer func() {
		if sb != nil {
			if err := sb.close(); err != nil {
				log.Warn("remove sandboxes", "err", err)
			}
		}
		st.close(o.Keep || !rep.OK())
	}()
	rep.Setup = time.Since(t0)
	log.Info("stack ready", "baesrv", st.clientAddr, "admin", st.adminAddr, "temporal", st.dev.FrontendAddr(), "work_dir", st.workDir, "setup", rep.Setup.Round(time.Millisecond))

	a := newAPI(st.clientAddr, st.adminAddr, st.adminKey, aim)
	image := ""
	if sb != nil {
		image = sb.image
	}
	if err := a.setup(ctx, mc != nil, image); err != nil {
		return nil, err
	}
	runID := ids.New("")[:6]
	prog := newProgress()
	for i := range o.Sessions {
		d := &driver{n: i, st: st, sb: sb, aim: aim, runID: runID, within: o.RecoverWithin, prog: prog}
		hooks := sdk.Hooks{OnEvent: func(ctx context.Context, e sdk.Event) error {
			if e.Type == sdk.EventSandboxRequest && aim.armed(PointSandbox) {
				d.watchSandbox(ctx, e.Payload)
			}
			return nil
		}}
		if d.sess, err = a.open(ctx, sb != nil, hooks); err != nil {
			return nil, err
		}
		if sb != nil {
			if d.box, err = startSandbox(ctx, d.sess, sb.image); err != nil {
				return nil, err
			}
		}
		drivers = append(drivers, d)
	}
	total := 0
	for j := range o.Turns {
		d := drivers[j%o.Sessions]
		var p turnPlan
		x := r.Float64()
		switch {
		case x < max(o.ToolShare, 0):
			p.kind = turnProbe
			p.abandon = r.Float64() < o.AbandonShare
		case x < max(o.ToolShare, 0)+o.SandboxShare:
			p.kind = turnSandbox
		case x < max(o.ToolShare, 0)+o.SandboxShare+o.MCPShare:
			p.kind = turnMCP
		}
		d.plan = append(d.plan, p)
		total++
		if p.kind == turnProbe && !p.abandon {
			total++
		}
		if p.abandon {
			rep.PlannedAbandons++
		}
	}
	total += o.Sessions // each session's final message
	rep.PlannedCalls = total

	plan, points := planChaos(r, o.Kills, o.KillAt, o.Outages, total)
	k := &killer{st: st, prog: prog, aim: aim, plan: plan, points: points, maxJitter: o.MaxKillJitter, aimWithin: o.AimWithin, temporal: o.KillTemporal}
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
	rep.Chaos = k.done
	rep.Unexpected = st.unexpectedExits()
	if err := verify(ctx, st, a, drivers, sb, mc, rep); err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	rep.Wall = time.Since(t0)
	return rep, nil
}

// startSandbox starts the session's remote sandbox, retrying while the
// profile's image is still being provisioned; it returns the container id.
func startSandbox(ctx context.Context, s *sdk.Session, image string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		sb, err := s.StartRemoteSandbox(ctx, image)
		if err == nil {
			return sb.SandboxID, nil
		}
		t := time.NewTimer(200 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return "", fmt.Errorf("start remote sandbox: %w", err)
		case <-t.C:
		}
	}
}
