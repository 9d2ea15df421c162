package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bae-go/bae-go/bench/benchstack"
)

type report struct {
	mu sync.Mutex

	Date         string `json:"date"`
	Command      string `json:"command"`
	GoVersion    string `json:"go_version"`
	NumCPU       int    `json:"num_cpu"`
	LoadAvgStart string `json:"loadavg_start"`
	LoadAvgEnd   string `json:"loadavg_end"`

	Config struct {
		Sessions        int     `json:"sessions"`
		TurnsPerSession int     `json:"turns_per_session,omitempty"`
		DurationS       float64 `json:"duration_s,omitempty"`
		Warmup          int     `json:"warmup_turns_per_session"`
		Idle            int     `json:"idle_sessions"`
		Rate            float64 `json:"offered_turns_per_s,omitempty"`
		GRPCGzip        bool    `json:"grpc_gzip"`
		GCPercent       int     `json:"gc_percent"`
		ExtraPollers    int     `json:"extra_worker_pollers,omitempty"`
		Rounds          int     `json:"rounds,omitempty"`
	} `json:"config"`

	Setup struct {
		StackStart   float64 `json:"stack_start_s"`
		OpenSessions float64 `json:"open_sessions_s"`
		Warmup       float64 `json:"warmup_s"`
		WarmupErrors int64   `json:"warmup_errors"`
	} `json:"setup"`

	Idle *idleReport `json:"idle,omitempty"`

	Turns struct {
		Completed  int            `json:"completed"`
		Errors     int            `json:"errors"`
		ErrorKinds map[string]int `json:"error_kinds,omitempty"`
		FirstError string         `json:"first_error,omitempty"`
		Elapsed    float64        `json:"elapsed_s"`
		PerSecond  float64        `json:"turns_per_s"`
		// SendRate is turns started per second between the first and the
		// last start: the achieved offered load of a paced run (PerSecond
		// also counts the stagger before the first and the tail after the
		// last turn).
		SendRate       float64         `json:"send_rate_per_s"`
		Client         benchstack.Dist `json:"client_latency"`
		ServerAdded    benchstack.Dist `json:"server_added_latency"`
		Fake           benchstack.Dist `json:"fake_provider_time"`
		Unattributed   int             `json:"turns_without_fake_time"`
		ProviderReqs   int64           `json:"provider_requests"`
		ProviderConns  int64           `json:"provider_connections"`
		FakeServedS    float64         `json:"fake_served_total_s"`
		NotifsPerTurn  float64         `json:"notifications_per_turn"`
		BytesPerTurn   float64         `json:"response_bytes_per_turn"`
		BytesLastTurns float64         `json:"response_bytes_per_turn_last_decile"`
		// Server-added latency of each session's earliest and latest turns:
		// every turn re-reads and re-sends the whole history, so cost grows
		// with session length.
		AddedEarly benchstack.Dist `json:"server_added_first_decile_of_session"`
		AddedLate  benchstack.Dist `json:"server_added_last_decile_of_session"`
	} `json:"turns"`

	Timeline      []phase `json:"server_timeline,omitempty"`
	TimelineTurns int     `json:"server_timeline_turns"`

	PG        PGStats       `json:"postgres"`
	Storage   StorageStats  `json:"storage"`
	PGWork    PGWork        `json:"postgres_work"`
	Pool      poolStats     `json:"pool"`
	CPU       CPUStats      `json:"cpu"`
	Memory    []memSample   `json:"memory"`
	Workflows workflowCount `json:"temporal_workflows"`
	Stalls    []stallReport `json:"stalls,omitempty"`
	// Floor is the same load on the floor program, after bae-go's phase.
	Floor *floorReport `json:"floor,omitempty"`
	// ReplicaRSS is the baesrv processes' resident memory (-replicas).
	ReplicaRSS []rssSample `json:"baesrv_rss,omitempty"`
	Long       *longReport `json:"long_session,omitempty"`
	Targets    []target    `json:"targets"`
	// Rounds (-rounds) are every round's figures; the rest of the report
	// is the first round's.
	Rounds *roundsReport `json:"rounds,omitempty"`
}

type idleReport struct {
	Requested       int             `json:"requested"`
	Opened          int             `json:"opened"`
	Errors          int             `json:"errors"`
	ErrorKinds      map[string]int  `json:"error_kinds,omitempty"`
	FirstError      string          `json:"first_error,omitempty"`
	Elapsed         float64         `json:"elapsed_s"`
	PerSecond       float64         `json:"opens_per_s"`
	OpenLatency     benchstack.Dist `json:"open_latency"`
	GoroutinesAdded int             `json:"goroutines_added"`
	HeapLiveAdded   int64           `json:"heap_live_added_bytes"`
	Workflows       workflowCount   `json:"temporal_workflows"`
	// Growth while the idle sessions opened: baesrv's resident memory
	// (-replicas: its processes, summed; from stack ready, so an upper
	// bound), bae-go's database and the
	// external Temporal server's databases (-temporal-dbs), in bytes.
	ReplicaRSSAdded int64            `json:"baesrv_rss_added_bytes,omitempty"`
	BaeDBAdded      int64            `json:"bae_database_added_bytes"`
	TemporalDBAdded map[string]int64 `json:"temporal_databases_added_bytes,omitempty"`
	// Baseline is the server-added latency of the same turns before any
	// idle session was open; DuringBurst the client latency of turns sent
	// while the idle sessions opened.
	Baseline          benchstack.Dist `json:"baseline_server_added"`
	DuringBurst       benchstack.Dist `json:"during_burst_client"`
	DuringBurstErrors int             `json:"during_burst_errors"`
}

type workflowCount struct {
	Running  int64  `json:"running"`
	Total    int64  `json:"total"`
	Expected int64  `json:"expected_running,omitempty"`
	Err      string `json:"error,omitempty"`
}

// poolStats is baesrv's pgxpool over the measured phase: how often a query
// had to wait for a free connection, and for how long on average.
type poolStats struct {
	Acquires      int64   `json:"acquires"`
	EmptyAcquires int64   `json:"waited_acquires"`
	MeanWaitMs    float64 `json:"mean_acquire_ms"`
	MaxConns      int32   `json:"max_conns"`
	TotalConns    int32   `json:"total_conns_end"`
}

func poolDelta(a, b *pgxpool.Stat) poolStats {
	p := poolStats{
		Acquires: b.AcquireCount() - a.AcquireCount(), EmptyAcquires: b.EmptyAcquireCount() - a.EmptyAcquireCount(),
		MaxConns: b.MaxConns(), TotalConns: b.TotalConns(),
	}
	if p.Acquires > 0 {
		p.MeanWaitMs = benchstack.Ms((b.AcquireDuration() - a.AcquireDuration()) / time.Duration(p.Acquires))
	}
	return p
}

type target struct {
	Name     string `json:"name"`
	Goal     string `json:"goal"`
	Measured string `json:"measured"`
	Verdict  string `json:"verdict"` // PASS, MISS or "n/a"
}

func newReport(o options) *report {
	r := &report{
		Date: time.Now().UTC().Format(time.RFC3339), Command: strings.Join(os.Args, " "),
		GoVersion: runtime.Version(), NumCPU: runtime.NumCPU(), LoadAvgStart: loadAvg(),
	}
	r.Config.Sessions, r.Config.Warmup, r.Config.Idle = o.sessions, o.warmup, o.idle
	r.Config.Rate, r.Config.GRPCGzip, r.Config.ExtraPollers = o.rate, o.gzip, o.extraPollers
	r.Config.GCPercent = o.gcPercent
	if o.rounds > 1 {
		r.Config.Rounds = o.rounds
	}
	if o.duration > 0 {
		r.Config.DurationS = o.duration.Seconds()
	} else {
		r.Config.TurnsPerSession = o.turns
	}
	return r
}

func (r *report) addMem(m memSample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Memory = append(r.Memory, m)
}

func (r *report) summarise(recs []turnRec, st *stack) {
	t := &r.Turns
	t.ErrorKinds = map[string]int{}
	var client, added, fake []time.Duration
	var notifs, bytes int64
	for _, rec := range recs {
		if rec.err != nil {
			t.Errors++
			t.ErrorKinds[errKind(rec.err)]++
			if t.FirstError == "" {
				t.FirstError = rec.err.Error()
			}
			continue
		}
		t.Completed++
		client = append(client, rec.lat)
		notifs += int64(rec.notifs)
		bytes += rec.bytes
		if !rec.fakeOK {
			t.Unattributed++
			continue
		}
		fake = append(fake, rec.fake.Total)
		added = append(added, rec.lat-rec.fake.Total)
	}
	if t.Elapsed > 0 {
		t.PerSecond = float64(t.Completed) / t.Elapsed
	}
	t.Client, t.ServerAdded, t.Fake = benchstack.Summarise(client), benchstack.Summarise(added), benchstack.Summarise(fake)
	if t.Completed > 0 {
		t.NotifsPerTurn = float64(notifs) / float64(t.Completed)
		t.BytesPerTurn = float64(bytes) / float64(t.Completed)
	}
	// Responses grow with the session's history (provider.request carries
	// it); the last decile of turns by start time shows where that is going.
	maxN := 0
	for _, rec := range recs {
		maxN = max(maxN, rec.n)
	}
	var early, late []time.Duration
	for _, rec := range recs {
		if rec.err != nil || !rec.fakeOK || maxN < 9 {
			continue
		}
		switch {
		case rec.n*10 < maxN+1:
			early = append(early, rec.lat-rec.fake.Total)
		case rec.n*10 >= maxN*9:
			late = append(late, rec.lat-rec.fake.Total)
		}
	}
	t.AddedEarly, t.AddedLate = benchstack.Summarise(early), benchstack.Summarise(late)
	ok := slices.DeleteFunc(slices.Clone(recs), func(x turnRec) bool { return x.err != nil })
	slices.SortFunc(ok, func(a, b turnRec) int { return a.start.Compare(b.start) })
	if n := len(ok); n > 1 {
		if span := ok[n-1].start.Sub(ok[0].start).Seconds(); span > 0 {
			t.SendRate = float64(n-1) / span
		}
	}
	if tail := ok[len(ok)*9/10:]; len(ok) > 0 && len(tail) > 0 {
		var b int64
		for _, x := range tail {
			b += x.bytes
		}
		t.BytesLastTurns = float64(b) / float64(len(tail))
	}
	r.CPU.perTurn(t.Elapsed, t.Completed)
	t.ProviderReqs = st.Fake.Requests()
	t.ProviderConns = st.Fake.Conns()
	t.FakeServedS = st.Fake.Served().Seconds()
}

// evaluate marks the issue-3/issue-6 targets. Informational only: the
// machine is shared, so a MISS is a prompt to profile, not a failure.
func (r *report) evaluate() {
	slices.SortFunc(r.Memory, func(a, b memSample) int { return int((a.At - b.At) * 1e6) })
	add := func(name, goal, measured string, ok bool, applicable bool) {
		v := "MISS"
		switch {
		case !applicable:
			v = "n/a"
		case ok:
			v = "PASS"
		}
		r.Targets = append(r.Targets, target{name, goal, measured, v})
	}
	t := r.Turns
	measured := t.Completed > 0
	add("server-added p50", "<= 25 ms", fmt.Sprintf("%.1f ms", t.ServerAdded.P50), t.ServerAdded.P50 <= 25, measured)
	add("server-added p99", "<= 100 ms", fmt.Sprintf("%.1f ms", t.ServerAdded.P99), t.ServerAdded.P99 <= 100, measured)
	add("throughput", ">= 40 turns/s at 50 sessions", fmt.Sprintf("%.1f turns/s at %d sessions", t.PerSecond, r.Config.Sessions),
		t.PerSecond >= 40, measured && r.Config.Sessions >= 50 && r.Config.Rate == 0)
	if r.Idle != nil {
		add("idle sessions", ">= 1000 open, no errors", fmt.Sprintf("%d open, %d errors", r.Idle.Opened, r.Idle.Errors),
			r.Idle.Opened >= 1000 && r.Idle.Errors == 0, r.Idle.Requested >= 1000)
		b := r.Idle.Baseline
		add("idle: p99", "<= 1.5x the run's with 0 idle", fmt.Sprintf("%.2fx (%.1f vs %.1f ms)", ratio(t.ServerAdded.P99, b.P99), t.ServerAdded.P99, b.P99),
			ratio(t.ServerAdded.P99, b.P99) <= 1.5, measured && b.N > 0)
		d := r.Idle.DuringBurst
		add("idle: opens stall nothing", "no turn over 1 s while they open", fmt.Sprintf("max %.0f ms over %d turns, %d errors", d.Max, d.N, r.Idle.DuringBurstErrors),
			d.Max < 1000 && r.Idle.DuringBurstErrors == 0, d.N > 0)
	} else {
		add("idle sessions", ">= 1000 open, no errors", "not run (-idle 1000)", false, false)
	}
	if f := r.Floor; f != nil && f.Completed > 0 && measured {
		paced := r.Config.Rate > 0
		add("vs floor: p50", "<= 3x the floor's (paced)", fmt.Sprintf("%.1fx (%.1f vs %.1f ms)", ratio(t.ServerAdded.P50, f.ServerAdded.P50), t.ServerAdded.P50, f.ServerAdded.P50),
			ratio(t.ServerAdded.P50, f.ServerAdded.P50) <= 3, paced)
		add("vs floor: p99", "<= 4x the floor's (paced)", fmt.Sprintf("%.1fx (%.1f vs %.1f ms)", ratio(t.ServerAdded.P99, f.ServerAdded.P99), t.ServerAdded.P99, f.ServerAdded.P99),
			ratio(t.ServerAdded.P99, f.ServerAdded.P99) <= 4, paced)
		add("vs floor: capacity", ">= 1/3 of the floor's (closed loop)", fmt.Sprintf("%.2fx (%.0f vs %.0f turns/s)", ratio(t.PerSecond, f.PerSecond), t.PerSecond, f.PerSecond),
			ratio(t.PerSecond, f.PerSecond) >= 1.0/3, !paced)
		if tf := f.Temporal; tf != nil && tf.Completed > 0 {
			add("vs Temporal alone: capacity", ">= 0.5x Temporal alone's (closed loop)", fmt.Sprintf("%.2fx (%.0f turns/s vs %.0f updates/s)", ratio(t.PerSecond, tf.PerSecond), t.PerSecond, tf.PerSecond),
				ratio(t.PerSecond, tf.PerSecond) >= 0.5, !paced)
		}
	}
	if r.PGWork.XactsPerTurn > 0 {
		add("transactions", "<= 6 per text turn", fmt.Sprintf("%.1f", r.PGWork.XactsPerTurn), r.PGWork.XactsPerTurn <= 6, true)
	}
	add("no errors", "0 failed turns", fmt.Sprintf("%d failed of %d", t.Errors, t.Errors+t.Completed), t.Errors == 0 && r.Setup.WarmupErrors == 0, measured)
	if start, mid, end, ok := r.memPhases(); ok {
		// Stable = the live heap and goroutine count do not keep climbing
		// through the run: the second half grows no more than the first
		// (plus slack for GC timing) and goroutines return to their level.
		g1 := float64(mid.HeapLive) - float64(start.HeapLive)
		g2 := float64(end.HeapLive) - float64(mid.HeapLive)
		stable := g2 <= max(g1, 0)*1.5+16<<20 && end.Goroutines <= start.Goroutines+r.Config.Sessions
		add("memory stable", "live heap/goroutines not climbing", fmt.Sprintf("heap live %s -> %s -> %s, goroutines %d -> %d -> %d",
			mib(start.HeapLive), mib(mid.HeapLive), mib(end.HeapLive), start.Goroutines, mid.Goroutines, end.Goroutines), stable, true)
	}
}

func (r *report) memPhases() (start, mid, end memSample, ok bool) {
	found := 0
	for _, m := range r.Memory {
		switch m.Label {
		case "measure start":
			start, found = m, found|1
		case "measure middle":
			mid, found = m, found|2
		case "measure end":
			end, found = m, found|4
		}
	}
	return start, mid, end, found == 7
}

func writeJSON(w io.Writer, r *report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	return nil
}

func writeTable(w io.Writer, r *report) {
	if r.Long != nil {
		writeLong(w, r)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(cols ...string) { fmt.Fprintln(tw, strings.Join(cols, "\t")) }
	fd := func(d benchstack.Dist) string {
		return fmt.Sprintf("p50 %.1f  p90 %.1f  p99 %.1f  max %.1f  (mean %.1f, n=%d)", d.P50, d.P90, d.P99, d.Max, d.Mean, d.N)
	}
	c := r.Config
	mode := fmt.Sprintf("%d turns/session", c.TurnsPerSession)
	if c.DurationS > 0 {
		mode = fmt.Sprintf("%s", time.Duration(c.DurationS*float64(time.Second)))
	}
	fmt.Fprintf(w, "\nbae-go turn benchmark  %s  %s  %d CPU  load %s -> %s", r.Date, r.GoVersion, r.NumCPU, r.LoadAvgStart, r.LoadAvgEnd)
	if c.Rounds > 1 {
		fmt.Fprintf(w, "  (round 1 of %d below; every round at the end)", c.Rounds)
	}
	fmt.Fprintln(w)
	load := "closed loop"
	if c.Rate > 0 {
		load = fmt.Sprintf("paced at %.0f turns/s offered", c.Rate)
	}
	fmt.Fprintf(w, "%d sessions x %s, %s, warm-up %d/session, %d idle sessions, grpc gzip %v, gogc %d", c.Sessions, mode, load, c.Warmup, c.Idle, c.GRPCGzip, c.GCPercent)
	if c.ExtraPollers > 0 {
		fmt.Fprintf(w, ", extra worker with %d pollers", c.ExtraPollers)
	}
	fmt.Fprint(w, "\n\n")

	row("setup", fmt.Sprintf("stack %.1fs, open+register %d sessions %.1fs, warm-up %.1fs (%d errors)",
		r.Setup.StackStart, c.Sessions, r.Setup.OpenSessions, r.Setup.Warmup, r.Setup.WarmupErrors))
	if ir := r.Idle; ir != nil {
		row("idle sessions", fmt.Sprintf("%d/%d opened, %d errors in %.1fs (%.0f/s); +%d goroutines, %+.1f MiB live heap",
			ir.Opened, ir.Requested, ir.Errors, ir.Elapsed, ir.PerSecond, ir.GoroutinesAdded, float64(ir.HeapLiveAdded)/(1<<20)))
		row("  open latency ms", fd(ir.OpenLatency))
		if wf := ir.Workflows; wf.Err == "" {
			row("  temporal workflows", fmt.Sprintf("%d running after the idle opens", wf.Running))
		}
		per := func(b int64) string {
			return fmt.Sprintf("%+.1f MiB (%.0f bytes per idle session)", float64(b)/(1<<20), float64(b)/float64(max(ir.Opened, 1)))
		}
		growth := "bae-go database " + per(ir.BaeDBAdded)
		for _, db := range slices.Sorted(maps.Keys(ir.TemporalDBAdded)) {
			growth += "; " + db + " " + per(ir.TemporalDBAdded[db])
		}
		row("  growth", growth)
		if ir.ReplicaRSSAdded != 0 {
			row("  baesrv rss", per(ir.ReplicaRSSAdded)+" since stack ready, at most")
		}
		row("  turns during opens", fmt.Sprintf("%s, %d errors", fd(ir.DuringBurst), ir.DuringBurstErrors))
		row("  before (0 idle)", "server-added "+fd(ir.Baseline))
		if ir.Baseline.P99 > 0 {
			row("  with idle / before", fmt.Sprintf("p50 %.2fx, p99 %.2fx", r.Turns.ServerAdded.P50/ir.Baseline.P50, r.Turns.ServerAdded.P99/ir.Baseline.P99))
		}
		if ir.FirstError != "" {
			row("  first error", ir.FirstError)
		}
	}
	t := r.Turns
	row("turns completed", fmt.Sprintf("%d in %.1fs", t.Completed, t.Elapsed))
	row("errors", fmt.Sprintf("%d %v", t.Errors, t.ErrorKinds))
	if t.FirstError != "" {
		row("  first error", t.FirstError)
	}
	if c.Rate > 0 {
		row("throughput", fmt.Sprintf("%.1f turns/s (sent at %.1f/s of %.0f/s offered)", t.PerSecond, t.SendRate, c.Rate))
	} else {
		row("throughput", fmt.Sprintf("%.1f turns/s", t.PerSecond))
	}
	row("client latency ms", fd(t.Client))
	row("server-added ms", fd(t.ServerAdded))
	row("fake provider ms", fd(t.Fake))
	row("fake requests", fmt.Sprintf("%d on %d connections (%.2fs total handler time, %d turns unattributed)", t.ProviderReqs, t.ProviderConns, t.FakeServedS, t.Unattributed))
	if t.AddedEarly.N > 0 && t.AddedLate.N > 0 {
		row("  by session age", fmt.Sprintf("first decile of turns p50 %.1f p99 %.1f; last decile p50 %.1f p99 %.1f",
			t.AddedEarly.P50, t.AddedEarly.P99, t.AddedLate.P50, t.AddedLate.P99))
	}
	row("stream per turn", fmt.Sprintf("%.1f notifications, %.1f KiB (last decile %.1f KiB)", t.NotifsPerTurn, t.BytesPerTurn/1024, t.BytesLastTurns/1024))
	if len(r.Timeline) > 0 {
		row("server timeline ms", fmt.Sprintf("(%d turns; bench, PostgreSQL, fake and Temporal history stamps)", r.TimelineTurns))
		for _, p := range r.Timeline {
			row("  "+p.Name, fmt.Sprintf("p50 %6.1f  p99 %6.1f  mean %6.1f   %s", p.Dist.P50, p.Dist.P99, p.Dist.Mean, p.What))
		}
	}
	row("postgres conns", fmt.Sprintf("max %d, mean %.1f, last %d (active max %d, mean %.1f; idle-in-tx max %d); pool max %d; %d samples",
		r.PG.MaxTotal, r.PG.MeanTotal, r.PG.Last, r.PG.MaxActive, r.PG.MeanActv, r.PG.MaxIdleTx, r.PG.PoolMax, r.PG.Samples))
	if ss := r.Storage; ss.Events > 0 {
		turns := int64(t.Completed) + int64(r.Config.Sessions*r.Config.Warmup)
		row("postgres storage", fmt.Sprintf("database %s; session_events %d rows, %s on disk, %s of payload (%.1f KiB per turn)",
			mib(uint64(ss.DatabaseBytes)), ss.Events, mib(uint64(ss.EventsBytes)), mib(uint64(ss.EventBodies)), float64(ss.EventBodies)/1024/float64(max(turns, 1))))
	}
	row("pool acquires", fmt.Sprintf("%d (%.1f per turn), %d waited (%.1f%%), mean acquire %.3f ms", r.Pool.Acquires,
		float64(r.Pool.Acquires)/float64(max(t.Completed, 1)), r.Pool.EmptyAcquires, pct(r.Pool.EmptyAcquires, r.Pool.Acquires), r.Pool.MeanWaitMs))
	if w := r.PGWork; w.XactsPerTurn > 0 {
		calls := fmt.Sprintf("%.1f round trips, %.1f statements", w.RoundTripsPerTurn, w.StatementsPerTurn)
		if w.CallsUncounted {
			calls = "round trips and statements not counted (in the replicas)"
		}
		row("postgres per turn", fmt.Sprintf("%.1f transactions, %s, %.1f rows inserted, %.1f updated, %.1f fetched",
			w.XactsPerTurn, calls, w.InsertedPerTurn, w.UpdatedPerTurn, w.FetchedPerTurn))
		if w.WALRecordsPerTurn > 0 {
			row("postgres wal per turn", fmt.Sprintf("%.1f records, %.0f bytes (%.0f of them full-page images); this database's records only (pg_walinspect)",
				w.WALRecordsPerTurn, w.WALBytesPerTurn, w.WALFPIBytesPerTurn))
			row("  by relation", walByRelation(w.WALByRelation))
		}
		if len(w.Updates) > 0 {
			row("postgres updates per turn", hotUpdates(w.Updates))
		}
	}
	if r.CPU.Available {
		row("cpu (cores)", fmt.Sprintf("machine %.2f of %d busy: bench process %.2f, postgres backends %.2f,%s other %.2f",
			r.CPU.MachineBusy, r.CPU.Cores, r.CPU.BenchProcess, r.CPU.PGBackends, procsCores(r.CPU), r.CPU.Other))
	}
	if t.Completed > 0 {
		row("cpu per turn", fmt.Sprintf("%.1f ms in the bench process + %.1f ms in postgres backends%s", r.CPU.BenchMsPerTurn, r.CPU.PGMsPerTurn, procsPerTurn(r.CPU)))
	}
	for _, m := range r.ReplicaRSS {
		if m.Bytes > 0 {
			row("baesrv rss "+m.Label, mib(uint64(m.Bytes)))
		}
	}
	for _, m := range r.Memory {
		row("memory "+m.Label, fmt.Sprintf("goroutines %d, heap live %s, heap alloc %s, heap sys %s, sys %s, gc %d",
			m.Goroutines, mib(m.HeapLive), mib(m.HeapAlloc), mib(m.HeapSys), mib(m.Sys), m.NumGC))
	}
	wf := r.Workflows
	if wf.Err != "" {
		row("temporal workflows", "count failed: "+wf.Err)
	} else {
		row("temporal workflows", fmt.Sprintf("%d running (expected %d), %d total", wf.Running, wf.Expected, wf.Total))
	}
	for _, s := range r.Stalls {
		row("STALL", fmt.Sprintf("at %.0fs for %.0fs, %d turns in flight; waiting %v; postgres %s; dump %s",
			s.At, s.DurationS, s.Inflight, s.WaitingStacks, s.PGStates, s.DumpFile))
	}
	tw.Flush()
	if f := r.Floor; f != nil {
		writeFloor(w, r, f)
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "target\tgoal\tmeasured\tverdict")
	for _, x := range r.Targets {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", x.Name, x.Goal, x.Measured, x.Verdict)
	}
	tw.Flush()
	if r.Rounds != nil {
		writeRounds(w, r.Rounds, c.Rate > 0)
	}
}

func pct(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// writeFloor prints bae-go next to the floor, measured in the same run
// with the same load, and the ratio of the two.
func writeFloor(w io.Writer, r *report, f *floorReport) {
	t := r.Turns
	fmt.Fprintf(w, "\nfloor (same load, database %s, after bae-go's phase): %d turns in %.1fs, %d errors", f.Database, f.Completed, f.Elapsed, f.Errors)
	if f.FirstError != "" {
		fmt.Fprintf(w, " (first: %s)", f.FirstError)
	}
	fmt.Fprint(w, "\n\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "figure\tfloor\tbae-go\tbae-go / floor")
	row := func(name, unit string, fl, bg float64) {
		fmt.Fprintf(tw, "%s\t%.1f %s\t%.1f %s\t%.2fx\n", name, fl, unit, bg, unit, ratio(bg, fl))
	}
	row("server-added p50", "ms", f.ServerAdded.P50, t.ServerAdded.P50)
	row("server-added p90", "ms", f.ServerAdded.P90, t.ServerAdded.P90)
	row("server-added p99", "ms", f.ServerAdded.P99, t.ServerAdded.P99)
	row("client latency p50", "ms", f.Client.P50, t.Client.P50)
	row("throughput", "turns/s", f.PerSecond, t.PerSecond)
	row("transactions per turn", "", f.PGWork.XactsPerTurn, r.PGWork.XactsPerTurn)
	if r.PGWork.CallsUncounted {
		fmt.Fprintf(tw, "round trips per turn\t%.1f\tnot counted (in the replicas)\t\n", f.PGWork.RoundTripsPerTurn)
		fmt.Fprintf(tw, "statements per turn\t%.1f\tnot counted\t\n", f.PGWork.StatementsPerTurn)
	} else {
		row("round trips per turn", "", f.PGWork.RoundTripsPerTurn, r.PGWork.RoundTripsPerTurn)
		row("statements per turn", "", f.PGWork.StatementsPerTurn, r.PGWork.StatementsPerTurn)
	}
	row("rows fetched per turn", "", f.PGWork.FetchedPerTurn, r.PGWork.FetchedPerTurn)
	row("rows inserted per turn", "", f.PGWork.InsertedPerTurn, r.PGWork.InsertedPerTurn)
	if r.PGWork.WALRecordsPerTurn > 0 {
		row("wal records per turn", "", f.PGWork.WALRecordsPerTurn, r.PGWork.WALRecordsPerTurn)
		row("wal bytes per turn", "", f.PGWork.WALBytesPerTurn, r.PGWork.WALBytesPerTurn)
	}
	row("cpu per turn, process", "ms", f.CPU.BenchMsPerTurn, r.CPU.BenchMsPerTurn)
	row("cpu per turn, postgres", "ms", f.CPU.PGMsPerTurn, r.CPU.PGMsPerTurn)
	for _, role := range slices.Sorted(maps.Keys(r.CPU.ProcsMsPerTurn)) {
		// The floor runs in this process; these serve only bae-go.
		row("cpu per turn, "+role, "ms", f.CPU.ProcsMsPerTurn[role], r.CPU.ProcsMsPerTurn[role])
	}
	fmt.Fprintf(tw, "cpu other (cores)\t%.2f\t%.2f\t\n", f.CPU.Other, r.CPU.Other)
	tw.Flush()
	if tf := f.Temporal; tf != nil && tf.Completed > 0 {
		writeTemporalAlone(w, r, f, tf)
	}
}

// writeTemporalAlone prints the Temporal round trip alone next to the floor
// and bae-go: the floor plus it is the least a turn that is an Update can
// take on this machine at this load. In a closed loop it also prints
// capacity against both and where each one's CPU per turn went, by process
// (on the production topology: baesrv replicas, the Temporal server and the
// PostgreSQL backends of each database).
func writeTemporalAlone(w io.Writer, r *report, f *floorReport, tf *temporalAlone) {
	added := r.Turns.ServerAdded
	fmt.Fprintf(w, "\nTemporal alone (same load, update-with-start + one local activity that does nothing, after the floor's phase): %d updates", tf.Completed)
	if tf.Err != "" {
		fmt.Fprintf(w, " (error: %s)", tf.Err)
	}
	fmt.Fprint(w, "\n\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "figure\tTemporal alone\tfloor + Temporal alone\t/ floor\tbae-go\tbae-go - floor - Temporal alone")
	row := func(name string, tv, fv, bg float64) {
		fmt.Fprintf(tw, "%s\t%.1f ms\t%.1f ms\t%.2fx\t%.1f ms\t%.1f ms\n", name, tv, fv+tv, ratio(fv+tv, fv), bg, bg-fv-tv)
	}
	row("p50", tf.Latency.P50, f.ServerAdded.P50, added.P50)
	row("p90", tf.Latency.P90, f.ServerAdded.P90, added.P90)
	row("p99", tf.Latency.P99, f.ServerAdded.P99, added.P99)
	tw.Flush()
	fmt.Fprintf(w, "throughput %.1f updates/s (%.2fx the floor's), process cpu %.1f ms per update%s (the floor's turn: %.1f + %.1f in postgres)\n",
		tf.PerSecond, ratio(tf.PerSecond, f.PerSecond), tf.CPU.BenchMsPerTurn, procsPerTurn(tf.CPU), f.CPU.BenchMsPerTurn, f.CPU.PGMsPerTurn)
	writeAloneTimeline(w, r.Timeline, tf)
	if r.Config.Rate > 0 {
		return
	}
	fmt.Fprintf(w, "\ncapacity (closed loop, same run): bae-go %.1f turns/s = %.2fx Temporal alone (%.1f updates/s), %.2fx the floor (%.1f turns/s)\n\n",
		r.Turns.PerSecond, ratio(r.Turns.PerSecond, tf.PerSecond), tf.PerSecond, ratio(r.Turns.PerSecond, f.PerSecond), f.PerSecond)
	writeCPUSplit(w, f.CPU, tf.CPU, r.CPU)
}

// writeCPUSplit prints CPU per turn by process for the floor, Temporal
// alone and bae-go, and bae-go's excess over Temporal alone. "bench
// process" is the load generator and fake provider, plus whatever runs in
// this process (baesrv without -replicas, Temporal alone's worker, the
// embedded server); "postgres" is the bench's own database (bae-go's, or
// the floor's), the Temporal server's databases are rows of their own.
func writeCPUSplit(w io.Writer, floor, alone, bae CPUStats) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "cpu per turn (ms)\tfloor\tTemporal alone\tbae-go\tbae-go - Temporal alone")
	row := func(name string, fl, ta, bg float64) {
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\t%+.2f\n", name, fl, ta, bg, bg-ta)
	}
	total := func(c CPUStats) float64 {
		t := c.BenchMsPerTurn + c.PGMsPerTurn
		for _, v := range c.ProcsMsPerTurn {
			t += v
		}
		return t
	}
	row("bench process", floor.BenchMsPerTurn, alone.BenchMsPerTurn, bae.BenchMsPerTurn)
	row("postgres (bench database)", floor.PGMsPerTurn, alone.PGMsPerTurn, bae.PGMsPerTurn)
	roles := map[string]bool{}
	for _, c := range []CPUStats{floor, alone, bae} {
		for role := range c.ProcsMsPerTurn {
			roles[role] = true
		}
	}
	for _, role := range slices.Sorted(maps.Keys(roles)) {
		row(role, floor.ProcsMsPerTurn[role], alone.ProcsMsPerTurn[role], bae.ProcsMsPerTurn[role])
	}
	row("all", total(floor), total(alone), total(bae))
	tw.Flush()
	fmt.Fprintf(w, "cpu other (cores): floor %.2f, Temporal alone %.2f, bae-go %.2f\n", floor.Other, alone.Other, bae.Other)
}

// writeLong prints the long-session mode's figures.
func writeLong(w io.Writer, r *report) {
	l := r.Long
	fmt.Fprintf(w, "\nbae-go long session  %s  %s  %d CPU  load %s -> %s\n\n", r.Date, r.GoVersion, r.NumCPU, r.LoadAvgStart, r.LoadAvgEnd)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "built\t%d events in %d turns, %.1fs (%d errors); server-added p50 %.1f ms in the first tenth, %.1f ms in the last\n",
		l.Events, l.BuildTurns, l.BuildS, l.BuildErrors, l.BuildAddedFirst, l.BuildAddedLast)
	fmt.Fprintf(tw, "storage\tsession_events payload %s (provider.request %s), session_messages %s\n", mib(uint64(l.EventsBytes)), mib(uint64(l.RequestBytes)), mib(uint64(l.MessagesBytes)))
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "per turn\tfresh session\tlong session\tlong / fresh")
	row := func(name string, f, g float64) {
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.2fx\n", name, f, g, ratio(g, f))
	}
	row("server-added p50 ms", l.Fresh.ServerAdded.P50, l.Long.ServerAdded.P50)
	row("server-added p90 ms", l.Fresh.ServerAdded.P90, l.Long.ServerAdded.P90)
	row("server-added mean ms", l.Fresh.ServerAdded.Mean, l.Long.ServerAdded.Mean)
	row("process cpu ms", l.Fresh.CPUMsTurn, l.Long.CPUMsTurn)
	// The fake provider shares the process; its handler is CPU-bound (it
	// parses the provider body), so its time is taken out here.
	row("  fake provider aside", l.Fresh.CPUMsTurn-l.Fresh.FakeMsTurn, l.Long.CPUMsTurn-l.Long.FakeMsTurn)
	row("postgres cpu ms", l.Fresh.PGMsTurn, l.Long.PGMsTurn)
	row("provider body KiB", l.Fresh.ProviderKiB, l.Long.ProviderKiB)
	row("stream KiB", l.Fresh.StreamBytes/1024, l.Long.StreamBytes/1024)
	fmt.Fprintf(tw, "turns (errors)\t%d (%d)\t%d (%d)\t\n", l.Fresh.Turns, l.Fresh.Errors, l.Long.Turns, l.Long.Errors)
	tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintf(w, "replay via session.subscribe (since_event_id): %d events, %s in %.2fs\n", l.ReplayEvents, mib(uint64(l.ReplayBytes)), l.ReplayS)
	fmt.Fprintf(w, "replay via GET /events (limit 200): %d pages, %s in %.2fs\n", l.Pages, mib(uint64(l.PagesBytes)), l.PagesS)
	if l.Err != "" {
		fmt.Fprintf(w, "error: %s\n", l.Err)
	}
}

// rssSample is the baesrv processes' resident memory at a point of the run.
type rssSample struct {
	Label string `json:"label"`
	Bytes int64  `json:"bytes"`
}

// measureGrowth records what the idle opens added: after and before are
// database sizes by name (bae is bae-go's; the rest are Temporal's).
func (ir *idleReport) measureGrowth(after, before map[string]int64, bae string, rss int64) {
	ir.ReplicaRSSAdded = rss
	for db, b := range after {
		a, ok := before[db]
		if !ok {
			continue
		}
		if db == bae {
			ir.BaeDBAdded = b - a
			continue
		}
		if ir.TemporalDBAdded == nil {
			ir.TemporalDBAdded = map[string]int64{}
		}
		ir.TemporalDBAdded[db] = b - a
	}
}

// procsCores and procsPerTurn print the CPU of the processes outside this
// one (baesrv replicas, an external Temporal server), when there are any.
func procsCores(c CPUStats) string {
	var s string
	for _, role := range slices.Sorted(maps.Keys(c.Procs)) {
		s += fmt.Sprintf(" %s %.2f,", role, c.Procs[role])
	}
	return s
}

func procsPerTurn(c CPUStats) string {
	var s string
	for _, role := range slices.Sorted(maps.Keys(c.ProcsMsPerTurn)) {
		s += fmt.Sprintf(" + %.1f ms in %s", c.ProcsMsPerTurn[role], role)
	}
	return s
}

// writeAloneTimeline prints Temporal alone's timeline as bae-go's, and
// each of its segments against the bae-go segments between the same
// milestones: the excess is what bae-go's own code adds there (the
// provider segment holds the floor's work too: its transactions and HTTP).
func writeAloneTimeline(w io.Writer, bae []phase, tf *temporalAlone) {
	if len(tf.Timeline) == 0 {
		return
	}
	fmt.Fprintf(w, "\nTemporal alone timeline ms (%d updates; bench, Temporal history and local activity stamps)\n", tf.TimelineTurns)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, p := range tf.Timeline {
		fmt.Fprintf(tw, "  %s\tp50 %6.1f  p99 %6.1f  mean %6.1f\t%s\n", p.Name, p.Dist.P50, p.Dist.P99, p.Dist.Mean, p.What)
	}
	tw.Flush()
	if len(bae) == 0 {
		return
	}
	byName := map[string]benchstack.Dist{}
	for _, p := range bae {
		byName[p.Name] = p.Dist
	}
	fmt.Fprintln(w, "\nsegment by segment (sums of p50s and of means; the same milestones in both)")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "Temporal alone segment\tbae-go segments\tTemporal alone p50\tbae-go p50\texcess p50\tTemporal alone mean\tbae-go mean\texcess mean")
	var sums [4]float64
	for i, p := range tf.Timeline {
		if i >= len(alonePhases) || p.Name != alonePhases[i].name {
			continue
		}
		var b50, bmean float64
		for _, n := range alonePhases[i].bae {
			b50 += byName[n].P50
			bmean += byName[n].Mean
		}
		sums[0] += p.Dist.P50
		sums[1] += b50
		sums[2] += p.Dist.Mean
		sums[3] += bmean
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.1f\t%+.1f\t%.1f\t%.1f\t%+.1f\n", p.Name, strings.Join(alonePhases[i].bae, " + "), p.Dist.P50, b50, b50-p.Dist.P50, p.Dist.Mean, bmean, bmean-p.Dist.Mean)
	}
	fmt.Fprintf(tw, "total\t\t%.1f\t%.1f\t%+.1f\t%.1f\t%.1f\t%+.1f\n", sums[0], sums[1], sums[1]-sums[0], sums[2], sums[3], sums[3]-sums[2])
	tw.Flush()
}

// hotUpdates prints updates per turn by table, e.g. "sessions 3.0 (HOT
// 3.0), turn_inputs 2.0 (HOT 0.0)".
func hotUpdates(u map[string]HOTUpdates) string {
	names := slices.Sorted(maps.Keys(u))
	parts := make([]string, 0, len(names))
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %.1f (HOT %.1f)", n, u[n].Updated, u[n].HOT))
	}
	return strings.Join(parts, ", ")
}

// walByRelation prints WAL records per turn by relation, most first, e.g.
// "session_events 2.0, other 4.1, ...".
func walByRelation(by map[string]float64) string {
	names := slices.Sorted(maps.Keys(by))
	slices.SortStableFunc(names, func(a, b string) int {
		switch {
		case by[a] > by[b]:
			return -1
		case by[a] < by[b]:
			return 1
		}
		return 0
	})
	parts := make([]string, 0, len(names))
	for _, n := range names {
		if by[n] >= 0.05 {
			parts = append(parts, fmt.Sprintf("%s %.1f", n, by[n]))
		}
	}
	return strings.Join(parts, ", ")
}
