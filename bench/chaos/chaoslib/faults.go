package chaoslib

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"time"
)

// Fault kinds, in report order.
const (
	faultKill       = "replica-sigkill"      // one replica SIGKILLed, restarted
	faultTerm       = "replica-sigterm"      // one replica stopped gracefully, restarted
	faultRolling    = "rolling-restart"      // every replica SIGTERMed and restarted in turn
	faultKillAll    = "all-replicas-sigkill" // every replica SIGKILLed at once
	faultTemporal   = "temporal-sigkill"     // the Temporal server SIGKILLed, restarted
	faultPGRestart  = "pg-fast-restart"      // every PostgreSQL connection severed, refused ~1-3 s
	faultPGOutage   = "pg-outage"            // PostgreSQL unreachable for OutageLength
	faultProvError  = "provider-error"       // the provider answers errors (529, 500)
	faultProvStall  = "provider-stall"       // the provider stalls mid-stream
	faultProvDrop   = "provider-drop"        // the provider drops the connection mid-stream
	faultSlowClient = "slow-client"          // an observer stops reading for a while
)

// FaultKinds lists every fault, in report order.
var FaultKinds = []string{faultKill, faultTerm, faultRolling, faultKillAll, faultTemporal, faultPGRestart, faultPGOutage,
	faultProvError, faultProvStall, faultProvDrop, faultSlowClient}

// processFaults are the faults that take a process or the database away:
// MCP calls may be repeated (at least once) across them.
var processFaults = map[string]bool{faultKill: true, faultTerm: true, faultRolling: true, faultKillAll: true,
	faultTemporal: true, faultPGRestart: true, faultPGOutage: true}

// faultEvent is one injected fault.
type faultEvent struct {
	Kind       string
	Start, End time.Time
	Detail     string
	Err        string
}

func (e faultEvent) String() string {
	s := fmt.Sprintf("%s at %s (%s)", e.Kind, e.Start.UTC().Format("15:04:05.000"), e.End.Sub(e.Start).Round(time.Millisecond))
	if e.Detail != "" {
		s += " " + e.Detail
	}
	return s
}

// faulter injects faults on a seeded random schedule until stop.
type faulter struct {
	run    *run
	r      *rand.Rand
	mu     sync.Mutex
	events []faultEvent
}

func (f *faulter) snapshot() []faultEvent {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]faultEvent(nil), f.events...)
}

// pick chooses the next fault: the long outage and the heavy faults are
// rarer; every kind comes up in a run of a few dozen faults.
func (f *faulter) pick(n int) string {
	// The first faults go through every kind once, in a seeded order, so
	// a short run sees each.
	if n < len(FaultKinds) {
		return f.run.faultOrder[n]
	}
	weights := map[string]int{faultKill: 14, faultTerm: 10, faultRolling: 4, faultKillAll: 4, faultTemporal: 5,
		faultPGRestart: 10, faultPGOutage: 2, faultProvError: 14, faultProvStall: 12, faultProvDrop: 14, faultSlowClient: 11}
	total := 0
	for _, k := range FaultKinds {
		total += weights[k]
	}
	x := f.r.IntN(total)
	for _, k := range FaultKinds {
		if x < weights[k] {
			return k
		}
		x -= weights[k]
	}
	return faultKill
}

func (f *faulter) loop(ctx context.Context, stop <-chan struct{}) {
	for n := 0; ; n++ {
		gap := time.Duration(f.r.ExpFloat64() * float64(f.run.o.FaultEvery))
		gap = min(max(gap, f.run.o.FaultEvery/4), 4*f.run.o.FaultEvery)
		select {
		case <-stop:
			return
		case <-time.After(gap):
		}
		kind := f.pick(n)
		e := faultEvent{Kind: kind, Start: time.Now()}
		if processFaults[kind] {
			f.run.calm.Store(0)
		}
		if err := f.inject(ctx, kind, &e); err != nil {
			e.Err = err.Error()
			f.run.o.Log.Warn("fault", "kind", kind, "err", err)
		}
		e.End = time.Now()
		if processFaults[kind] {
			f.run.calm.Store(e.End.UnixNano())
		}
		f.run.o.Log.Info("fault", "kind", kind, "took", e.End.Sub(e.Start).Round(time.Millisecond), "detail", e.Detail)
		f.mu.Lock()
		f.events = append(f.events, e)
		f.mu.Unlock()
	}
}

func (f *faulter) inject(ctx context.Context, kind string, e *faultEvent) error {
	t := f.run.topo
	reps := t.replicas
	switch kind {
	case faultKill, faultTerm:
		r := reps[f.r.IntN(len(reps))]
		sig := syscall.SIGKILL
		if kind == faultTerm {
			sig = syscall.SIGTERM
		}
		e.Detail = "replica " + r.name
		r.stop(sig)
		// A supervisor restarts it after a moment.
		time.Sleep(time.Duration(f.r.IntN(2000)) * time.Millisecond)
		return r.start(ctx)
	case faultRolling:
		for _, r := range reps {
			r.stop(syscall.SIGTERM)
			if err := r.start(ctx); err != nil {
				return err
			}
		}
	case faultKillAll:
		var wg sync.WaitGroup
		for _, r := range reps {
			wg.Add(1)
			go func() { defer wg.Done(); r.stop(syscall.SIGKILL) }()
		}
		wg.Wait()
		time.Sleep(time.Duration(f.r.IntN(3000)) * time.Millisecond)
		for _, r := range reps {
			if err := r.start(ctx); err != nil {
				return err
			}
		}
	case faultTemporal:
		return t.killTemporal(ctx)
	case faultPGRestart:
		d := time.Duration(1000+f.r.IntN(2000)) * time.Millisecond
		e.Detail = d.String()
		t.proxy.Down()
		time.Sleep(d)
		t.proxy.Up()
	case faultPGOutage:
		e.Detail = f.run.o.OutageLength.String()
		t.proxy.Down()
		time.Sleep(f.run.o.OutageLength)
		t.proxy.Up()
	case faultProvError, faultProvStall, faultProvDrop:
		n := 1 + f.r.IntN(4)
		e.Detail = fmt.Sprintf("next %d requests", n)
		f.run.pf.arm(kind, n)
		if kind == faultProvStall {
			// Stalled streams resume after a while (a slow upstream), or
			// the server's own timeout ends them first.
			d := time.Duration(5+f.r.IntN(20)) * time.Second
			go func() {
				time.Sleep(d)
				f.run.fake.Release()
			}()
		}
	case faultSlowClient:
		s := f.run.sessions[f.r.IntN(len(f.run.sessions))]
		o := s.observers[f.r.IntN(len(s.observers))]
		d := time.Duration(10+f.r.IntN(50)) * time.Second
		e.Detail = fmt.Sprintf("session %d observer %d stops reading for %s", s.n, o.n, d)
		o.stall(d)
	}
	return nil
}

// awaitAllUp restarts any replica left down and waits for the Temporal
// server, before the checks.
func (t *topology) awaitAllUp(ctx context.Context) error {
	t.proxy.Up()
	t.tmu.Lock()
	done := t.temporalDone
	t.tmu.Unlock()
	select {
	case <-done:
		if err := t.startTemporal(ctx); err != nil {
			return err
		}
	default:
	}
	for _, r := range t.replicas {
		if !r.isUp() {
			if err := r.start(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}
