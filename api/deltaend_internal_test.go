package api

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/bae-go/bae-go/internal/lib/live"
)

// TestDeltaTrackingFindsGaps: a relay knows how far each run of its turn
// reached it without a gap, counting what a resuming client said it had
// seen; a hole, or a run first seen mid-way, is never whole again.
func TestDeltaTrackingFindsGaps(t *testing.T) {
	const run = 2 * live.RunSpan
	x := func(seq int64) live.Delta { return live.Delta{TurnID: "trn_x", Seq: seq} }

	d := &deltaStream{turnID: "trn_x"}
	for _, s := range []int64{run + 1, run + 2, run + 3, run + 3} {
		d.track(x(s))
	}
	d.track(live.Delta{TurnID: "trn_other", Seq: run + 9})
	assert.Equal(t, int64(run+3), d.reached(d.turn("trn_x", false), 2), "contiguous from the run's first, a repeat ignored, another turn's ignored")
	d.track(x(run + 5))
	assert.Equal(t, int64(-1), d.reached(d.turn("trn_x", false), 2), "a hole")
	d.track(x(run + 4))
	assert.Equal(t, int64(-1), d.reached(d.turn("trn_x", false), 2), "never whole again")
	assert.Equal(t, int64(run+5), d.turn("trn_x", false).top)
	assert.Nil(t, d.turn("trn_other", false), "a relay follows its own turn only")

	late := &deltaStream{turnID: "trn_x"}
	late.track(x(run + 7))
	assert.Equal(t, int64(-1), late.reached(late.turn("trn_x", false), 2), "joined mid-run")

	resumed := &deltaStream{turnID: "trn_x", seenTurn: "trn_x", seenSeq: run + 6}
	tx := resumed.turn("trn_x", true)
	assert.Equal(t, int64(run+6), resumed.reached(tx, 2), "the client had these")
	assert.Equal(t, int64(run+6), resumed.reached(tx, 1), "and every earlier run")
	resumed.track(x(run + 7))
	assert.Equal(t, int64(run+7), resumed.reached(tx, 2))
	assert.Equal(t, int64(3*live.RunSpan), resumed.reached(tx, 3), "a later run starts from nothing")

	// A subscribe stream follows every turn, each on its own, and keeps
	// the last keptTurns of them.
	sub := &deltaStream{}
	sub.track(live.Delta{TurnID: "trn_a", Seq: run + 1})
	sub.track(live.Delta{TurnID: "trn_b", Seq: run + 4})
	assert.Equal(t, int64(run+1), sub.reached(sub.turn("trn_a", false), 2))
	assert.Equal(t, int64(-1), sub.reached(sub.turn("trn_b", false), 2), "joined trn_b mid-run")
	for i := range keptTurns {
		sub.track(live.Delta{TurnID: fmt.Sprint("trn_", i), Seq: run + 1})
	}
	assert.Nil(t, sub.turn("trn_a", false), "the oldest turns are forgotten")
	assert.Len(t, sub.turns, keptTurns)
}

// TestLaterRunUnsettlesTheAnswer: a stream that had every delta of the run
// that answered, and then a later run's (a duplicate run of the live
// attempt, which streams and then answers with what the first stored), is
// not settled whole: after that run's superseded marker a client renders
// its text, not the answer's, so the relay must send a reset.
func TestLaterRunUnsettlesTheAnswer(t *testing.T) {
	const run = live.RunSpan
	d := &deltaStream{turnID: "trn_x"}
	for s := int64(1); s <= 7; s++ {
		d.track(live.Delta{TurnID: "trn_x", Seq: run + s})
	}
	done, complete := d.settledAt("trn_x", run+7)
	assert.True(t, done)
	assert.True(t, complete, "run 1 whole")

	d.track(live.Delta{TurnID: "trn_x", Seq: 2*run + 1, Type: live.DeltaSuperseded})
	d.track(live.Delta{TurnID: "trn_x", Seq: 2*run + 2, Type: "text_delta"})
	done, complete = d.settledAt("trn_x", run+7)
	assert.True(t, done, "nothing more to wait for")
	assert.False(t, complete, "a later run's deltas came after the answer's: reset")

	gap := &deltaStream{turnID: "trn_x"}
	gap.track(live.Delta{TurnID: "trn_x", Seq: run + 1})
	done, complete = gap.settledAt("trn_x", run+3)
	assert.False(t, done, "still on their way")
	assert.False(t, complete)
}
