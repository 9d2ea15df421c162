package store_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/store"
)

// TestTailFence: a fence with no counter (a tool call's, a compaction's)
// holds while its message is the conversation's last, and no longer once
// a message follows it or a removal moves the counter past it; a
// transaction it fails stores nothing.
func TestTailFence(t *testing.T) {
	st := open(t)
	ctx := context.Background()
	sess, _ := newSession(t, st)
	appendMsg := func(key string) {
		require.NoError(t, st.Tx(ctx, func(tx *store.Tx) error {
			tx.AppendMessage(sess.ID, key, "user", json.RawMessage(`"x"`))
			return nil
		}))
	}
	fenced := func(tail, key string) error {
		return st.Tx(ctx, func(tx *store.Tx) error {
			tx.Fence(store.AttemptFence{SessionID: sess.ID, TailKey: tail})
			_, err := tx.AppendEvents(ctx, sess.ID, store.NewEvent{IdemKey: key, Payload: events.ClientMessage{Role: "user", Content: json.RawMessage(`"x"`)}})
			return err
		})
	}
	stored := func(key string) bool {
		_, err := st.EventByIdem(ctx, sess.ID, key)
		return err == nil
	}

	appendMsg("t/i0/asst")
	require.NoError(t, fenced("t/i0/asst", "e1"))
	assert.True(t, stored("e1"))
	require.NoError(t, st.Tx(ctx, func(tx *store.Tx) error {
		tx.Fence(store.AttemptFence{SessionID: sess.ID, TailKey: "t/i0/asst"})
		return nil
	}), "a transaction with only the fence checks it")

	appendMsg("later/user")
	assert.ErrorIs(t, fenced("t/i0/asst", "e2"), store.ErrTurnSuperseded)
	assert.False(t, stored("e2"), "a failed fence stores nothing")
	assert.ErrorIs(t, st.Tx(ctx, func(tx *store.Tx) error {
		tx.Fence(store.AttemptFence{SessionID: sess.ID, TailKey: "t/i0/asst"})
		return nil
	}), store.ErrTurnSuperseded)
	require.NoError(t, fenced("later/user", "e3"))

	// A removal takes the next counter value: the last message is no
	// longer the end of the conversation.
	_, err := st.Pool.Exec(ctx, `UPDATE sessions SET last_message_seq = last_message_seq + 1 WHERE id = $1`, sess.ID)
	require.NoError(t, err)
	assert.ErrorIs(t, fenced("later/user", "e4"), store.ErrTurnSuperseded)
	assert.False(t, stored("e4"))
}
