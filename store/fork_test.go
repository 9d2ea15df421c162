package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/store"
)

// forkFixture is a session with finished turns, each a user message and
// an assistant answer, with an event at its start and its end.
type forkFixture struct {
	st     *store.Store
	sess   store.Session
	client string
	n      int
}

func newForkFixture(t *testing.T) *forkFixture {
	st := open(t)
	sess, _ := newSession(t, st)
	return &forkFixture{st: st, sess: sess, client: sess.ClientKeyID}
}

// turn runs a turn in session id up to its end unless finish is false
// (then it is left running after its first event and message). It returns
// the turn id.
func (f *forkFixture) turn(t *testing.T, id string, finish bool) string {
	t.Helper()
	ctx := context.Background()
	f.n++
	turnID := fmt.Sprintf("turn_%s_%d", id, f.n)
	_, err := f.st.PutTurnInput(ctx, id, turnID, f.client, json.RawMessage(`"hi"`), "", store.Caps{})
	require.NoError(t, err)
	_, err = f.st.AppendEvents(ctx, id, store.NewEvent{TurnID: turnID, IdemKey: turnID + "/in", Payload: events.DriverRegister{}})
	require.NoError(t, err)
	require.NoError(t, f.st.Tx(ctx, func(tx *store.Tx) error {
		tx.AppendMessage(id, turnID+"/user", "user", json.RawMessage(fmt.Sprintf(`"question %d"`, f.n)))
		if finish {
			tx.AppendMessage(id, turnID+"/a", "assistant", json.RawMessage(fmt.Sprintf(`[{"type":"text","text":"answer %d"}]`, f.n)))
		}
		_, err := tx.AppendEvents(ctx, id, store.NewEvent{TurnID: turnID, IdemKey: turnID + "/mid", Payload: events.DriverRegister{}})
		return err
	}))
	if !finish {
		return turnID
	}
	_, err = f.st.AppendEvents(ctx, id, store.NewEvent{TurnID: turnID, IdemKey: turnID + "/out", Payload: events.DriverRegister{}})
	require.NoError(t, err)
	require.NoError(t, f.st.RecordTurnResult(ctx, turnID, map[string]string{"ok": "yes"}))
	return turnID
}

func (f *forkFixture) fork(t *testing.T, source string, at int64) (store.Session, store.ForkPoint) {
	t.Helper()
	sess, fp, secret, err := f.st.ForkSession(context.Background(), source, at, store.ClientDecl{ClientKeyID: f.client}, events.Declarations{}, store.Caps{})
	require.NoError(t, err)
	require.NotEmpty(t, secret)
	return sess, fp
}

func conv(t *testing.T, st *store.Store, id string) string {
	t.Helper()
	c, _, err := st.Conversation(context.Background(), id)
	require.NoError(t, err)
	return string(c)
}

func rowCounts(t *testing.T, st *store.Store) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, tbl := range []string{"sessions", "session_clients", "keys", "session_events", "session_messages", "session_context", "session_summaries", "turn_inputs"} {
		var n int
		require.NoError(t, st.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+tbl).Scan(&n))
		out[tbl] = n
	}
	return out
}

func TestForkAtLatestSharesHistory(t *testing.T) {
	f := newForkFixture(t)
	ctx := context.Background()
	for range 3 {
		f.turn(t, f.sess.ID, true)
	}
	srcEvents, err := f.st.EventsAfter(ctx, f.sess.ID, 0, 100)
	require.NoError(t, err)
	before := rowCounts(t, f.st)

	fork, fp := f.fork(t, f.sess.ID, 0)

	after := rowCounts(t, f.st)
	for tbl, n := range before {
		want := n
		switch tbl {
		case "sessions", "session_clients", "keys", "session_events":
			want = n + 1
		}
		assert.Equal(t, want, after[tbl], "rows written to %s", tbl)
	}
	assert.False(t, fp.Moved)
	assert.Equal(t, srcEvents[len(srcEvents)-1].Seq, fp.EventSeq)
	assert.Equal(t, conv(t, f.st, f.sess.ID), conv(t, f.st, fork.ID), "the fork's conversation is the source's")

	got, err := f.st.EventsAfter(ctx, fork.ID, 0, 100)
	require.NoError(t, err)
	require.Len(t, got, len(srcEvents)+1)
	for i, e := range srcEvents {
		assert.Equal(t, e.ID, got[i].ID)
		assert.Equal(t, f.sess.ID, got[i].SessionID)
		assert.True(t, got[i].Inherited)
		assert.Contains(t, string(got[i].AppendJSON(nil)), `"inherited":true`)
	}
	own := got[len(got)-1]
	assert.Equal(t, fork.ID, own.SessionID)
	assert.False(t, own.Inherited)
	assert.Equal(t, events.SessionOpen, own.Type)
	assert.Equal(t, fp.EventSeq+1, own.Seq, "the fork's own events continue the inherited sequence")
	assert.NotContains(t, string(own.AppendJSON(nil)), "inherited")

	// The encoded page the event routes serve agrees.
	page, _, err := f.st.EncodedEventsPage(ctx, fork.ID, 0, 100, 1<<20)
	require.NoError(t, err)
	require.Len(t, page, len(got))
	seq, err := f.st.SeqOfEvent(ctx, fork.ID, srcEvents[1].ID)
	require.NoError(t, err, "a cursor may name an inherited event")
	assert.Equal(t, srcEvents[1].Seq, seq)

	// The source goes on without the fork seeing it, and the other way.
	f.turn(t, f.sess.ID, true)
	f.turn(t, fork.ID, true)
	srcConv, forkConv := conv(t, f.st, f.sess.ID), conv(t, f.st, fork.ID)
	assert.Contains(t, srcConv, "question 4")
	assert.NotContains(t, forkConv, "question 4")
	assert.Contains(t, forkConv, "question 5")
	assert.NotContains(t, srcConv, "question 5")
	assert.Contains(t, forkConv, "answer 3")
}

func TestForkMidTurnStartsBeforeTheTurn(t *testing.T) {
	f := newForkFixture(t)
	ctx := context.Background()
	f.turn(t, f.sess.ID, true)
	f.turn(t, f.sess.ID, true)
	running := f.turn(t, f.sess.ID, false)
	evs, err := f.st.EventsAfter(ctx, f.sess.ID, 0, 100)
	require.NoError(t, err)
	var first, mid int64
	for _, e := range evs {
		if e.TurnID == running && first == 0 {
			first = e.Seq
		}
		if e.TurnID == running {
			mid = e.Seq
		}
	}
	want := conv(t, f.st, f.sess.ID)

	// The latest event is inside the running turn, and so is an event
	// asked for by seq.
	for _, at := range []int64{0, mid} {
		fork, fp := f.fork(t, f.sess.ID, at)
		assert.True(t, fp.Moved)
		assert.Equal(t, first-1, fp.EventSeq, "the fork starts before the turn")
		c := conv(t, f.st, fork.ID)
		assert.Contains(t, c, "answer 2")
		assert.NotContains(t, c, "question 3", "the running turn is not inherited")
		got, err := f.st.EventsAfter(ctx, fork.ID, 0, 100)
		require.NoError(t, err)
		for _, e := range got {
			assert.NotEqual(t, running, e.TurnID)
		}
	}
	assert.Equal(t, want, conv(t, f.st, f.sess.ID), "the source is untouched")

	// A finished turn's inner event moves the fork too: it never holds half
	// a turn.
	_, err = f.st.AppendEvents(ctx, f.sess.ID, store.NewEvent{TurnID: running, IdemKey: running + "/out", Payload: events.DriverRegister{}})
	require.NoError(t, err)
	require.NoError(t, f.st.RecordTurnResult(ctx, running, map[string]string{"ok": "yes"}))
	_, fp := f.fork(t, f.sess.ID, mid)
	assert.Equal(t, first-1, fp.EventSeq)
	_, fp = f.fork(t, f.sess.ID, 0)
	assert.False(t, fp.Moved)

	_, _, _, err = f.st.ForkSession(ctx, f.sess.ID, 1000, store.ClientDecl{ClientKeyID: f.client}, events.Declarations{}, store.Caps{})
	assert.ErrorIs(t, err, store.ErrForkPoint)
	_, _, _, err = f.st.ForkSession(ctx, "sess_nope", 0, store.ClientDecl{ClientKeyID: f.client}, events.Declarations{}, store.Caps{})
	assert.ErrorIs(t, err, store.ErrNotFound)
}

func TestForkCarriesCompaction(t *testing.T) {
	f := newForkFixture(t)
	ctx := context.Background()
	for range 4 {
		f.turn(t, f.sess.ID, true)
	}
	require.NoError(t, f.st.Tx(ctx, func(tx *store.Tx) error {
		_, err := tx.StoreSummary(ctx, f.sess.ID, store.Summary{ID: "c1", ThroughSeq: 4, Text: "they asked twice"}, 6)
		if err != nil {
			return err
		}
		_, err = tx.AppendEvents(ctx, f.sess.ID, store.NewEvent{Payload: events.CompactionPayload{CompactionID: "c1", Layer: events.LayerSummary,
			Messages: events.SeqRange{From: 1, Through: 4}, Summary: "they asked twice"}})
		return err
	}))
	compacted, err := f.st.EventsAfter(ctx, f.sess.ID, 0, 100)
	require.NoError(t, err)
	boundary := compacted[len(compacted)-1].Seq
	f.turn(t, f.sess.ID, true)
	// A later compaction the fork at the boundary must not see.
	require.NoError(t, f.st.Tx(ctx, func(tx *store.Tx) error {
		_, err := tx.StoreSummary(ctx, f.sess.ID, store.Summary{ID: "c2", ThroughSeq: 10, Text: "later"}, 10)
		if err != nil {
			return err
		}
		_, err = tx.AppendEvents(ctx, f.sess.ID, store.NewEvent{Payload: events.CompactionPayload{CompactionID: "c2", Layer: events.LayerSummary,
			Messages: events.SeqRange{From: 5, Through: 10}, Summary: "later"}})
		return err
	}))

	latest, _ := f.fork(t, f.sess.ID, 0)
	src, err := f.st.ContextOf(ctx, f.sess.ID)
	require.NoError(t, err)
	got, err := f.st.ContextOf(ctx, latest.ID)
	require.NoError(t, err)
	assert.Equal(t, src.State, got.State, "a fork at the latest event has the source's view")
	assert.Equal(t, src.Messages, got.Messages)

	atBoundary, fp := f.fork(t, f.sess.ID, boundary)
	assert.Equal(t, int64(8), fp.MessageSeq)
	got, err = f.st.ContextOf(ctx, atBoundary.ID)
	require.NoError(t, err)
	assert.Equal(t, int64(4), got.State.ThroughSeq)
	assert.Equal(t, int64(4), got.State.ClearedSeq)
	assert.Equal(t, "they asked twice", got.State.Summary)
	assert.Equal(t, "c1", got.State.SummaryID)
	require.Len(t, got.Messages, 4, "the messages after the summary, up to the fork point")
	assert.Equal(t, int64(8), got.Counter)
}

func TestForkOfForkAndClosedSource(t *testing.T) {
	f := newForkFixture(t)
	ctx := context.Background()
	f.turn(t, f.sess.ID, true)
	f.turn(t, f.sess.ID, true)
	child, _ := f.fork(t, f.sess.ID, 0)
	f.turn(t, child.ID, true)
	f.turn(t, f.sess.ID, true) // after the fork: neither descendant sees it
	grand, fp := f.fork(t, child.ID, 0)
	assert.Equal(t, child.ID, fp.SourceID)

	_, _, err := f.st.EndSession(ctx, f.sess.ID, store.StateClosed)
	require.NoError(t, err)
	_, _, err = f.st.EndSession(ctx, child.ID, store.StateClosed)
	require.NoError(t, err)

	f.turn(t, grand.ID, true)
	c := conv(t, f.st, grand.ID)
	for _, want := range []string{"answer 1", "answer 2", "answer 3", "answer 5"} {
		assert.Contains(t, c, want)
	}
	assert.NotContains(t, c, "question 4")
	evs, err := f.st.EventsAfter(ctx, grand.ID, 0, 100)
	require.NoError(t, err)
	from := map[string]int{}
	for i, e := range evs {
		from[e.SessionID]++
		if i > 0 {
			assert.Greater(t, e.Seq, evs[i-1].Seq)
		}
		assert.Equal(t, e.SessionID != grand.ID, e.Inherited)
	}
	assert.Positive(t, from[f.sess.ID])
	assert.Positive(t, from[child.ID])
	assert.Positive(t, from[grand.ID])

	l, err := f.st.Lineage(ctx, child.ID)
	require.NoError(t, err)
	require.NotNil(t, l.ForkedFrom)
	assert.Equal(t, f.sess.ID, l.ForkedFrom.SessionID)
	require.Len(t, l.Forks, 1)
	assert.Equal(t, grand.ID, l.Forks[0].SessionID)
}
