package main

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The processes outside the bench (replicas, an external Temporal server)
// get their own share of a phase's CPU, and it is not counted as "other".
func TestCPUBetweenSplitsProcesses(t *testing.T) {
	t0 := time.Unix(0, 0)
	a := cpuMark{wall: t0, machine: machineCPU{busy: 0, total: 1000, ok: true},
		procs: map[string]map[int]time.Duration{"baesrv": {1: time.Second, 2: 0}, "temporal": {3: 0}}}
	b := cpuMark{wall: t0.Add(10 * time.Second), machine: machineCPU{busy: 1000, total: 2000, ok: true},
		self: 2 * time.Second,
		procs: map[string]map[int]time.Duration{"baesrv": {1: 3 * time.Second, 2: 2 * time.Second}, "temporal": {3: 5 * time.Second},
			// A backend that a pool opened during the phase counts from zero.
			"postgres temporal": {4: time.Second}}}
	st := cpuBetween(a, b)
	assert.InDelta(t, 0.1, st.Procs["postgres temporal"], 1e-9)
	assert.InDelta(t, 0.4, st.Procs["baesrv"], 1e-9)
	assert.InDelta(t, 0.5, st.Procs["temporal"], 1e-9)
	assert.InDelta(t, 0.2, st.BenchProcess, 1e-9)
	// Machine busy: all cores for the phase; other is what no role used.
	assert.InDelta(t, float64(st.Cores)-1.2, st.Other, 1e-9)
	st.perTurn(10, 100)
	assert.InDelta(t, 40, st.ProcsMsPerTurn["baesrv"], 1e-9)
	assert.InDelta(t, 50, st.ProcsMsPerTurn["temporal"], 1e-9)
	assert.InDelta(t, 20, st.BenchMsPerTurn, 1e-9)
}

// Growth while idle sessions open is split between bae-go's database and
// Temporal's, each against its own size before.
func TestIdleGrowth(t *testing.T) {
	ir := &idleReport{}
	ir.measureGrowth(map[string]int64{"bae": 300, "tmp": 50, "vis": 7}, map[string]int64{"bae": 100, "tmp": 40}, "bae", 99)
	assert.Equal(t, int64(200), ir.BaeDBAdded)
	assert.Equal(t, map[string]int64{"tmp": 10}, ir.TemporalDBAdded)
	assert.Equal(t, int64(99), ir.ReplicaRSSAdded)
}

func TestProcRSS(t *testing.T) {
	rss := procRSS(os.Getpid())
	require.Positive(t, rss)
	assert.Zero(t, procRSS(-1))
}
