package store_test

import (
	"context"
	"fmt"
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
