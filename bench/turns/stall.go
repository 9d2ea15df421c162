package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// stallWatch notices when turns are in flight but none has finished for a
// while, and then captures what the process is waiting on: a goroutine dump
// (written to a file) and PostgreSQL's view of the bench connections. A
// stall is what a pool deadlock or a lost wake-up looks like from outside.
type stallWatch struct {
	inflight  atomic.Int64
	finished  atomic.Int64
	after     time.Duration
	dir       string
	log       *slog.Logger
	pg        *pgSampler
	mu        sync.Mutex
	stalls    []stallReport
	maxDumps  int
	stalledAt time.Time
}

type stallReport struct {
	At       float64 `json:"at_s"`
	Inflight int64   `json:"turns_in_flight"`
	// DumpFile holds the goroutine dump (pprof debug=1 format).
	DumpFile string `json:"dump_file,omitempty"`
	// WaitingStacks counts goroutines by what they block in, for the
	// patterns that explain stalls seen so far.
	WaitingStacks map[string]int `json:"waiting_stacks,omitempty"`
	PGStates      string         `json:"postgres_states,omitempty"`
	DurationS     float64        `json:"duration_s"` // until turns finished again
}

func (w *stallWatch) begin() { w.inflight.Add(1) }
func (w *stallWatch) end()   { w.inflight.Add(-1); w.finished.Add(1) }

func (w *stallWatch) run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	last, lastChange := w.finished.Load(), time.Now()
	for {
		select {
		case <-ctx.Done():
			w.closeStall(time.Now())
			return
		case now := <-t.C:
			if f := w.finished.Load(); f != last {
				last, lastChange = f, now
				w.closeStall(now)
				continue
			}
			if w.inflight.Load() == 0 {
				// Nothing waits, so nothing stalls: the clock starts when
				// turns are in flight again (not at the end of an idle-open
				// phase that had none).
				lastChange = now
				continue
			}
			if now.Sub(lastChange) < w.after || !w.stalledAt.IsZero() {
				continue
			}
			w.stalledAt = lastChange
			w.capture(ctx, now)
		}
	}
}

func (w *stallWatch) closeStall(now time.Time) {
	if w.stalledAt.IsZero() {
		return
	}
	w.mu.Lock()
	if n := len(w.stalls); n > 0 {
		w.stalls[n-1].DurationS = now.Sub(w.stalledAt).Seconds()
	}
	w.mu.Unlock()
	w.log.Warn("stall over: turns are finishing again", "stalled_for", now.Sub(w.stalledAt).Round(time.Second))
	w.stalledAt = time.Time{}
}

// stackPatterns name the blocking sites worth counting: each matches a
// goroutine whose stack contains every substring.
var stackPatterns = []struct {
	name  string
	parts []string
}{
	{"BeginTurn tx waiting for a pool connection", []string{"activities.(*Activities).beginTx", "pgxpool.(*Pool).Acquire"}},
	{"any bae code waiting for a pool connection", []string{"bae-go/bae-go/", "pgxpool.(*Pool).Acquire"}},
	{"HTTP handler waiting for the SendMessage update", []string{"sessionclient.(*Client).SendMessage"}},
	{"relay waiting for a wake-up", []string{"api.(*clientAPI).sendMessage", "selectgo"}},
}

func (w *stallWatch) capture(ctx context.Context, now time.Time) {
	rep := stallReport{At: now.Sub(benchStart).Seconds(), Inflight: w.inflight.Load(), WaitingStacks: map[string]int{}}
	var buf bytes.Buffer
	if p := pprof.Lookup("goroutine"); p != nil {
		_ = p.WriteTo(&buf, 1)
	}
	for _, block := range strings.Split(buf.String(), "\n\n") {
		n, ok := blockCount(block)
		if !ok {
			continue
		}
		for _, pat := range stackPatterns {
			all := true
			for _, part := range pat.parts {
				all = all && strings.Contains(block, part)
			}
			if all {
				rep.WaitingStacks[pat.name] += n
			}
		}
	}
	w.mu.Lock()
	dump := len(w.stalls) < w.maxDumps
	w.mu.Unlock()
	if dump {
		name := filepath.Join(w.dir, fmt.Sprintf("bae-bench-stall-%s.txt", now.Format("150405")))
		if err := os.WriteFile(name, buf.Bytes(), 0o644); err == nil {
			rep.DumpFile = name
		}
	}
	if w.pg != nil {
		rep.PGStates = w.pg.states(ctx)
	}
	w.mu.Lock()
	w.stalls = append(w.stalls, rep)
	w.mu.Unlock()
	w.log.Warn("stall: no turn finished recently", "for", w.after, "in_flight", rep.Inflight,
		"waiting", rep.WaitingStacks, "postgres", rep.PGStates, "dump", rep.DumpFile)
}

// blockCount reads the "N @ 0x..." header of a debug=1 goroutine block.
func blockCount(block string) (int, bool) {
	block = strings.TrimLeft(block, "\n")
	head, _, ok := strings.Cut(block, " @ ")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(head)
	return n, err == nil
}

func (w *stallWatch) reports() []stallReport {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]stallReport(nil), w.stalls...)
}

// states summarises pg_stat_activity for the bench database, e.g.
// "idle in transaction=20 (ClientRead) active=1".
func (p *pgSampler) states(ctx context.Context) string {
	p.connMu.Lock()
	defer p.connMu.Unlock()
	rows, err := p.conn.Query(ctx, `SELECT coalesce(state, '?'), coalesce(wait_event, ''), count(*)
		FROM pg_stat_activity WHERE datname = $1
		GROUP BY 1, 2 ORDER BY 3 DESC`, p.db)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var parts []string
	for rows.Next() {
		var state, wait string
		var n int
		if rows.Scan(&state, &wait, &n) == nil {
			s := fmt.Sprintf("%s=%d", state, n)
			if wait != "" {
				s += " (" + wait + ")"
			}
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, ", ")
}
