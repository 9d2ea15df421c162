package chaoslib

import (
	"fmt"
	"io"
	"sort"
	"time"
)

// Report is what a campaign found.
type Report struct {
	Options  Options
	RunID    string
	WorkDir  string
	Database string

	Setup, Drive, Wall time.Duration
	Faults             []faultEvent
	ProviderFaults     map[string]int // requests the provider misbehaved on, by fault
	Turns              int64          // driver actions (a tool round trip is one)
	Interrupts         int64
	RefusedBusy        int64
	RefusedQuota       int64
	BudgetResets       int64
	Input              *Input
	Violations         []Violation
	// Unexpected lists replica exits nobody asked for (restarted, and
	// counted apart: a crash of its own is a finding, not a fault).
	Unexpected []string
	// Resumes and Resets are the observers' reconnects that asked for
	// deltas after a seq, and the reset deltas they got.
	Resumes, Resets int
	// StreamEnds counts observer streams that ended early, by reason.
	StreamEnds map[string]int
}

// OK reports a campaign with no violation.
func (r *Report) OK() bool { return len(r.Violations) == 0 }

// ViolationCounts is each invariant's count of violations (every
// invariant present, zero or not).
func (r *Report) ViolationCounts() map[string]int {
	m := map[string]int{}
	for _, inv := range Invariants {
		m[inv] = 0
	}
	for _, v := range r.Violations {
		m[v.Invariant]++
	}
	return m
}

// FaultCounts is the faults injected, by kind (every kind present).
func (r *Report) FaultCounts() map[string]int {
	m := map[string]int{}
	for _, k := range FaultKinds {
		m[k] = 0
	}
	for _, f := range r.Faults {
		m[f.Kind]++
	}
	return m
}

// Print writes the report: the command to reproduce it, faults by kind,
// turns, each invariant's violations, and every violation with its
// session and events.
func (r *Report) Print(w io.Writer) {
	o := r.Options
	fmt.Fprintf(w, "chaos campaign %s: seed %d, %s of faults and turns, %d sessions × %d drivers + %d observers, %d replicas\n",
		r.RunID, o.Seed, o.Duration, o.Sessions, o.Drivers, o.Observers, o.Replicas)
	fmt.Fprintf(w, "reproduce: go run ./bench/chaos -seed %d -duration %s -sessions %d -drivers %d -observers %d -replicas %d -sandboxes %d -interrupt-any=%v\n",
		o.Seed, o.Duration, o.Sessions, o.Drivers, o.Observers, o.Replicas, o.Sandboxes, o.InterruptAny)
	fmt.Fprintf(w, "setup %s, drive %s, wall %s\n", r.Setup.Round(time.Second), r.Drive.Round(time.Second), r.Wall.Round(time.Second))
	fc := r.FaultCounts()
	failed := 0
	for _, f := range r.Faults {
		if f.Err != "" {
			failed++
		}
	}
	fmt.Fprintf(w, "\nfaults injected: %d (%d could not be completed)\n", len(r.Faults), failed)
	for _, k := range FaultKinds {
		fmt.Fprintf(w, "  %-22s %5d\n", k, fc[k])
	}
	if len(r.ProviderFaults) > 0 {
		ks := make([]string, 0, len(r.ProviderFaults))
		for k := range r.ProviderFaults {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		fmt.Fprint(w, "  provider requests hit:")
		for _, k := range ks {
			fmt.Fprintf(w, " %s %d", k, r.ProviderFaults[k])
		}
		fmt.Fprintln(w)
	}
	if r.Input != nil {
		outcomes := map[string]int{}
		kinds := map[string]int{}
		events, resumes, resets := 0, 0, 0
		for _, s := range r.Input.Sessions {
			events += len(s.Events)
			for _, c := range s.Calls {
				outcomes[c.Outcome]++
				kinds[c.Kind]++
			}
		}
		fmt.Fprintf(w, "\nturns: %d driver actions, %d messages sent, %d events logged, %d interrupts, %d busy refusals, %d budget refusals (%d budget resets)\n",
			r.Turns, sum(outcomes), events, r.Interrupts, r.RefusedBusy, r.RefusedQuota, r.BudgetResets)
		fmt.Fprintf(w, "  by kind:    %s\n", fmtMap(kinds))
		fmt.Fprintf(w, "  by outcome: %s\n", fmtMap(outcomes))
		fmt.Fprintf(w, "  observers: %d delta resumes, %d resets\n", r.Resumes, r.Resets)
		fmt.Fprintf(w, "  observer streams ended early: %s\n", fmtMap(r.StreamEnds))
		bases, peaks := 0, 0
		for _, p := range r.Input.Profiles {
			if p.Base != nil {
				bases++
			}
			if p.Peak != nil {
				peaks++
			}
		}
		fmt.Fprintf(w, "  replica runtime scrapes: %d; goroutine profiles: %d after warm-up, %d of growing replicas\n", len(r.Input.Samples), bases, peaks)
		_, _ = resumes, resets
	}
	fmt.Fprintf(w, "\nreplica exits nobody asked for: %d\n", len(r.Unexpected))
	for _, u := range r.Unexpected {
		fmt.Fprintln(w, "  "+u)
	}
	vc := r.ViolationCounts()
	fmt.Fprintf(w, "\ninvariants (violations):\n")
	for _, inv := range Invariants {
		fmt.Fprintf(w, "  %-16s %5d\n", inv, vc[inv])
	}
	if o.Break != "" {
		fmt.Fprintf(w, "  (-break %s: that invariant's input was corrupted on purpose)\n", o.Break)
	}
	// Up to 20 of each invariant, so that a flood of one kind never hides
	// another.
	shown, hidden := map[string]int{}, 0
	for _, v := range r.Violations {
		if shown[v.Invariant] == 20 {
			hidden++
			continue
		}
		shown[v.Invariant]++
		fmt.Fprintln(w, "  "+v.String())
	}
	if hidden > 0 {
		fmt.Fprintf(w, "… and %d more (past 20 of their invariant)\n", hidden)
	}
	if !r.OK() {
		fmt.Fprintf(w, "\nwork dir (logs) %s and database %s kept\n", r.WorkDir, r.Database)
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func fmtMap(m map[string]int) string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	s := ""
	for _, k := range ks {
		s += fmt.Sprintf("%s %d  ", k, m[k])
	}
	return s
}
