package store_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/internal/lib/keyhash"
	"github.com/bae-go/bae-go/internal/testing/testdb"
	"github.com/bae-go/bae-go/store"
)

// TestConversationFollowsAppendsAndRemovals: the cached conversation is the
// table's, message for message, after appends by this store and by another
// (another replica), and after a removal, which is the case the cache must
// notice without re-reading everything on every call.
func TestConversationFollowsAppendsAndRemovals(t *testing.T) {
	ctx := context.Background()
	url := testdb.New(t)
	a, err := store.Open(ctx, url, store.Options{KeyHasher: keyhash.Argon2id{Params: keyhash.TestParams}})
	require.NoError(t, err)
	t.Cleanup(a.Close)
	b, err := store.Open(ctx, url, store.Options{KeyHasher: keyhash.Argon2id{Params: keyhash.TestParams}}) // a second replica
	require.NoError(t, err)
	t.Cleanup(b.Close)
	sess, _ := newSession(t, a)
	put := func(st *store.Store, key, role, content string) {
		require.NoError(t, st.Tx(ctx, func(tx *store.Tx) error {
			tx.AppendMessage(sess.ID, key, role, json.RawMessage(content))
			return nil
		}))
	}
	same := func(st *store.Store) {
		t.Helper()
		got, _, err := st.Conversation(ctx, sess.ID)
		require.NoError(t, err)
		h, err := st.History(ctx, sess.ID)
		require.NoError(t, err)
		want, err := json.Marshal(h)
		require.NoError(t, err)
		assert.Equal(t, string(want), string(got), "byte for byte what json.Marshal of the history gives")
	}
	same(a)
	put(a, "t1/user", "user", `"hello"`)
	put(a, "t1/i0/asst", "assistant", `[ {"type": "text", "text": "hi"} ]`)
	same(a)
	put(b, "t2/user", "user", `"more"`)
	same(a)
	// t2 failed: taken out by the other replica.
	require.NoError(t, b.Tx(ctx, func(tx *store.Tx) error {
		_, err := tx.RepairConversation(ctx, sess.ID, "t2")
		return err
	}))
	same(a)
	put(a, "t3/user", "user", `"again"`)
	same(a)
	same(b)

	m, err := a.CachedMessage(ctx, sess.ID, "t1/i0/asst")
	require.NoError(t, err)
	assert.JSONEq(t, `[{"type":"text","text":"hi"}]`, string(m.Content))
	_, err = a.CachedMessage(ctx, sess.ID, "t2/user")
	assert.ErrorIs(t, err, store.ErrNotFound, "a removed message is gone from the cache too")
}

// TestFollowEventsNeverSkips: a follower reading from memory gets exactly
// the table's events in order, whichever store appended them.
func TestFollowEventsNeverSkips(t *testing.T) {
	ctx := context.Background()
	url := testdb.New(t)
	a, err := store.Open(ctx, url, store.Options{KeyHasher: keyhash.Argon2id{Params: keyhash.TestParams}})
	require.NoError(t, err)
	t.Cleanup(a.Close)
	b, err := store.Open(ctx, url, store.Options{KeyHasher: keyhash.Argon2id{Params: keyhash.TestParams}})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	sess, _ := newSession(t, a)

	var cursor int64
	var seen []int64
	follow := func() {
		t.Helper()
		evs, err := a.FollowEvents(ctx, sess.ID, cursor, 100)
		require.NoError(t, err)
		for _, e := range evs {
			seen = append(seen, e.Seq)
			cursor = e.Seq
		}
	}
	appendOn := func(st *store.Store, n int) int64 {
		var last int64
		for range n {
			evs, err := st.AppendEvents(ctx, sess.ID, store.NewEvent{Payload: events.DriverRegister{}})
			require.NoError(t, err)
			last = evs[0].Seq
		}
		return last
	}
	follow()
	appendOn(a, 2)
	follow()
	// Another replica appends; its notice reaches this process.
	last := appendOn(b, 1)
	a.Announced(sess.ID + "/" + itoa(last))
	appendOn(a, 1)
	follow()
	appendOn(a, 3)
	follow()

	all, err := a.EventsAfter(ctx, sess.ID, 0, 100)
	require.NoError(t, err)
	var want []int64
	for _, e := range all {
		want = append(want, e.Seq)
	}
	assert.Equal(t, want, seen)

	// A notice naming a sequence beyond memory sends the follower to the
	// table even when memory has nothing newer.
	last = appendOn(b, 1)
	a.Announced(sess.ID + "/" + itoa(last))
	follow()
	assert.Equal(t, last, cursor)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestConversationReadIsOneStatement: bringing a session's cached
// conversation up to date reads the message counter and the rows appended
// since in one statement (it was two), whether rows were appended or not,
// and a missing session is still ErrNotFound.
func TestConversationReadIsOneStatement(t *testing.T) {
	ctx := context.Background()
	st := open(t)
	sess, _ := newSession(t, st)
	require.NoError(t, st.Tx(ctx, func(tx *store.Tx) error {
		tx.AppendMessage(sess.ID, "t1/user", "user", json.RawMessage(`"hello"`))
		return nil
	}))
	read := func(want string) {
		t.Helper()
		before := st.DBCalls()
		got, _, err := st.Conversation(ctx, sess.ID)
		require.NoError(t, err)
		after := st.DBCalls()
		assert.Equal(t, store.DBCalls{RoundTrips: 1, Statements: 1}, store.DBCalls{RoundTrips: after.RoundTrips - before.RoundTrips, Statements: after.Statements - before.Statements})
		assert.JSONEq(t, want, string(got))
	}
	read(`[{"role":"user","content":"hello"}]`)
	read(`[{"role":"user","content":"hello"}]`) // nothing appended since
	require.NoError(t, st.Tx(ctx, func(tx *store.Tx) error {
		tx.AppendMessage(sess.ID, "t1/asst", "assistant", json.RawMessage(`"hi"`))
		return nil
	}))
	read(`[{"role":"user","content":"hello"},{"role":"assistant","content":"hi"}]`)
	_, _, err := st.Conversation(ctx, "ses_missing")
	assert.ErrorIs(t, err, store.ErrNotFound)
}
