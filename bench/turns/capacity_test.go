package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A closed loop with Temporal alone prints capacity against it and the
// floor, and CPU per turn by process, every database's backends apart;
// the 0.5x target is judged on the same run's figures.
func TestClosedLoopCapacityAgainstTemporalAlone(t *testing.T) {
	r := &report{}
	r.Turns.Completed, r.Turns.PerSecond = 1000, 100
	r.CPU = CPUStats{BenchMsPerTurn: 1, PGMsPerTurn: 3,
		ProcsMsPerTurn: map[string]float64{"baesrv": 5, "temporal": 8, "postgres temporal_x": 2, "postgres temporal_x_visibility": 1}}
	alone := &temporalAlone{Completed: 1000, PerSecond: 200,
		CPU: CPUStats{BenchMsPerTurn: 2, ProcsMsPerTurn: map[string]float64{"baesrv": 0.5, "temporal": 6, "postgres temporal_x": 1.5}}}
	r.Floor = &floorReport{Completed: 1000, PerSecond: 400, CPU: CPUStats{BenchMsPerTurn: 1.5, PGMsPerTurn: 1}, Temporal: alone}

	var out bytes.Buffer
	writeTemporalAlone(&out, r, r.Floor, alone)
	s := out.String()
	assert.Contains(t, s, "bae-go 100.0 turns/s = 0.50x Temporal alone (200.0 updates/s), 0.25x the floor (400.0 turns/s)")
	assert.Regexp(t, `postgres temporal_x_visibility\s+0.00\s+0.00\s+1.00\s+\+1.00\n`, s)
	assert.Regexp(t, `temporal\s+0.00\s+6.00\s+8.00\s+\+2.00\n`, s)
	assert.Regexp(t, `all\s+2.50\s+10.00\s+20.00\s+\+10.00\n`, s)

	r.evaluate()
	var verdict string
	for _, x := range r.Targets {
		if x.Name == "vs Temporal alone: capacity" {
			verdict = x.Verdict
		}
	}
	assert.Equal(t, "PASS", verdict)

	// Paced, the latencies are what counts: no capacity line.
	r.Config.Rate = 40
	out.Reset()
	writeTemporalAlone(&out, r, r.Floor, alone)
	assert.NotContains(t, out.String(), "capacity")
}

// With -replicas the store's round-trip counters are in the replicas: the
// floor table says so instead of printing bae-go's as zero.
func TestReplicasRoundTripsNotCounted(t *testing.T) {
	r := &report{}
	r.Turns.PerSecond = 50
	r.PGWork = PGWork{XactsPerTurn: 4.1, CallsUncounted: true}
	f := &floorReport{Completed: 10, PerSecond: 500, PGWork: PGWork{XactsPerTurn: 5, RoundTripsPerTurn: 5, StatementsPerTurn: 5}}
	var out bytes.Buffer
	writeFloor(&out, r, f)
	assert.Regexp(t, `round trips per turn\s+5.0\s+not counted \(in the replicas\)`, out.String())
	assert.NotRegexp(t, `round trips per turn\s+5.0\s+0.0`, out.String())
}
