package store_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/store"
)

// One append mixes a stored key, a key repeated within the call and
// events without keys: each key is stored once, the sequence has no gap,
// and a notice goes out only for an append that stored something, naming
// the new head.
func TestAppendMixedKeysInOneStatement(t *testing.T) {
	st := open(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sess, _ := newSession(t, st)

	conn, err := st.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, "LISTEN "+store.EventsChannel)
	require.NoError(t, err)

	first, err := st.AppendEvents(ctx, sess.ID, store.NewEvent{IdemKey: "k/1", TurnID: "turn-1", Payload: events.SessionClosePayload{Reason: "a"}})
	require.NoError(t, err)
	head := first[0].Seq

	next := func() string {
		for {
			n, err := conn.Conn().WaitForNotification(ctx)
			require.NoError(t, err)
			if sid, rest, _ := cutSession(n.Payload); sid == sess.ID {
				return rest
			}
		}
	}
	assert.Equal(t, fmt.Sprint(head), next())

	// Nothing new: no notice.
	again, err := st.AppendEvents(ctx, sess.ID, store.NewEvent{IdemKey: "k/1", Payload: events.SessionClosePayload{Reason: "b"}})
	require.NoError(t, err)
	assert.Equal(t, first[0].ID, again[0].ID)

	at := int64(0)
	got, err := st.AppendEvents(ctx, sess.ID,
		store.NewEvent{Payload: events.DriverRegister{}},
		store.NewEvent{IdemKey: "k/1", Payload: events.SessionClosePayload{Reason: "c"}},
		store.NewEvent{IdemKey: "k/2", TurnID: "turn-2", Payload: events.SessionClosePayload{Reason: "d"}},
		store.NewEvent{IdemKey: "k/2", Payload: events.SessionClosePayload{Reason: "e"}},
		store.NewEvent{IdemKey: "k/3", Payload: events.ProviderRequestPayload{Provider: "anthropic"}, MessagesAt: &at},
	)
	require.NoError(t, err)
	require.Len(t, got, 5)
	assert.Equal(t, head+1, got[0].Seq, "the event without a key comes first")
	assert.Equal(t, first[0].ID, got[1].ID, "a stored key returns the stored event")
	assert.JSONEq(t, `{"reason":"a"}`, string(got[1].Payload))
	assert.Equal(t, head+2, got[2].Seq)
	assert.Equal(t, "turn-2", got[2].TurnID)
	assert.Equal(t, got[2].ID, got[3].ID, "a key repeated in one call is stored once")
	assert.Equal(t, head+3, got[4].Seq)
	assert.Equal(t, fmt.Sprint(head+3), next(), "the next notice is this append's, naming its head")

	evs, err := st.EventsAfter(ctx, sess.ID, 0, 100)
	require.NoError(t, err)
	require.Len(t, evs, int(head+3))
	for i, e := range evs {
		assert.Equal(t, int64(i+1), e.Seq)
	}
	last, err := st.LastEventSeq(ctx, sess.ID)
	require.NoError(t, err)
	assert.Equal(t, head+3, last)
	assert.Empty(t, evs[len(evs)-1].ClientKeyID)
	assert.Empty(t, evs[len(evs)-3].IdemKey, "no key is stored as none")
}

// cutSession splits an events notice into its session and the rest
// without the origin.
func cutSession(p string) (string, string, bool) {
	for i := range len(p) {
		if p[i] == '/' {
			rest := p[i+1:]
			for j := range len(rest) {
				if rest[j] == '/' {
					rest = rest[:j]
					break
				}
			}
			return p[:i], rest, true
		}
	}
	return p, "", false
}

// A page of a session's events stops before a byte bound as well as at its
// count (an event bigger than the bound still makes a page by itself), and
// the cursor carries on from there: a reader paging as usual sees every
// event once, in order, and never a page much bigger than the bound.
func TestEventsPageIsBoundedByBytes(t *testing.T) {
	st := open(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sess, _ := newSession(t, st)
	for i, n := range []int{300, 300, 300, 5000, 300, 10, 10, 10} {
		_, err := st.AppendEvents(ctx, sess.ID, store.NewEvent{Payload: events.SessionClosePayload{Reason: fmt.Sprintf("%d-%s", i, strings.Repeat("x", n))}})
		require.NoError(t, err)
	}
	head, err := st.LastEventSeq(ctx, sess.ID)
	require.NoError(t, err)

	const bound = 1000
	var seen []int64
	var sizes [][]int
	cursor := int64(0)
	for range head + 1 {
		evs, next, err := st.EncodedEventsPage(ctx, sess.ID, cursor, 200, bound)
		require.NoError(t, err)
		require.NotEmpty(t, evs, "a page holds at least one event")
		total, page := 0, []int{}
		for _, e := range evs {
			total += e.Size()
			page = append(page, e.Size())
			seen = append(seen, e.Seq)
		}
		sizes = append(sizes, page)
		if len(evs) > 1 {
			assert.LessOrEqual(t, total, bound, "page %v", page)
		}
		if next == nil {
			break
		}
		assert.Equal(t, fmt.Sprint(evs[len(evs)-1].Seq), *next)
		cursor = evs[len(evs)-1].Seq
	}
	want := make([]int64, head)
	for i := range want {
		want[i] = int64(i + 1)
	}
	assert.Equal(t, want, seen, "every event once, in order")
	assert.Greater(t, len(sizes), 3, "the bound cut pages: %v", sizes)
	big := slices.IndexFunc(sizes, func(p []int) bool { return slices.Max(p) > bound })
	require.GreaterOrEqual(t, big, 0)
	assert.Len(t, sizes[big], 1, "the big event comes alone")

	// The count still bounds a page, and a generous byte bound leaves the
	// pages as they were.
	evs, next, err := st.EncodedEventsPage(ctx, sess.ID, 0, 3, 1<<20)
	require.NoError(t, err)
	assert.Len(t, evs, 3)
	require.NotNil(t, next)
	evs, next, err = st.EncodedEventsPage(ctx, sess.ID, 0, 200, 1<<20)
	require.NoError(t, err)
	assert.Len(t, evs, int(head))
	assert.Nil(t, next)
}
