package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Round 1 keeps the single run's order and every other round reverses it:
// over each pair of rounds every phase has the same mean position, so a
// steady drift of the machine's speed weighs on the three alike.
func TestRoundOrderInterleaves(t *testing.T) {
	assert.Equal(t, [3]phaseKind{phaseBae, phaseFloor, phaseAlone}, roundOrder(0))
	assert.Equal(t, [3]phaseKind{phaseAlone, phaseFloor, phaseBae}, roundOrder(1))
	assert.Equal(t, roundOrder(0), roundOrder(2))
	assert.Equal(t, roundOrder(1), roundOrder(5))

	pos := map[phaseKind]int{}
	for i := range 4 {
		for j, k := range roundOrder(i) {
			pos[k] += 3*i + j // position in the whole run
		}
	}
	assert.Equal(t, pos[phaseBae], pos[phaseFloor])
	assert.Equal(t, pos[phaseFloor], pos[phaseAlone])

	r := newRound(1, "0.50 0.40 0.30")
	assert.Equal(t, 2, r.Round)
	assert.Equal(t, []string{"Temporal alone", "floor", "bae-go"}, r.Order)
}

func ms(vs ...float64) []time.Duration {
	out := make([]time.Duration, len(vs))
	for i, v := range vs {
		out[i] = time.Duration(v * float64(time.Millisecond))
	}
	return out
}

func closedRound(i, baeTurns int, baeS float64, aloneTurns int, aloneS float64) roundResult {
	r := newRound(i, "1.25 1.00 0.75")
	r.Bae, r.Floor, r.Alone = newRoundPhase(baeTurns, 0, baeS, nil), newRoundPhase(400, 0, 1, nil), newRoundPhase(aloneTurns, 0, aloneS, nil)
	r.Figure = roundFigure(false, r.Bae, r.Floor, r.Alone)
	return r
}

// Closed loop: each round's figure is bae-go's turns/s ÷ Temporal alone's
// updates/s; pooled, each phase's turns over its time summed over the
// rounds (not the mean of the rounds' ratios, 0.58x here).
func TestRoundsCapacity(t *testing.T) {
	rounds := []roundResult{
		closedRound(0, 100, 1, 200, 1), // 0.50x
		closedRound(1, 100, 2, 200, 1), // 0.25x
		closedRound(2, 100, 1, 100, 1), // 1.00x
	}
	rr := summariseRounds(rounds, false)
	assert.Equal(t, "capacity_vs_temporal_alone", rr.Figure)
	assert.InDelta(t, 0.5, rr.Median, 1e-9)
	assert.InDelta(t, 0.25, rr.Min, 1e-9)
	assert.InDelta(t, 1.0, rr.Max, 1e-9)
	assert.Equal(t, 300, rr.Pooled.Bae.Completed)
	assert.InDelta(t, 75, rr.Pooled.Bae.PerSecond, 1e-9)
	assert.InDelta(t, 500.0/3, rr.Pooled.Alone.PerSecond, 1e-9)
	assert.InDelta(t, 0.45, rr.Pooled.Figure, 1e-9)

	var out bytes.Buffer
	writeRounds(&out, rr, false)
	s := out.String()
	assert.Regexp(t, `(?m)^2\s+TFB\s+50.0\s+400.0\s+200.0\s+0.25x\s+1.25\s`, s)
	assert.Contains(t, s, "median 0.50x Temporal alone, min 0.25x, max 1.00x")
	assert.Contains(t, s, "bae-go / Temporal alone 0.45x")
}

func pacedRound(bae, floor, alone []time.Duration) roundResult {
	r := roundResult{
		Bae:   newRoundPhase(len(bae), 0, 1, bae),
		Floor: newRoundPhase(len(floor), 0, 1, floor),
		Alone: newRoundPhase(len(alone), 0, 1, alone),
	}
	r.Figure = roundFigure(true, r.Bae, r.Floor, r.Alone)
	return r
}

// Paced: each round's own share is bae-go's server-added p50 less the
// floor's and Temporal alone's; the median of an even count is the mean of
// the middle two; pooled, the p50 of every round's samples of each phase
// (4 ms here, where the rounds' median and mean are 3).
func TestRoundsOwnShare(t *testing.T) {
	rounds := []roundResult{
		pacedRound(ms(10, 10, 10), ms(3), ms(6)), // 1
		pacedRound(ms(11, 11, 11), ms(3), ms(6)), // 2
		pacedRound(ms(12), ms(2, 2, 2), ms(6)),   // 4
		pacedRound(ms(13), ms(3), ms(5, 5, 5)),   // 5
	}
	rr := summariseRounds(rounds, true)
	assert.Equal(t, "own_share_p50_ms", rr.Figure)
	assert.InDelta(t, 3, rr.Median, 1e-9)
	assert.InDelta(t, 1, rr.Min, 1e-9)
	assert.InDelta(t, 5, rr.Max, 1e-9)
	p := rr.Pooled
	assert.Equal(t, 8, p.Bae.Latency.N)
	assert.InDelta(t, 11, p.Bae.Latency.P50, 1e-9)
	assert.InDelta(t, 2, p.Floor.Latency.P50, 1e-9)
	assert.InDelta(t, 5, p.Alone.Latency.P50, 1e-9)
	assert.InDelta(t, 4, p.Figure, 1e-9)

	var out bytes.Buffer
	writeRounds(&out, rr, true)
	assert.Contains(t, out.String(), "median +3.0 ms, min +1.0, max +5.0")
	assert.Contains(t, out.String(), "= own share +4.0 ms")

	r := newReport(options{sessions: 50, turns: 20, rounds: 4, rate: 40})
	r.Rounds = rr
	var js bytes.Buffer
	require.NoError(t, writeJSON(&js, r))
	assert.Contains(t, js.String(), `"figure": "own_share_p50_ms"`)
	assert.Contains(t, js.String(), `"rounds": 4`)
	assert.Regexp(t, `"pooled": \{\s+"bae_go": \{\s+"completed": 8,`, js.String())
}

// Without -rounds the report is the single run's, unchanged: no rounds in
// its JSON, nothing about rounds in its header.
func TestSingleRunReportUnchanged(t *testing.T) {
	r := newReport(options{sessions: 50, turns: 20, rounds: 1})
	var js, table bytes.Buffer
	require.NoError(t, writeJSON(&js, r))
	assert.NotContains(t, js.String(), `"rounds"`)
	writeTable(&table, r)
	assert.NotContains(t, table.String(), "round")

	r = newReport(options{sessions: 50, turns: 20, rounds: 3})
	table.Reset()
	writeTable(&table, r)
	header, _, _ := strings.Cut(strings.TrimLeft(table.String(), "\n"), "\n")
	assert.Contains(t, header, "(round 1 of 3 below; every round at the end)")
}
