package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/bae-go/bae-go/bench/benchstack"
	"github.com/bae-go/bae-go/bench/temporalfloor"
)

// -rounds: one run's phases are seconds long and the shared machine's
// speed drifts between them, so a single run's capacity ratio or own share
// cannot be called. With N rounds the three phases run N times each,
// interleaved (roundOrder), and the figure is read from the rounds'
// median and from all rounds' samples pooled.

// phaseKind is one of the three phases a round measures.
type phaseKind int

const (
	phaseBae phaseKind = iota
	phaseFloor
	phaseAlone
)

func (k phaseKind) String() string {
	switch k {
	case phaseBae:
		return "bae-go"
	case phaseFloor:
		return "floor"
	default:
		return "Temporal alone"
	}
}

// letter is the phase in the rounds table's order column.
func (k phaseKind) letter() string { return [...]string{"B", "F", "T"}[k] }

// roundOrder is the order of the phases in round i (from 0). Round 1 keeps
// the single run's order and every other round reverses it, so drift
// through the run falls on each phase alike: over two rounds each phase
// has the same mean position.
func roundOrder(i int) [3]phaseKind {
	if i%2 == 0 {
		return [3]phaseKind{phaseBae, phaseFloor, phaseAlone}
	}
	return [3]phaseKind{phaseAlone, phaseFloor, phaseBae}
}

// roundPhase is one phase of a round. Latency is the server-added latency
// for bae-go and the floor, the update's for Temporal alone: the three
// terms of the own share.
type roundPhase struct {
	Completed int             `json:"completed"`
	Errors    int             `json:"errors"`
	Err       string          `json:"error,omitempty"`
	ElapsedS  float64         `json:"elapsed_s"`
	PerSecond float64         `json:"per_s"`
	Latency   benchstack.Dist `json:"latency"`
	// CPU and PGWork are the phase's, as the single run reports them (no
	// PGWork for Temporal alone): a trend down the rounds shows in them.
	CPU     *CPUStats `json:"cpu,omitempty"`
	PGWork  *PGWork   `json:"postgres_work,omitempty"`
	samples []time.Duration
}

func newRoundPhase(completed, errors int, elapsed float64, samples []time.Duration) roundPhase {
	p := roundPhase{Completed: completed, Errors: errors, ElapsedS: elapsed, Latency: benchstack.Summarise(samples), samples: samples}
	if elapsed > 0 {
		p.PerSecond = float64(completed) / elapsed
	}
	return p
}

// baePhase is bae-go's phase from its turns and the report measure filled.
func baePhase(recs []turnRec, rep *report) roundPhase {
	failed := 0
	for _, r := range recs {
		if r.err != nil {
			failed++
		}
	}
	p := newRoundPhase(len(recs)-failed, failed, rep.Turns.Elapsed, addedSamples(recs))
	cpu, work := rep.CPU, rep.PGWork
	p.CPU, p.PGWork = &cpu, &work
	return p
}

func floorPhase(f *floorReport) roundPhase {
	p := newRoundPhase(f.Completed, f.Errors, f.Elapsed, f.added)
	p.Err = f.FirstError
	cpu, work := f.CPU, f.PGWork
	p.CPU, p.PGWork = &cpu, &work
	return p
}

func alonePhase(t *temporalAlone) roundPhase {
	p := newRoundPhase(t.Completed, 0, t.elapsed.Seconds(), t.latencies)
	cpu := t.CPU
	p.CPU = &cpu
	if t.Err != "" {
		p.Errors, p.Err = 1, t.Err
	}
	return p
}

// roundResult is one round: its three phases, the figure read from them,
// and the state of the machine and of this process around it.
type roundResult struct {
	Round   int        `json:"round"`
	Order   []string   `json:"order"`
	LoadAvg string     `json:"loadavg_start"`
	Bae     roundPhase `json:"bae_go"`
	Floor   roundPhase `json:"floor"`
	Alone   roundPhase `json:"temporal_alone"`
	Figure  float64    `json:"figure"`
	// HeapLive and BaeDBBytes are taken at the round's end: over rounds
	// they show whether the bench itself accumulates.
	HeapLive   uint64 `json:"heap_live_end_bytes"`
	Goroutines int    `json:"goroutines_end"`
	BaeDBBytes int64  `json:"bae_database_end_bytes"`

	// sessions and alone are what the round leaves running, ended by
	// cleanUp once the next round is due.
	sessions []*session
	alone    temporalfloor.Load
}

func newRound(i int, load string) roundResult {
	r := roundResult{Round: i + 1, LoadAvg: load}
	for _, k := range roundOrder(i) {
		r.Order = append(r.Order, k.String())
	}
	return r
}

// end reads the round's figure and what the bench holds after it.
func (r *roundResult) end(ctx context.Context, paced bool, pg *pgSampler, db string) {
	r.Figure = roundFigure(paced, r.Bae, r.Floor, r.Alone)
	m := sampleMem("")
	r.HeapLive, r.Goroutines = m.HeapLive, m.Goroutines
	r.BaeDBBytes = pg.dbSizes(context.WithoutCancel(ctx), []string{db})[db]
}

// roundFigure is the issue-39 figure of three phases: closed loop, bae-go's
// turns/s ÷ Temporal alone's updates/s; paced, bae-go's own share at p50
// (its server-added p50 beyond the floor's and Temporal alone's).
func roundFigure(paced bool, bae, floor, alone roundPhase) float64 {
	if paced {
		return bae.Latency.P50 - floor.Latency.P50 - alone.Latency.P50
	}
	return ratio(bae.PerSecond, alone.PerSecond)
}

// roundsReport is every round and the figure over them.
type roundsReport struct {
	// Figure names what roundResult.Figure and the summary hold:
	// "capacity_vs_temporal_alone" (a ratio) or "own_share_p50_ms".
	Figure string        `json:"figure"`
	Rounds []roundResult `json:"rounds"`
	Median float64       `json:"median"`
	Min    float64       `json:"min"`
	Max    float64       `json:"max"`
	// Pooled is every round's samples of each phase taken together: p50s
	// of the pooled latencies, turns ÷ time summed over the rounds.
	Pooled struct {
		Bae    roundPhase `json:"bae_go"`
		Floor  roundPhase `json:"floor"`
		Alone  roundPhase `json:"temporal_alone"`
		Figure float64    `json:"figure"`
	} `json:"pooled"`
}

func summariseRounds(rounds []roundResult, paced bool) *roundsReport {
	rr := &roundsReport{Figure: "capacity_vs_temporal_alone", Rounds: rounds}
	if paced {
		rr.Figure = "own_share_p50_ms"
	}
	figs := make([]float64, 0, len(rounds))
	var bae, floor, alone []roundPhase
	for _, r := range rounds {
		figs = append(figs, r.Figure)
		bae, floor, alone = append(bae, r.Bae), append(floor, r.Floor), append(alone, r.Alone)
	}
	rr.Median, rr.Min, rr.Max = median(figs), slices.Min(figs), slices.Max(figs)
	p := &rr.Pooled
	p.Bae, p.Floor, p.Alone = poolPhases(bae), poolPhases(floor), poolPhases(alone)
	p.Figure = roundFigure(paced, p.Bae, p.Floor, p.Alone)
	return rr
}

// poolPhases is one phase over all rounds: its turns over its total time,
// and the distribution of all its samples.
func poolPhases(ps []roundPhase) roundPhase {
	var completed, errors int
	var elapsed float64
	var samples []time.Duration
	for _, p := range ps {
		completed += p.Completed
		errors += p.Errors
		elapsed += p.ElapsedS
		samples = append(samples, p.samples...)
	}
	return newRoundPhase(completed, errors, elapsed, samples)
}

// median of xs (the mean of the middle two when even); xs is not modified.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// cleanUp ends what the round left running: its bae-go sessions (closed,
// so their workflows end) and Temporal alone's workflows. Left running,
// each round's would add to the next rounds' goroutines, heap and
// Temporal's caches, a drift of the bench's own making. The floor's
// database is dropped at the end of its phase.
func (r *roundResult) cleanUp(ctx context.Context, log *slog.Logger, a *api, tc client.Client, par int) {
	sem := make(chan struct{}, par)
	var failed atomic.Int64
	var wg sync.WaitGroup
	for _, s := range r.sessions {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := a.closeSession(ctx, s); err != nil {
				failed.Add(1)
				log.Warn("close a round's session", "round", r.Round, "err", err)
			}
		})
	}
	wg.Wait()
	if r.alone.Sessions > 0 {
		if err := temporalfloor.End(ctx, tc, r.alone); err != nil {
			log.Warn("end a round's Temporal-alone workflows", "round", r.Round, "err", err)
		}
	}
	r.sessions, r.alone = nil, temporalfloor.Load{}
}

// runRounds runs rounds 2 to o.rounds after the first (measured by run as
// a single run is) and sums them up. A round that fails ends the rounds:
// those before it are reported.
func runRounds(ctx context.Context, log *slog.Logger, o options, a *api, st *stack, pg *pgSampler, clientKey string, first roundResult) *roundsReport {
	rounds := []roundResult{first}
	for i := 1; i < o.rounds && ctx.Err() == nil; i++ {
		rounds[i-1].cleanUp(ctx, log, a, st.Temporal, o.idleConcurrency)
		r, err := runRound(ctx, log, o, a, st, pg, clientKey, i)
		if err != nil {
			log.Warn("round failed; the rounds before it are reported", "round", i+1, "err", err)
			break
		}
		rounds = append(rounds, r)
	}
	return summariseRounds(rounds, o.rate > 0)
}

// runRound is round i (from 0) after the first: bae-go on fresh sessions
// opened and warmed up as the first round's were (so each round measures
// the same turns of a session; the floor and Temporal alone start afresh
// in every phase anyway), then the three phases in roundOrder(i).
func runRound(ctx context.Context, log *slog.Logger, o options, a *api, st *stack, pg *pgSampler, clientKey string, i int) (roundResult, error) {
	sessions, err := openAll(ctx, a, clientKey, o.sessions, o.idleConcurrency)
	if err != nil {
		return roundResult{}, err
	}
	if n := warmUp(ctx, log, a, sessions, o); n > 0 {
		return roundResult{}, fmt.Errorf("%d warm-up turns failed", n)
	}
	o.cpuProfile = "" // the profile is the first round's
	r := newRound(i, loadAvg())
	r.sessions = sessions
	log.Info("round", "round", r.Round, "of", o.rounds, "order", strings.Join(r.Order, ", "), "load", r.LoadAvg)
	for _, k := range roundOrder(i) {
		switch k {
		case phaseBae:
			// The single run's report is the first round's: this round's
			// details go to a report of its own, and only the phase is kept.
			scratch := newReport(o)
			recs, err := measure(ctx, log, a, st, pg, sessions, o, scratch)
			if err != nil {
				return r, fmt.Errorf("bae-go: %w", err)
			}
			r.Bae = baePhase(recs, scratch)
		case phaseFloor:
			// As in the first round, a failure to read the phase's
			// counters keeps its turns.
			fl, err := runFloor(ctx, log, o, st)
			if fl == nil {
				return r, fmt.Errorf("floor: %w", err)
			}
			if err != nil {
				log.Warn("floor run failed", "round", r.Round, "err", err)
			}
			r.Floor = floorPhase(fl)
		case phaseAlone:
			ta, err := runTemporalAlone(ctx, log, o, st, pg)
			if ta == nil {
				return r, fmt.Errorf("Temporal alone: %w", err)
			}
			if err != nil {
				log.Warn("Temporal-alone run failed", "round", r.Round, "err", err)
			}
			r.Alone, r.alone = alonePhase(ta), ta.load
		}
	}
	r.end(ctx, o.rate > 0, pg, st.dbName)
	return r, nil
}

// writeRounds prints one line per round and the figure over the rounds:
// median, min and max of the rounds' figures, and the pooled figure.
func writeRounds(w io.Writer, rr *roundsReport, paced bool) {
	n := len(rr.Rounds)
	fmt.Fprintf(w, "\nrounds (%d; order B = bae-go, F = floor, T = Temporal alone; the report above is round 1's; load is the 1-minute average at the round's start)\n\n", n)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if paced {
		fmt.Fprintln(tw, "round\torder\tbae-go p50 ms\tfloor p50 ms\tTemporal alone p50 ms\town share p50 ms\tload\theap live\tgoroutines\tbae-go db")
	} else {
		fmt.Fprintln(tw, "round\torder\tbae-go turns/s\tfloor turns/s\tTemporal alone updates/s\tbae-go / Temporal alone\tload\theap live\tgoroutines\tbae-go db")
	}
	for _, r := range rr.Rounds {
		var order string
		for _, k := range roundOrder(r.Round - 1) {
			order += k.letter()
		}
		load, _, _ := strings.Cut(r.LoadAvg, " ")
		if paced {
			fmt.Fprintf(tw, "%d\t%s\t%.1f\t%.1f\t%.1f\t%+.1f\t%s\t%s\t%d\t%s\n", r.Round, order, r.Bae.Latency.P50, r.Floor.Latency.P50, r.Alone.Latency.P50, r.Figure,
				load, mib(r.HeapLive), r.Goroutines, mib(uint64(r.BaeDBBytes)))
		} else {
			fmt.Fprintf(tw, "%d\t%s\t%.1f\t%.1f\t%.1f\t%.2fx\t%s\t%s\t%d\t%s\n", r.Round, order, r.Bae.PerSecond, r.Floor.PerSecond, r.Alone.PerSecond, r.Figure,
				load, mib(r.HeapLive), r.Goroutines, mib(uint64(r.BaeDBBytes)))
		}
	}
	tw.Flush()
	p := rr.Pooled
	if paced {
		fmt.Fprintf(w, "own share p50 over %d rounds: median %+.1f ms, min %+.1f, max %+.1f\n", n, rr.Median, rr.Min, rr.Max)
		fmt.Fprintf(w, "pooled (p50 of all rounds' samples): bae-go %.1f ms (n=%d) - floor %.1f ms (n=%d) - Temporal alone %.1f ms (n=%d) = own share %+.1f ms\n",
			p.Bae.Latency.P50, p.Bae.Latency.N, p.Floor.Latency.P50, p.Floor.Latency.N, p.Alone.Latency.P50, p.Alone.Latency.N, p.Figure)
	} else {
		fmt.Fprintf(w, "capacity over %d rounds: median %.2fx Temporal alone, min %.2fx, max %.2fx\n", n, rr.Median, rr.Min, rr.Max)
		fmt.Fprintf(w, "pooled (all turns / all time): bae-go %d turns in %.1fs = %.1f turns/s; floor %.1f turns/s; Temporal alone %d updates in %.1fs = %.1f updates/s; bae-go / Temporal alone %.2fx\n",
			p.Bae.Completed, p.Bae.ElapsedS, p.Bae.PerSecond, p.Floor.PerSecond, p.Alone.Completed, p.Alone.ElapsedS, p.Alone.PerSecond, p.Figure)
	}
	if errs := p.Bae.Errors + p.Floor.Errors + p.Alone.Errors; errs > 0 {
		fmt.Fprintf(w, "errors over the rounds: bae-go %d, floor %d, Temporal alone %d\n", p.Bae.Errors, p.Floor.Errors, p.Alone.Errors)
	}
}
