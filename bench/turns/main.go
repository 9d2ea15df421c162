// Command turns is the bae-go turn benchmark and load test (issues 3 and 6).
//
// One command measures everything: it starts an in-memory Temporal, a
// zero-latency fake LLM provider and baesrv in this process, on a fresh
// PostgreSQL database, then drives sessions over real HTTP exactly as an SDK
// would (open, registerDriver, session.sendMessage streams) and reports
// throughput, client-observed and server-added latency, PostgreSQL
// connections, memory and Temporal workflow counts. See bench/README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	_ "net/http/pprof" //nolint:gosec // served only with -pprof, on the address given
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/bae-go/bae-go/internal/app"
	"github.com/bae-go/bae-go/store"

	"github.com/bae-go/bae-go/bench/benchstack"
)

type options struct {
	// gcPercent is the garbage collector's target in force (GOGC or
	// baesrv's default).
	gcPercent       int
	sessions        int
	turns           int
	duration        time.Duration
	warmup          int
	rate            float64
	gzip            bool
	idle            int
	idleConcurrency int
	turnTimeout     time.Duration
	progress        time.Duration
	json            bool
	verbose         bool
	pprofAddr       string
	cpuProfile      string
	memProfile      string
	stallAfter      time.Duration
	logStatements   bool
	extraPollers    int
	mutexProfile    string
	timelineCSV     string
	dbURL           string
	floor           bool
	long            int
	temporalAddr    string
	temporalNS      string
	temporalPID     int
	temporalDBs     string
	replicas        int
	baesrvBin       string
	rounds          int
}

func parseFlags() options {
	var o options
	flag.IntVar(&o.sessions, "sessions", 50, "concurrent sessions, one driver goroutine each")
	flag.IntVar(&o.turns, "turns", 20, "measured turns per session (ignored with -duration)")
	flag.DurationVar(&o.duration, "duration", 0, "drive turns for this long instead of -turns (e.g. 5m)")
	flag.IntVar(&o.warmup, "warmup", 1, "unmeasured turns per session before the measured phase")
	flag.Float64Var(&o.rate, "rate", 0, "offered load in turns/s across all sessions, paced per session (0 = closed loop: each session sends its next turn as soon as the last one ends)")
	flag.BoolVar(&o.gzip, "grpc-gzip", false, "gzip Temporal gRPC calls (the SDK default; baesrv turns it off for a loopback frontend, as here), to measure its cost")
	flag.IntVar(&o.idle, "idle", 0, "idle sessions to open (and keep open) before the measured run")
	flag.IntVar(&o.idleConcurrency, "idle-concurrency", 16, "parallel opens while creating idle sessions")
	flag.DurationVar(&o.turnTimeout, "turn-timeout", time.Minute, "client-side timeout for one turn")
	flag.DurationVar(&o.progress, "progress", 30*time.Second, "interval of progress lines on stderr (0 disables)")
	flag.BoolVar(&o.json, "json", false, "print the report as JSON on stdout (the table goes to stderr)")
	flag.BoolVar(&o.verbose, "v", false, "show baesrv and Temporal warnings on stderr")
	flag.StringVar(&o.pprofAddr, "pprof", "", "serve net/http/pprof on this address (e.g. 127.0.0.1:6060)")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the measured phase to this file")
	flag.StringVar(&o.memProfile, "memprofile", "", "write a heap profile at the end of the run to this file")
	flag.DurationVar(&o.stallAfter, "stall", 10*time.Second, "when no turn finishes for this long, dump goroutines and PostgreSQL states (0 disables)")
	flag.BoolVar(&o.logStatements, "log-statements", false, "diagnostic: PostgreSQL logs every statement of the bench database (server log)")
	flag.IntVar(&o.extraPollers, "extra-pollers", 0, "diagnostic: start a second worker with this many workflow and activity pollers")
	flag.StringVar(&o.mutexProfile, "mutexprofile", "", "write a mutex contention profile of the whole run to this file")
	flag.StringVar(&o.timelineCSV, "timeline-csv", "", "write every timeline turn's phases (ms) to this CSV file")
	flag.StringVar(&o.dbURL, "db", benchstack.DefaultDatabaseURL(), "maintenance database the bench database is created from")
	flag.IntVar(&o.long, "long", 0, "long-session mode instead of the measured phase: build one session of this many events, then compare -turns turns on it with a fresh session's, and time its replay")
	flag.BoolVar(&o.floor, "floor", false, "also run the floor (the irreducible work of a text turn, no orchestration) with the same sessions, turns and rate, and print both side by side")
	flag.StringVar(&o.temporalAddr, "temporal", "", "an external Temporal frontend (host:port) instead of the embedded server (scripts/temporal-up.sh starts one)")
	flag.StringVar(&o.temporalNS, "temporal-namespace", "default", "namespace on the -temporal server")
	flag.IntVar(&o.temporalPID, "temporal-pid", 0, "the -temporal server's process id, to count its CPU (and split CPU per turn between it and baesrv)")
	flag.StringVar(&o.temporalDBs, "temporal-dbs", "", "comma-separated databases of the -temporal server, for their growth per idle session (-idle)")
	flag.IntVar(&o.replicas, "replicas", 0, "run baesrv as this many `-baesrv serve` processes on one database and task queue (sessions open on them in turn); 0 = in this process")
	flag.StringVar(&o.baesrvBin, "baesrv", "bin/baesrv", "baesrv binary for -replicas")
	flag.IntVar(&o.rounds, "rounds", 1, "with -floor: run bae-go, the floor and Temporal alone this many times each, interleaved (every other round in reverse order), and print the capacity ratio or own share of each round, their median and the figure of all rounds pooled")
	flag.Parse()
	return o
}

func main() {
	o := parseFlags()
	// The garbage collector runs as in baesrv (which this process hosts).
	o.gcPercent = app.TuneGC(os.LookupEnv)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if err := validate(o); err != nil {
		fmt.Fprintln(os.Stderr, "turns:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := run(ctx, log, o)
	if rep != nil {
		var table io.Writer = os.Stdout
		if o.json {
			table = os.Stderr
			if jerr := writeJSON(os.Stdout, rep); jerr != nil {
				log.Error("write json", "err", jerr)
			}
		}
		writeTable(table, rep)
	}
	if err != nil {
		log.Error("benchmark failed", "err", err)
		os.Exit(1)
	}
}

func validate(o options) error {
	switch {
	case o.sessions < 1:
		return errors.New("-sessions must be at least 1")
	case o.duration <= 0 && o.turns < 1:
		return errors.New("-turns must be at least 1 (or use -duration)")
	case o.rate < 0:
		return errors.New("-rate cannot be negative")
	case o.idle < 0 || o.warmup < 0:
		return errors.New("-idle and -warmup cannot be negative")
	case o.idleConcurrency < 1:
		return errors.New("-idle-concurrency must be at least 1")
	case o.replicas < 0:
		return errors.New("-replicas cannot be negative")
	case o.replicas > 0 && (o.extraPollers > 0 || o.long > 0):
		return errors.New("-extra-pollers and -long need baesrv in this process (no -replicas)")
	case o.rounds < 1:
		return errors.New("-rounds must be at least 1")
	case o.rounds > 1 && (!o.floor || o.long > 0):
		return errors.New("-rounds needs -floor (a round is bae-go, the floor and Temporal alone) and no -long")
	}
	return nil
}

// turnRec is one measured turn.
type turnRec struct {
	token      string
	sessionID  string
	n          int // index of the turn within its session
	start, end time.Time
	lat        time.Duration
	fake       fakeTime
	fakeOK     bool
	notifs     int
	bytes      int64
	err        error
}

func run(ctx context.Context, log *slog.Logger, o options) (*report, error) {
	rep := newReport(o)
	if o.mutexProfile != "" {
		runtime.SetMutexProfileFraction(5)
		defer func() {
			if err := writeProfile("mutex", o.mutexProfile); err != nil {
				log.Warn("mutex profile", "err", err)
			}
		}()
	}
	if o.pprofAddr != "" {
		go func() {
			log.Info("pprof serving", "addr", "http://"+o.pprofAddr+"/debug/pprof/")
			if err := http.ListenAndServe(o.pprofAddr, nil); err != nil { //nolint:gosec // local diagnostics only
				log.Warn("pprof server", "err", err)
			}
		}()
	}

	var srvLog io.Writer
	if o.verbose {
		srvLog = os.Stderr
	}
	t0 := time.Now()
	st, err := startStack(ctx, log, stackOptions{
		BaseDatabaseURL: o.dbURL, ServerLog: srvLog, Gzip: o.gzip, LogStatements: o.logStatements, ExtraPollers: o.extraPollers,
		TemporalAddr: o.temporalAddr, TemporalNamespace: o.temporalNS, TemporalPID: o.temporalPID, TemporalDBs: splitList(o.temporalDBs),
		Replicas: o.replicas, BaesrvBin: o.baesrvBin,
	})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	rep.Setup.StackStart = time.Since(t0).Seconds()
	log.Info("stack ready", "client", st.ClientURL, "admin", st.AdminURL, "database", st.dbName, "took", time.Since(t0).Round(time.Millisecond))

	a := newAPI(st.ClientURL, st.AdminURL, st.AdminKey, o.sessions+o.idleConcurrency)
	a.clientURLs = st.ClientURLs
	defer a.close()
	clientKey, err := a.setup(ctx)
	if err != nil {
		return rep, err
	}
	pg, err := newPGSampler(ctx, o.dbURL, st.DBURL)
	if err != nil {
		return rep, err
	}
	defer pg.close(context.Background())
	if o.stallAfter > 0 {
		a.watch = &stallWatch{after: o.stallAfter, dir: os.TempDir(), log: log, pg: pg, maxDumps: 3}
		wctx, stopWatch := context.WithCancel(ctx)
		defer stopWatch()
		go a.watch.run(wctx)
		defer func() { rep.Stalls = a.watch.reports() }()
	}
	if st.Parts != nil {
		rep.PG.PoolMax = st.Parts.Store.Pool.Config().MaxConns
	}
	rep.addMem(sampleMem("stack ready"))
	rep.ReplicaRSS = append(rep.ReplicaRSS, rssSample{"stack ready", st.replicaRSS()})

	if o.long > 0 {
		rep.Long = runLong(ctx, log, a, st, pg, clientKey, o)
		rep.LoadAvgEnd = loadAvg()
		return rep, ctx.Err()
	}

	// Open and register the driven sessions, then warm each one up: the
	// first turn of a session also pays one-time costs (workflow cache fill,
	// first history read) that are not steady-state latency.
	t1 := time.Now()
	sessions, err := openAll(ctx, a, clientKey, o.sessions, o.idleConcurrency)
	if err != nil {
		return rep, err
	}
	rep.Setup.OpenSessions = time.Since(t1).Seconds()
	t2 := time.Now()
	rep.Setup.WarmupErrors = warmUp(ctx, log, a, sessions, o)
	rep.Setup.Warmup = time.Since(t2).Seconds()
	if ctx.Err() != nil {
		return rep, ctx.Err()
	}

	if o.idle > 0 {
		// The same turns first with no idle session open, then turns while
		// the idle sessions open in a burst; the measured phase below runs
		// with all of them open.
		base, err := measure(ctx, log, a, st, pg, sessions, o, rep)
		if err != nil {
			return rep, err
		}
		dbs := append([]string{st.dbName}, splitList(o.temporalDBs)...)
		sizesBefore := pg.dbSizes(ctx, dbs)
		// baesrv's resident memory is measured from before any turn: after
		// the baseline turns it holds freed heap that the Go runtime returns
		// to the system only later, so growth from there can come out
		// negative. From the start it is an upper bound (the turns' own
		// churn is in it).
		rssBefore := rep.ReplicaRSS[0].Bytes
		rep.Idle = openIdleUnderLoad(ctx, log, a, clientKey, sessions, o)
		rep.Idle.Baseline = addedDist(base)
		rep.Idle.measureGrowth(pg.dbSizes(ctx, dbs), sizesBefore, st.dbName, st.replicaRSS()-rssBefore)
		rep.addMem(sampleMem(fmt.Sprintf("%d idle open", rep.Idle.Opened)))
		rep.ReplicaRSS = append(rep.ReplicaRSS, rssSample{fmt.Sprintf("%d idle open", rep.Idle.Opened), st.replicaRSS()})
		// Idle sessions have no workflow: it starts with a session's first
		// message.
		rep.Idle.Workflows = countWorkflows(ctx, st.Temporal, st.Namespace, st.TaskQueue)
		if ctx.Err() != nil {
			return rep, ctx.Err()
		}
	}

	// An interrupted run still reports the turns it finished.
	firstLoad := loadAvg()
	recs, runErr := measure(ctx, log, a, st, pg, sessions, o, rep)
	if runErr != nil && len(recs) == 0 {
		return rep, runErr
	}
	// Counted before the Temporal-alone phase adds workflows of its own.
	rep.Workflows = countWorkflows(ctx, st.Temporal, st.Namespace, st.TaskQueue)
	rep.ReplicaRSS = append(rep.ReplicaRSS, rssSample{"measure end", st.replicaRSS()})
	// Idle sessions have no workflow: it starts with a session's first
	// message.
	rep.Workflows.Expected = int64(o.sessions)
	if o.floor && ctx.Err() == nil {
		fl, err := runFloor(ctx, log, o, st)
		if err != nil {
			log.Warn("floor run failed", "err", err)
		}
		if fl != nil && ctx.Err() == nil {
			if fl.Temporal, err = runTemporalAlone(ctx, log, o, st, pg); err != nil {
				log.Warn("Temporal-alone run failed", "err", err)
			}
		}
		rep.Floor = fl
	}
	// With -rounds this run is the first round; the others follow the
	// timeline, which reads this round's turns from the database.
	var first *roundResult
	if o.rounds > 1 && rep.Floor != nil && rep.Floor.Temporal != nil && ctx.Err() == nil {
		r := newRound(0, firstLoad)
		r.Bae, r.Floor, r.Alone = baePhase(recs, rep), floorPhase(rep.Floor), alonePhase(rep.Floor.Temporal)
		r.sessions, r.alone = sessions, rep.Floor.Temporal.load
		r.end(ctx, o.rate > 0, pg, st.dbName)
		first = &r
	}
	rep.summarise(recs, st)
	if ss, err := pg.storage(context.WithoutCancel(ctx)); err != nil {
		log.Warn("storage stats unavailable", "err", err)
	} else {
		rep.Storage = ss
	}

	// Server timeline from the database (before it is dropped).
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if ph, n, err := timeline(tctx, st.DBURL, st.Temporal, recs, o.timelineCSV); err != nil {
		log.Warn("server timeline unavailable", "err", err)
	} else {
		rep.Timeline, rep.TimelineTurns = ph, n
	}
	if first != nil {
		rep.Rounds = runRounds(ctx, log, o, a, st, pg, clientKey, *first)
	}
	if o.memProfile != "" {
		if err := writeHeapProfile(o.memProfile); err != nil {
			log.Warn("heap profile", "err", err)
		}
	}
	rep.LoadAvgEnd = loadAvg()
	rep.evaluate()
	return rep, runErr
}

// measure runs bae-go's measured phase: one goroutine per session, each
// sending turns back to back (a session's turns are sequential, as with a
// real driver; sessions run concurrently).
func measure(ctx context.Context, log *slog.Logger, a *api, st *stack, pg *pgSampler, sessions []*session, o options, rep *report) ([]turnRec, error) {
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return nil, fmt.Errorf("create cpu profile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, fmt.Errorf("start cpu profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}

	sampleCtx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	go pg.run(sampleCtx, time.Second)

	var poolStart *pgxpool.Stat
	if st.Parts != nil {
		poolStart = st.Parts.Store.Pool.Stat()
	}
	rep.addMem(sampleMem("measure start"))
	log.Info("measuring", "sessions", len(sessions), "turns_per_session", o.turns, "duration", o.duration, "idle", o.idle)
	var calls func() store.DBCalls
	if st.Parts != nil {
		calls = st.Parts.Store.DBCalls
	}
	res, err := counted(ctx, pg, st.procs, calls, func(h *driveHooks) []turnRec {
		// Middle memory sample: halfway through the turns, or the duration.
		h.onHalf = func() { rep.addMem(sampleMem("measure middle")) }
		if o.progress > 0 {
			h.onStart = func(start time.Time, done, failed *atomic.Int64) {
				go progress(sampleCtx, log, o.progress, start, done, failed, pg)
			}
		}
		return drive(ctx, log, a, st.Fake, sessions, o, h)
	})
	stopSampling()
	pg.record(context.WithoutCancel(ctx)) // the pool as the run left it
	rep.PGWork = res.work
	rep.addMem(sampleMem("measure end"))
	rep.Turns.Elapsed = res.elapsed.Seconds()
	rep.CPU = res.cpu
	rep.PG = pg.stats()
	if st.Parts != nil { // baesrv's pool is in this process
		rep.Pool = poolDelta(poolStart, st.Parts.Store.Pool.Stat())
		rep.PG.PoolMax = st.Parts.Store.Pool.Config().MaxConns
	}
	if err != nil {
		return res.recs, err
	}
	if ctx.Err() != nil {
		return res.recs, fmt.Errorf("interrupted: %w", ctx.Err())
	}
	return res.recs, nil
}

// phaseResult is one measured phase: its turns, and what the system under
// test spent on them.
type phaseResult struct {
	recs    []turnRec
	elapsed time.Duration
	cpu     CPUStats
	work    PGWork
}

// counted runs fn between two readings of the CPU counters (this process,
// the observed database's backends, the machine) and of the observed
// database's pg_stat_database counters, and of the store's round trips
// when calls is set (the store runs in this process).
func counted(ctx context.Context, pg *pgSampler, procs func(context.Context, *pgSampler) map[string][]int, calls func() store.DBCalls, fn func(*driveHooks) []turnRec) (phaseResult, error) {
	var res phaseResult
	// A backend publishes its counters when it goes idle, but at most once
	// a second and otherwise only after PostgreSQL's 10 s idle interval:
	// wait that out on both sides so the phase gets exactly its own work.
	statsSettle(ctx)
	updStart, updErr := pg.updates(ctx)
	dbStart, dbErr := pg.counters(ctx)
	walErr := pg.walKeep(ctx)
	var walStart string
	if walErr == nil {
		defer pg.walRelease(context.WithoutCancel(ctx))
		walStart, walErr = pg.walMark(ctx)
	}
	cpuStart := markCPU(pg.backendPIDs(ctx), procs(ctx, pg))
	h := &driveHooks{}
	var callsStart, callsEnd store.DBCalls
	if calls != nil {
		callsStart = calls()
	}
	res.recs = fn(h)
	if calls != nil {
		callsEnd = calls()
	}
	var walEnd string
	if walErr == nil {
		walEnd, walErr = pg.walMark(context.WithoutCancel(ctx))
	}
	res.elapsed = h.elapsed
	// The processes are listed again at the end: a Temporal database
	// backend born during the phase counts from zero, as bae-go's do.
	endCtx := context.WithoutCancel(ctx)
	res.cpu = cpuBetween(cpuStart, markCPU(pg.backendPIDs(endCtx), procs(endCtx, pg)))
	statsSettle(ctx)
	dbEnd, err := pg.counters(context.WithoutCancel(ctx))
	if err == nil {
		err = dbErr
	}
	if err != nil {
		return res, err
	}
	updEnd, err := pg.updates(context.WithoutCancel(ctx))
	if updErr == nil {
		updErr = err
	}
	var wal walCount
	if walErr == nil {
		wal, walErr = pg.walBetween(context.WithoutCancel(ctx), walStart, walEnd)
	}
	done := 0
	for _, r := range res.recs {
		if r.err == nil {
			done++
		}
	}
	if n := float64(done); n > 0 {
		res.work = PGWork{
			XactsPerTurn: float64(dbEnd.Xacts-dbStart.Xacts) / n, InsertedPerTurn: float64(dbEnd.Inserted-dbStart.Inserted) / n,
			UpdatedPerTurn: float64(dbEnd.Updated-dbStart.Updated) / n, FetchedPerTurn: float64(dbEnd.Fetched-dbStart.Fetched) / n,
			RoundTripsPerTurn: float64(callsEnd.RoundTrips-callsStart.RoundTrips) / n, StatementsPerTurn: float64(callsEnd.Statements-callsStart.Statements) / n,
			CallsUncounted: calls == nil,
		}
		if walErr == nil {
			res.work.WALRecordsPerTurn, res.work.WALBytesPerTurn = float64(wal.Records)/n, float64(wal.Bytes)/n
			res.work.WALFPIBytesPerTurn = float64(wal.FPIBytes) / n
			res.work.WALByRelation = map[string]float64{}
			for rel, k := range wal.ByRelation {
				res.work.WALByRelation[rel] = float64(k) / n
			}
		} else {
			fmt.Fprintf(os.Stderr, "wal per turn not measured: %v\n", walErr)
		}
		if updErr == nil {
			res.work.Updates = map[string]HOTUpdates{}
			for t, e := range updEnd {
				s := updStart[t]
				res.work.Updates[t] = HOTUpdates{Updated: float64(e[0]-s[0]) / n, HOT: float64(e[1]-s[1]) / n}
			}
		} else {
			fmt.Fprintf(os.Stderr, "updates per turn not measured: %v\n", updErr)
		}
		res.cpu.perTurn(res.elapsed.Seconds(), done)
	}
	return res, nil
}

// statsSettle waits until every backend has published its statistics.
func statsSettle(ctx context.Context) {
	t := time.NewTimer(11 * time.Second)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// driveHooks lets a caller of drive observe the phase.
type driveHooks struct {
	onStart func(start time.Time, done, failed *atomic.Int64)
	onHalf  func()
	elapsed time.Duration // set by drive
}

// drive sends turns on every session, concurrently across sessions and
// sequentially within one, until each session sent o.turns (or o.duration
// passed), paced by o.rate. fake attributes provider time to turns.
func drive(ctx context.Context, log *slog.Logger, a *api, fake *timedFake, sessions []*session, o options, h *driveHooks) []turnRec {
	var done, failed atomic.Int64
	total := int64(o.turns * len(sessions))
	deadline := time.Time{}
	if o.duration > 0 {
		total = 0
	}
	start := time.Now()
	if o.duration > 0 {
		deadline = start.Add(o.duration)
	}
	halfCtx, stopHalf := context.WithCancel(ctx)
	defer stopHalf()
	if h.onHalf != nil {
		go func() {
			t := time.NewTicker(50 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-halfCtx.Done():
					return
				case <-t.C:
				}
				half := (total > 0 && done.Load()+failed.Load() >= total/2) || (!deadline.IsZero() && time.Since(start) >= o.duration/2)
				if half {
					h.onHalf()
					return
				}
			}
		}()
	}
	if h.onStart != nil {
		h.onStart(start, &done, &failed)
	}

	// With -rate each session owns evenly staggered slots interval apart.
	// A turn that overruns its slot delays the next one rather than
	// bunching the missed ones up, so an overloaded server degrades to the
	// closed loop and the achieved rate shows it.
	var interval time.Duration
	if o.rate > 0 {
		interval = time.Duration(float64(len(sessions)) / o.rate * float64(time.Second))
	}
	perSession := make([][]turnRec, len(sessions))
	var wg sync.WaitGroup
	for i, s := range sessions {
		wg.Go(func() {
			next := start.Add(interval * time.Duration(i) / time.Duration(len(sessions)))
			for n := 0; ctx.Err() == nil; n++ {
				if interval > 0 {
					if !deadline.IsZero() && next.After(deadline) {
						return
					}
					if !sleepUntil(ctx, next) {
						return
					}
					next = maxTime(next.Add(interval), time.Now())
				}
				if deadline.IsZero() && n >= o.turns || !deadline.IsZero() && time.Now().After(deadline) {
					return
				}
				tok := fmt.Sprintf("bench %d/%d", i, n)
				r := turnRec{token: tok, sessionID: s.ID, n: n, start: time.Now()}
				res, err := a.turn(ctx, s, tok, o.turnTimeout)
				r.end = time.Now()
				r.lat = r.end.Sub(r.start)
				r.err, r.notifs, r.bytes = err, res.Notifications, res.Bytes
				r.fake, r.fakeOK = fake.take(tok)
				if err != nil && ctx.Err() != nil {
					return // cut short by the interrupt: not a server error
				}
				if err != nil {
					failed.Add(1)
					log.Warn("turn failed", "session", s.ID, "turn", n, "err", err)
				} else {
					done.Add(1)
				}
				perSession[i] = append(perSession[i], r)
			}
		})
	}
	wg.Wait()
	h.elapsed = time.Since(start)
	var recs []turnRec
	for _, p := range perSession {
		recs = append(recs, p...)
	}
	return recs
}

func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return true
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func progress(ctx context.Context, log *slog.Logger, every time.Duration, start time.Time, done, failed *atomic.Int64, pg *pgSampler) {
	t := time.NewTicker(every)
	defer t.Stop()
	var prev int64
	prevAt := start
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			d := done.Load()
			m := sampleMem("")
			conns, _ := pg.last()
			log.Info("progress",
				"elapsed", now.Sub(start).Round(time.Second),
				"turns", d, "errors", failed.Load(),
				"turns_per_s", fmt.Sprintf("%.1f", float64(d-prev)/now.Sub(prevAt).Seconds()),
				"overall_per_s", fmt.Sprintf("%.1f", float64(d)/now.Sub(start).Seconds()),
				"heap_live", mib(m.HeapLive), "heap_alloc", mib(m.HeapAlloc), "goroutines", m.Goroutines,
				"pg_conns", conns.Total)
			prev, prevAt = d, now
		}
	}
}

// openAll opens n sessions with bounded parallelism.
func openAll(ctx context.Context, a *api, clientKey string, n, par int) ([]*session, error) {
	out := make([]*session, n)
	errs := make([]error, n)
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			out[i], errs[i] = a.open(ctx, clientKey)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("open sessions: %w", err)
	}
	return out, nil
}

// openIdleUnderLoad opens the idle sessions while the driven sessions keep
// sending turns at the run's rate (one a second each in a closed-loop
// run), so a burst of opens that delayed other sessions' turns would show
// in the turns' latency.
func openIdleUnderLoad(ctx context.Context, log *slog.Logger, a *api, clientKey string, sessions []*session, o options) *idleReport {
	done := make(chan struct{})
	var mu sync.Mutex
	var lats []time.Duration
	var failed int
	every := time.Second
	if o.rate > 0 {
		every = time.Duration(float64(len(sessions)) / o.rate * float64(time.Second))
	}
	var wg sync.WaitGroup
	for i, s := range sessions {
		wg.Go(func() {
			tick := time.NewTicker(every)
			defer tick.Stop()
			for n := 0; ; n++ {
				select {
				case <-done:
					return
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				t := time.Now()
				_, err := a.turn(ctx, s, fmt.Sprintf("burst %d/%d", i, n), o.turnTimeout)
				mu.Lock()
				if err != nil {
					failed++
				} else {
					lats = append(lats, time.Since(t))
				}
				mu.Unlock()
				if ctx.Err() != nil {
					return
				}
			}
		})
	}
	ir := openIdle(ctx, log, a, clientKey, o)
	close(done)
	wg.Wait()
	ir.DuringBurst, ir.DuringBurstErrors = benchstack.Summarise(lats), failed
	return ir
}

// addedDist is the server-added latency of the completed turns.
func addedDist(recs []turnRec) benchstack.Dist { return benchstack.Summarise(addedSamples(recs)) }

// addedSamples is each completed turn's server-added latency.
func addedSamples(recs []turnRec) []time.Duration {
	var added []time.Duration
	for _, rec := range recs {
		if rec.err == nil && rec.fakeOK {
			added = append(added, rec.lat-rec.fake.Total)
		}
	}
	return added
}

// warmUp sends o.warmup unmeasured turns on each session, sessions in
// parallel, and returns how many failed.
func warmUp(ctx context.Context, log *slog.Logger, a *api, sessions []*session, o options) int64 {
	var failed atomic.Int64
	var wg sync.WaitGroup
	for i, s := range sessions {
		wg.Go(func() {
			for w := range o.warmup {
				if _, err := a.turn(ctx, s, fmt.Sprintf("warmup %d/%d", i, w), o.turnTimeout); err != nil {
					failed.Add(1)
					log.Warn("warm-up turn failed", "session", s.ID, "err", err)
				}
			}
		})
	}
	wg.Wait()
	return failed.Load()
}

// openIdle opens the idle sessions, which stay open (drivers registered,
// no turn, so no workflow yet) through the measured run.
func openIdle(ctx context.Context, log *slog.Logger, a *api, clientKey string, o options) *idleReport {
	ir := &idleReport{Requested: o.idle, ErrorKinds: map[string]int{}}
	before := sampleMem("")
	lats := make([]time.Duration, o.idle)
	errs := make([]error, o.idle)
	sem := make(chan struct{}, o.idleConcurrency)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range o.idle {
		// An interrupt stops the loop at once, not after each queued open.
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			errs[i] = ctx.Err()
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			t := time.Now()
			_, errs[i] = a.open(ctx, clientKey)
			lats[i] = time.Since(t)
		})
	}
	wg.Wait()
	ir.Elapsed = time.Since(start).Seconds()
	var ok []time.Duration
	for i, err := range errs {
		if err != nil {
			ir.Errors++
			ir.ErrorKinds[errKind(err)]++
			if ir.FirstError == "" {
				ir.FirstError = err.Error()
			}
			continue
		}
		ok = append(ok, lats[i])
	}
	ir.Opened = len(ok)
	ir.OpenLatency = benchstack.Summarise(ok)
	if ir.Elapsed > 0 {
		ir.PerSecond = float64(ir.Opened) / ir.Elapsed
	}
	after := sampleMem("")
	ir.GoroutinesAdded = after.Goroutines - before.Goroutines
	ir.HeapLiveAdded = int64(after.HeapLive) - int64(before.HeapLive)
	log.Info("idle sessions open", "opened", ir.Opened, "errors", ir.Errors, "took", time.Duration(ir.Elapsed*float64(time.Second)).Round(time.Millisecond))
	return ir
}

// countWorkflows counts the run's workflows (those on its task queue).
func countWorkflows(ctx context.Context, tc client.Client, ns, taskQueue string) workflowCount {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	var wc workflowCount
	q := fmt.Sprintf("TaskQueue = '%s'", taskQueue)
	running, err := tc.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: ns, Query: q + " AND ExecutionStatus = 'Running'"})
	if err != nil {
		wc.Err = err.Error()
		return wc
	}
	all, err := tc.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: ns, Query: q})
	if err != nil {
		wc.Err = err.Error()
		return wc
	}
	wc.Running, wc.Total = running.GetCount(), all.GetCount()
	return wc
}

func writeProfile(name, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create %s profile: %w", name, err)
	}
	defer f.Close()
	if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
		return fmt.Errorf("write %s profile: %w", name, err)
	}
	return nil
}

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create heap profile: %w", err)
	}
	defer f.Close()
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		return fmt.Errorf("write heap profile: %w", err)
	}
	return nil
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
