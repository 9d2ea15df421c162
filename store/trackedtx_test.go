package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/internal/testing/testdb"
	"github.com/bae-go/bae-go/store"
)

// TestQueuedWritesRideWithTheNextRoundTrip: a message appended in a
// transaction is seen by the transaction's next read and committed with
// it, or at the commit when nothing else follows; appended twice under one
// key it is stored once.
func TestQueuedWritesRideWithTheNextRoundTrip(t *testing.T) {
	st := open(t)
	ctx := context.Background()
	sess, _ := newSession(t, st)
	require.NoError(t, st.Tx(ctx, func(tx *store.Tx) error {
		tx.AppendMessage(sess.ID, "m1", "user", json.RawMessage(`"one"`))
		tx.AppendMessage(sess.ID, "m1", "user", json.RawMessage(`"one again"`))
		// A batch after the queued writes sees them.
		_, conv, _, err := tx.Attempt(ctx, sess.ID, sess.ClientKeyID, "no-such-response")
		if err != nil {
			return err
		}
		assert.JSONEq(t, `[{"role":"user","content":"one"}]`, string(conv))
		tx.AppendMessage(sess.ID, "m2", "assistant", json.RawMessage(`"two"`)) // flushed by the commit
		return nil
	}))
	h, err := st.History(ctx, sess.ID)
	require.NoError(t, err)
	require.Len(t, h, 2)
	assert.JSONEq(t, `"one"`, string(h[0].Content))
	assert.JSONEq(t, `"two"`, string(h[1].Content))
}

// TestFailedQueuedWriteFailsTheTransaction: a queued write that fails is
// the transaction's error, named, and nothing of the transaction stays.
func TestFailedQueuedWriteFailsTheTransaction(t *testing.T) {
	st := open(t)
	ctx := context.Background()
	sess, _ := newSession(t, st)
	for _, next := range []string{"batch", "statement", "commit"} {
		t.Run(next, func(t *testing.T) {
			err := st.Tx(ctx, func(tx *store.Tx) error {
				if _, err := tx.AppendEvents(ctx, sess.ID, store.NewEvent{IdemKey: "ev-" + next, Payload: events.ClientMessage{Role: "user", Content: json.RawMessage(`"hi"`)}}); err != nil {
					return err
				}
				tx.AppendMessage("ses_missing", "m-"+next, "user", json.RawMessage(`"lost"`))
				switch next {
				case "batch":
					_, err := tx.AppendEvents(ctx, sess.ID, store.NewEvent{IdemKey: "ev2-" + next, Payload: events.ClientMessage{Role: "user", Content: json.RawMessage(`"hi"`)}})
					return err
				case "statement":
					_, err := tx.GetSession(ctx, sess.ID)
					return err
				}
				return nil
			})
			require.ErrorIs(t, err, store.ErrNotFound)
			assert.Contains(t, err.Error(), "append message")
			_, err = st.EventByIdem(ctx, sess.ID, "ev-"+next)
			assert.ErrorIs(t, err, store.ErrNotFound, "the transaction was rolled back")
		})
	}
}

// TestFailedTransactionLeavesTheConnectionClean: after a transaction that
// failed midway the pool's only connection serves the next one, outside
// the failed transaction, which left nothing behind.
func TestFailedTransactionLeavesTheConnectionClean(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, testdb.New(t), store.Options{MaxConns: 1})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	sess, _ := newSession(t, st)
	hi := events.ClientMessage{Role: "user", Content: json.RawMessage(`"hi"`)}
	failed := errors.New("fn failed")
	err = st.Tx(ctx, func(tx *store.Tx) error {
		if _, err := tx.AppendEvents(ctx, sess.ID, store.NewEvent{IdemKey: "rolled-back", Payload: hi}); err != nil {
			return err
		}
		return failed
	})
	require.ErrorIs(t, err, failed)
	require.NoError(t, st.Tx(ctx, func(*store.Tx) error { return nil }), "a transaction with no statement")
	_, err = st.AppendEvents(ctx, sess.ID, store.NewEvent{IdemKey: "kept", Payload: hi})
	require.NoError(t, err)
	_, err = st.EventByIdem(ctx, sess.ID, "rolled-back")
	assert.ErrorIs(t, err, store.ErrNotFound)
	_, err = st.EventByIdem(ctx, sess.ID, "kept")
	assert.NoError(t, err)
}
