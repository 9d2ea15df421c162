package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// memSample is one snapshot of the whole process: Temporal, baesrv, the
// fake and the load generator share it, as in `baesrv dev`.
type memSample struct {
	Label      string  `json:"label"`
	At         float64 `json:"at_s"` // seconds since the bench started
	Goroutines int     `json:"goroutines"`
	HeapAlloc  uint64  `json:"heap_alloc_bytes"`
	HeapLive   uint64  `json:"heap_live_bytes"` // live heap as of the last GC
	HeapSys    uint64  `json:"heap_sys_bytes"`
	Sys        uint64  `json:"sys_bytes"`
	NumGC      uint32  `json:"num_gc"`
}

var benchStart = time.Now()

func sampleMem(label string) memSample {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	// HeapAlloc swings with the GC cycle; the live heap after the last
	// mark is what shows a leak.
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(live)
	var hl uint64
	if live[0].Value.Kind() == metrics.KindUint64 {
		hl = live[0].Value.Uint64()
	}
	return memSample{
		Label: label, At: time.Since(benchStart).Seconds(), Goroutines: runtime.NumGoroutine(),
		HeapAlloc: m.HeapAlloc, HeapLive: hl, HeapSys: m.HeapSys, Sys: m.Sys, NumGC: m.NumGC,
	}
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// pgSampler polls pg_stat_activity for one database (db) over its own
// connection to the maintenance database, so its own queries never count
// in the observed database's transaction and row counters.
type pgSampler struct {
	connMu sync.Mutex // a pgx.Conn serves one query at a time
	conn   *pgx.Conn
	db     string
	dbURL  string // the observed database, for the storage figures
	errs   int

	mu      sync.Mutex
	samples []pgSample
}

type pgSample struct {
	Total, Active, IdleInTx int
}

// PGStats summarise the samples.
type PGStats struct {
	Samples   int     `json:"samples"`
	Errors    int     `json:"sample_errors,omitempty"`
	MaxTotal  int     `json:"max_connections"`
	MeanTotal float64 `json:"mean_connections"`
	MaxActive int     `json:"max_active"`
	MeanActv  float64 `json:"mean_active"`
	MaxIdleTx int     `json:"max_idle_in_transaction"`
	Last      int     `json:"last_connections"`
	PoolMax   int32   `json:"pool_max_conns"`
}

// newPGSampler observes the database of dbURL from maintURL.
func newPGSampler(ctx context.Context, maintURL, dbURL string) (*pgSampler, error) {
	c, err := pgx.Connect(ctx, maintURL)
	if err != nil {
		return nil, fmt.Errorf("connect pg sampler: %w", err)
	}
	return &pgSampler{conn: c, db: dbOf(dbURL), dbURL: dbURL}, nil
}

func (p *pgSampler) sample(ctx context.Context) (pgSample, error) {
	var s pgSample
	p.connMu.Lock()
	defer p.connMu.Unlock()
	err := p.conn.QueryRow(ctx, `SELECT count(*),
		count(*) FILTER (WHERE state = 'active'),
		count(*) FILTER (WHERE state LIKE 'idle in transaction%')
		FROM pg_stat_activity WHERE datname = $1`, p.db).Scan(&s.Total, &s.Active, &s.IdleInTx)
	if err != nil {
		return s, fmt.Errorf("sample pg_stat_activity: %w", err)
	}
	return s, nil
}

// run samples every interval until ctx ends.
func (p *pgSampler) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		p.record(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// record takes one sample and keeps it.
func (p *pgSampler) record(ctx context.Context) {
	s, err := p.sample(ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err == nil {
		p.samples = append(p.samples, s)
	} else if ctx.Err() == nil {
		p.errs++
	}
}

func (p *pgSampler) last() (pgSample, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.samples) == 0 {
		return pgSample{}, false
	}
	return p.samples[len(p.samples)-1], true
}

func (p *pgSampler) stats() PGStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := PGStats{Samples: len(p.samples), Errors: p.errs}
	for _, s := range p.samples {
		st.MaxTotal = max(st.MaxTotal, s.Total)
		st.MaxActive = max(st.MaxActive, s.Active)
		st.MaxIdleTx = max(st.MaxIdleTx, s.IdleInTx)
		st.MeanTotal += float64(s.Total)
		st.MeanActv += float64(s.Active)
	}
	if n := len(p.samples); n > 0 {
		st.MeanTotal /= float64(n)
		st.MeanActv /= float64(n)
		st.Last = p.samples[n-1].Total
	}
	return st
}

// backendPIDs lists the server processes serving the bench database, so
// their CPU time can be read from /proc.
func (p *pgSampler) backendPIDs(ctx context.Context) []int {
	p.connMu.Lock()
	defer p.connMu.Unlock()
	rows, err := p.conn.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = $1`, p.db)
	if err != nil {
		return nil
	}
	pids, _ := pgx.CollectRows(rows, pgx.RowTo[int])
	return pids
}

// backendPIDsOf lists the backends connected to each of dbs, by database.
func (p *pgSampler) backendPIDsOf(ctx context.Context, dbs []string) map[string][]int {
	p.connMu.Lock()
	defer p.connMu.Unlock()
	rows, err := p.conn.Query(ctx, `SELECT datname, pid FROM pg_stat_activity WHERE datname = ANY($1)`, dbs)
	if err != nil {
		return nil
	}
	out := map[string][]int{}
	var db string
	var pid int
	_, err = pgx.ForEachRow(rows, []any{&db, &pid}, func() error {
		out[db] = append(out[db], pid)
		return nil
	})
	if err != nil {
		return nil
	}
	return out
}

// StorageStats is what the run left in PostgreSQL.
type StorageStats struct {
	DatabaseBytes int64 `json:"database_bytes"`
	EventsBytes   int64 `json:"session_events_bytes"` // table + indexes + TOAST
	Events        int64 `json:"session_events_rows"`
	EventBodies   int64 `json:"session_events_payload_bytes"`
}

func (p *pgSampler) storage(ctx context.Context) (StorageStats, error) {
	var s StorageStats
	conn, err := pgx.Connect(ctx, p.dbURL)
	if err != nil {
		return s, fmt.Errorf("storage stats: %w", err)
	}
	defer conn.Close(ctx)
	err = conn.QueryRow(ctx, `SELECT pg_database_size(current_database()), pg_total_relation_size('session_events'),
		count(*), coalesce(sum(octet_length(payload::text)), 0) FROM session_events`).Scan(&s.DatabaseBytes, &s.EventsBytes, &s.Events, &s.EventBodies)
	if err != nil {
		return s, fmt.Errorf("storage stats: %w", err)
	}
	return s, nil
}

// dbCounters are cumulative pg_stat_database counters of the observed
// database.
type dbCounters struct {
	Xacts, Returned, Fetched, Inserted, Updated, Deleted int64
}

func (p *pgSampler) counters(ctx context.Context) (dbCounters, error) {
	p.connMu.Lock()
	defer p.connMu.Unlock()
	var c dbCounters
	err := p.conn.QueryRow(ctx, `SELECT xact_commit + xact_rollback, tup_returned, tup_fetched, tup_inserted, tup_updated, tup_deleted
		FROM pg_stat_database WHERE datname = $1`, p.db).Scan(&c.Xacts, &c.Returned, &c.Fetched, &c.Inserted, &c.Updated, &c.Deleted)
	if err != nil {
		return c, fmt.Errorf("read pg_stat_database: %w", err)
	}
	return c, nil
}

// PGWork is PostgreSQL work per completed turn over the measured phase.
type PGWork struct {
	XactsPerTurn    float64 `json:"transactions_per_turn"`
	InsertedPerTurn float64 `json:"rows_inserted_per_turn"`
	UpdatedPerTurn  float64 `json:"rows_updated_per_turn"`
	FetchedPerTurn  float64 `json:"rows_fetched_per_turn"`
	// Counted by the store's pool in this process (0 when it runs
	// elsewhere): a batch of statements is one round trip.
	RoundTripsPerTurn float64 `json:"round_trips_per_turn,omitempty"`
	// CallsUncounted: round trips and statements are counted by the store
	// in this process, so not when baesrv runs as -replicas.
	CallsUncounted    bool    `json:"round_trips_not_counted,omitempty"`
	StatementsPerTurn float64 `json:"statements_per_turn,omitempty"`
	// WAL of the observed database only (see walBetween); FPI bytes are
	// full-page images, which depend on when checkpoints fall.
	WALRecordsPerTurn  float64            `json:"wal_records_per_turn,omitempty"`
	WALBytesPerTurn    float64            `json:"wal_bytes_per_turn,omitempty"`
	WALFPIBytesPerTurn float64            `json:"wal_fpi_bytes_per_turn,omitempty"`
	WALByRelation      map[string]float64 `json:"wal_records_per_turn_by_relation,omitempty"`
	// Row updates per turn and how many were HOT, by table.
	Updates map[string]HOTUpdates `json:"updates_per_turn,omitempty"`
}

// HOTUpdates are a table's row updates per turn; HOT ones wrote no index
// entry.
type HOTUpdates struct {
	Updated float64 `json:"updated"`
	HOT     float64 `json:"hot"`
}

func (p *pgSampler) close(ctx context.Context) {
	p.connMu.Lock()
	defer p.connMu.Unlock()
	_ = p.conn.Close(ctx)
}

// cpuMark is a point-in-time reading of CPU counters, so a phase's CPU use
// can be split between this process, the PostgreSQL backends serving it
// and everything else on the machine (other builders included).
type cpuMark struct {
	wall    time.Time
	self    time.Duration
	machine machineCPU
	pg      map[int]time.Duration
	// procs are the processes of the system under test outside this one
	// (baesrv replicas, an external Temporal server), by role.
	procs map[string]map[int]time.Duration
}

type machineCPU struct {
	busy, total uint64 // clock ticks
	ok          bool
}

// CPUStats is CPU use during the measured phase, in cores (1.0 = one core
// busy for the whole phase).
type CPUStats struct {
	Cores        int     `json:"cores"`
	BenchProcess float64 `json:"bench_process_cores"` // Temporal + baesrv + fake + load generator, less what runs in Procs
	// Procs are the other processes of the system under test, by role
	// ("baesrv" replicas, "temporal" server), when they run outside this one.
	Procs       map[string]float64 `json:"process_cores,omitempty"`
	PGBackends  float64            `json:"postgres_backends_cores"`
	MachineBusy float64            `json:"machine_busy_cores"`
	Other       float64            `json:"other_cores"` // PostgreSQL background workers, other processes
	Available   bool               `json:"available"`
	// CPU time per completed turn: the cost that bounds throughput once
	// the machine is saturated, and is less noisy than latency on a shared box.
	BenchMsPerTurn float64            `json:"bench_process_cpu_ms_per_turn"`
	PGMsPerTurn    float64            `json:"postgres_cpu_ms_per_turn"`
	ProcsMsPerTurn map[string]float64 `json:"process_cpu_ms_per_turn,omitempty"`
}

// perTurn sets the per-turn figures from the cores used over elapsed
// seconds and n completed turns.
func (st *CPUStats) perTurn(elapsed float64, n int) {
	if n <= 0 {
		return
	}
	per := func(cores float64) float64 { return cores * elapsed * 1000 / float64(n) }
	st.BenchMsPerTurn, st.PGMsPerTurn = per(st.BenchProcess), per(st.PGBackends)
	st.ProcsMsPerTurn = map[string]float64{}
	for role, c := range st.Procs {
		st.ProcsMsPerTurn[role] = per(c)
	}
}

func markCPU(pids []int, procs map[string][]int) cpuMark {
	m := cpuMark{wall: time.Now(), machine: readMachineCPU(), pg: map[int]time.Duration{}, procs: map[string]map[int]time.Duration{}}
	for role, ps := range procs {
		m.procs[role] = map[int]time.Duration{}
		for _, pid := range ps {
			if d, ok := procCPU(pid); ok {
				m.procs[role][pid] = d
			}
		}
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		m.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	for _, pid := range pids {
		if d, ok := procCPU(pid); ok {
			m.pg[pid] = d
		}
	}
	return m
}

// cpuBetween needs the end mark to list the PIDs alive at the end; a
// backend born during the phase counts from zero.
func cpuBetween(a, b cpuMark) CPUStats {
	st := CPUStats{Cores: runtime.NumCPU()}
	wall := b.wall.Sub(a.wall).Seconds()
	if wall <= 0 {
		return st
	}
	st.BenchProcess = (b.self - a.self).Seconds() / wall
	var pg time.Duration
	for pid, end := range b.pg {
		pg += end - a.pg[pid]
	}
	st.PGBackends = pg.Seconds() / wall
	var procs float64
	for role, pids := range b.procs {
		var d time.Duration
		for pid, end := range pids {
			d += end - a.procs[role][pid]
		}
		if st.Procs == nil {
			st.Procs = map[string]float64{}
		}
		st.Procs[role] = d.Seconds() / wall
		procs += st.Procs[role]
	}
	if a.machine.ok && b.machine.ok && b.machine.total > a.machine.total {
		frac := float64(b.machine.busy-a.machine.busy) / float64(b.machine.total-a.machine.total)
		st.MachineBusy = frac * float64(st.Cores)
		st.Other = max(0, st.MachineBusy-st.BenchProcess-st.PGBackends-procs)
		st.Available = true
	}
	return st
}

func readMachineCPU() machineCPU {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return machineCPU{}
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return machineCPU{}
	}
	fields := strings.Fields(sc.Text()) // cpu user nice system idle iowait irq softirq steal ...
	if len(fields) < 8 || fields[0] != "cpu" {
		return machineCPU{}
	}
	var m machineCPU
	for i, f := range fields[1:] {
		v, _ := strconv.ParseUint(f, 10, 64)
		if i >= 8 { // guest time is already counted in user
			break
		}
		m.total += v
		if i != 3 && i != 4 { // idle, iowait
			m.busy += v
		}
	}
	m.ok = true
	return m
}

// procCPU is utime+stime of a process (Linux; USER_HZ is 100 everywhere
// Go runs on Linux).
func procCPU(pid int) (time.Duration, bool) {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:]) // f[0] is state (field 3); utime is field 14
	if len(f) < 13 {
		return 0, false
	}
	ut, _ := strconv.ParseUint(f[11], 10, 64)
	st, _ := strconv.ParseUint(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond, true
}

func loadAvg() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(raw))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// dbSizes is pg_database_size of each named database (missing ones left out).
func (p *pgSampler) dbSizes(ctx context.Context, names []string) map[string]int64 {
	p.connMu.Lock()
	defer p.connMu.Unlock()
	out := map[string]int64{}
	for _, n := range names {
		var b int64
		if err := p.conn.QueryRow(ctx, `SELECT pg_database_size($1)`, n).Scan(&b); err == nil {
			out[n] = b
		}
	}
	return out
}

// walMark is the WAL insert position of the cluster, read from the
// maintenance connection.
func (p *pgSampler) walMark(ctx context.Context) (string, error) {
	p.connMu.Lock()
	defer p.connMu.Unlock()
	var lsn string
	err := p.conn.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&lsn)
	return lsn, err
}

// walKeep makes PostgreSQL keep the WAL written from now on until
// walRelease, so walBetween can still read the phase's records after a
// checkpoint: a temporary physical replication slot of the maintenance
// connection (dropped with it at the latest).
func (p *pgSampler) walKeep(ctx context.Context) error {
	p.connMu.Lock()
	defer p.connMu.Unlock()
	_, err := p.conn.Exec(ctx, `SELECT pg_create_physical_replication_slot('bae_bench_wal_' || pg_backend_pid(), true, true)`)
	return err
}

func (p *pgSampler) walRelease(ctx context.Context) {
	p.connMu.Lock()
	defer p.connMu.Unlock()
	_, _ = p.conn.Exec(ctx, `SELECT pg_drop_replication_slot('bae_bench_wal_' || pg_backend_pid())`)
}

// walCount is the WAL the observed database wrote between two positions:
// its records are picked out of the cluster's WAL with pg_walinspect (the
// records that touch a block of the database, plus the records, commits
// included, of the transactions that did), so other databases' writes
// (Temporal's, other runs') do not count. It creates the extension in the
// observed database, after the phase.
type walCount struct {
	Records, Bytes, FPIBytes int64
	// ByRelation counts the records by the relation of their first block
	// (a table or an index of the database; "other" without one: commits).
	ByRelation map[string]int64
}

func (p *pgSampler) walBetween(ctx context.Context, from, to string) (walCount, error) {
	var w walCount
	c, err := pgx.Connect(ctx, p.dbURL)
	if err != nil {
		return w, err
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_walinspect`); err != nil {
		return w, err
	}
	err = c.QueryRow(ctx, `WITH r AS (SELECT xid::text AS x, block_ref, record_length, fpi_length
			FROM pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn)),
		mine AS (SELECT x FROM r WHERE block_ref LIKE $3 AND x <> '0')
		SELECT count(*), coalesce(sum(record_length), 0), coalesce(sum(fpi_length), 0) FROM r
		WHERE block_ref LIKE $3 OR (x <> '0' AND x IN (SELECT x FROM mine))`,
		from, to, fmt.Sprintf("%% rel %%/%s/%%", p.dbOID(ctx, c))).Scan(&w.Records, &w.Bytes, &w.FPIBytes)
	if err != nil {
		return w, err
	}
	rows, err := c.Query(ctx, `WITH r AS (SELECT xid::text AS x, block_ref,
				substring(block_ref FROM 'rel [0-9]+/'||$3||'/([0-9]+)')::oid AS node
			FROM pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn)),
		mine AS (SELECT x FROM r WHERE node IS NOT NULL AND x <> '0')
		SELECT coalesce(c.relname::text, CASE WHEN r.node IS NULL THEN 'other' ELSE 'relfilenode ' || r.node END), count(*)
		FROM r LEFT JOIN pg_class c ON c.relfilenode = r.node AND r.node <> 0
		WHERE r.node IS NOT NULL OR (r.x <> '0' AND r.x IN (SELECT x FROM mine))
		GROUP BY 1`, from, to, p.dbOID(ctx, c))
	if err != nil {
		return w, err
	}
	defer rows.Close()
	w.ByRelation = map[string]int64{}
	for rows.Next() {
		var n string
		var k int64
		if err := rows.Scan(&n, &k); err != nil {
			return w, err
		}
		w.ByRelation[n] = k
	}
	return w, rows.Err()
}

func (p *pgSampler) dbOID(ctx context.Context, c *pgx.Conn) string {
	var oid string
	_ = c.QueryRow(ctx, `SELECT oid::text FROM pg_database WHERE datname = current_database()`).Scan(&oid)
	return oid
}

// tableUpdates are the cumulative row updates of the tables a turn
// updates, and how many of them were HOT (no index entry written).
type tableUpdates map[string][2]int64

// updates reads pg_stat_user_tables of the observed database over a
// connection of its own (one transaction, flushed when it closes).
func (p *pgSampler) updates(ctx context.Context) (tableUpdates, error) {
	c, err := pgx.Connect(ctx, p.dbURL)
	if err != nil {
		return nil, err
	}
	defer c.Close(ctx)
	rows, err := c.Query(ctx, `SELECT relname, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
		WHERE relname IN ('turn_inputs', 'sessions')`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := tableUpdates{}
	for rows.Next() {
		var n string
		var u, h int64
		if err := rows.Scan(&n, &u, &h); err != nil {
			return nil, err
		}
		out[n] = [2]int64{u, h}
	}
	return out, rows.Err()
}
