package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/store"
)

// TestQueueCapCountsOnlyQueuedTurns: the per-session cap counts the
// session's stored turns not yet begun; its running turn (begun, no
// result) and its finished ones are not queued. Both counts (the capped
// insert's and QueueRoom's) read the session's unfinished rows.
func TestQueueCapCountsOnlyQueuedTurns(t *testing.T) {
	st := open(t)
	ctx := context.Background()
	sess, _ := newSession(t, st)
	caps := store.Caps{QueuedTurnsPerSession: 2}
	msg := json.RawMessage(`{"role":"user","content":"hi"}`)
	put := func(turnID string) error {
		_, err := st.PutTurnInput(ctx, sess.ID, turnID, sess.ClientKeyID, msg, "", caps)
		return err
	}
	setCol := func(turnID, col string) {
		_, err := st.Pool.Exec(ctx, `UPDATE turn_inputs SET `+col+` = '{}' WHERE turn_id = $1`, turnID)
		require.NoError(t, err)
	}
	require.NoError(t, put("trn_done"))
	setCol("trn_done", "begin_result")
	setCol("trn_done", "result")
	require.NoError(t, put("trn_running"))
	setCol("trn_running", "begin_result")

	// One running, none queued: room for two.
	require.NoError(t, st.QueueRoom(ctx, caps, sess.ID, sess.ClientKeyID))
	require.NoError(t, put("trn_q1"))
	require.NoError(t, st.QueueRoom(ctx, caps, sess.ID, sess.ClientKeyID))
	require.NoError(t, put("trn_q2"))

	// Two queued: full, however the running turn is counted.
	var quota *store.QuotaError
	assert.True(t, errors.As(st.QueueRoom(ctx, caps, sess.ID, sess.ClientKeyID), &quota))
	assert.True(t, errors.As(put("trn_q3"), &quota))
}
