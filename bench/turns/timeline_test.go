package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/bae-go/bae-go/bench/benchstack"
)

// Every bae-go segment Temporal alone's timeline is set against is one
// bae-go's timeline prints for a turn of one workflow task, and together
// they span the turn from its request to its terminal read once each: a
// renamed or added segment breaks the comparison here, not silently.
func TestAlonePhasesCoverLocalPhases(t *testing.T) {
	var mapped []string
	for _, p := range alonePhases {
		mapped = append(mapped, p.bae...)
	}
	var local []string
	for _, p := range localPhases {
		local = append(local, p.name)
	}
	if strings.Join(mapped, "|") != strings.Join(local, "|") {
		t.Fatalf("Temporal alone's segments map to %q, bae-go's timeline has %q", mapped, local)
	}
}

// The segment table sums the bae-go segments between the same milestones
// and prints the excess over Temporal alone.
func TestWriteAloneTimeline(t *testing.T) {
	var bae []phase
	for i, p := range localPhases {
		bae = append(bae, phase{Name: p.name, Dist: benchstack.Dist{P50: float64(i + 1), Mean: float64(i + 1)}})
	}
	tf := &temporalAlone{TimelineTurns: 3}
	for _, p := range alonePhases {
		tf.Timeline = append(tf.Timeline, phase{Name: p.name, Dist: benchstack.Dist{P50: 1, Mean: 1}})
	}
	var buf bytes.Buffer
	writeAloneTimeline(&buf, bae, tf)
	out := buf.String()
	// wft -> BeginTurn is bae-go's 4th segment (4 ms) against 1 ms.
	for _, want := range []string{"Temporal alone timeline ms (3 updates", "wft -> local activity", "+3.0", "total"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
	// The local activity's segment holds bae-go's 5th to 9th: 5+6+7+8+9.
	if !strings.Contains(out, "35.0") {
		t.Errorf("the provider segments are not summed (want 35.0):\n%s", out)
	}
}
