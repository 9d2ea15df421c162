package activities

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCallSlots: a stop reaches only the named turn's attempts, stops a
// call in flight and one that has not started yet, and does nothing once
// the attempt ended (the session's next turn has another id); a stop
// naming the turn with another session reaches nothing.
func TestCallSlots(t *testing.T) {
	var c callSlots
	ctx := context.Background()

	inFlight, release := c.open("ses_1", "trn_a")
	other, releaseOther := c.open("ses_1", "trn_b")
	callCtx, end := inFlight.call(ctx)
	otherCtx, endOther := other.call(ctx)
	assert.Equal(t, 1, c.stop("ses_1", "trn_a"))
	require.Error(t, callCtx.Err())
	assert.True(t, stoppedCall(callCtx))
	assert.NoError(t, otherCtx.Err(), "another turn's call goes on")
	assert.Zero(t, c.stop("ses_2", "trn_b"), "a turn named with another session is no turn")
	assert.NoError(t, otherCtx.Err(), "a stop naming another session reaches nothing")
	end()
	endOther()
	release()
	releaseOther()

	// Stopped while it begins: the call starts cancelled.
	early, release := c.open("ses_1", "trn_c")
	assert.Equal(t, 1, c.stop("ses_1", "trn_c"))
	callCtx, end = early.call(ctx)
	assert.True(t, stoppedCall(callCtx))
	end()
	release()

	// After the attempt ended, and for a turn never seen: nothing.
	assert.Equal(t, 0, c.stop("ses_1", "trn_a"))
	assert.Equal(t, 0, c.stop("ses_1", "trn_z"))
	later, release := c.open("ses_1", "trn_a2")
	callCtx, end = later.call(ctx)
	assert.NoError(t, callCtx.Err())
	end()
	release()
	assert.Empty(t, c.turns, "released slots are dropped")

	// A nil slot (an attempt that is not Stoppable) never stops.
	var none *callSlot
	callCtx, end = none.call(ctx)
	assert.Equal(t, ctx, callCtx)
	end()
}
