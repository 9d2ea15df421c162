package live

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPayloadsFitANotification: a batch is packed into payloads under the
// budget, each a JSON array after the origin line, none lost.
func TestPayloadsFitANotification(t *testing.T) {
	d := newDeltas(nil)
	var batch []Delta
	for i := range 500 {
		batch = append(batch, Delta{SessionID: "ses_x", TurnID: "trn_x", Seq: int64(RunSpan + i + 1), Type: "text_delta", Text: strings.Repeat("é", 40)})
	}
	payloads := d.payloads(batch)
	require.Greater(t, len(payloads), 1)
	n := 0
	for _, p := range payloads {
		assert.LessOrEqual(t, len(p), notifyBudget)
		origin, arr, ok := strings.Cut(p, "\n")
		require.True(t, ok)
		assert.Equal(t, d.origin, origin)
		var xs []Delta
		require.NoError(t, json.Unmarshal([]byte(arr), &xs))
		for _, x := range xs {
			n++
			assert.Equal(t, int64(RunSpan+n), x.Seq, "in order")
		}
	}
	assert.Equal(t, 500, n)
}

// TestBacklog: a resume gets the deltas after its sequence while the
// buffer holds them all; after an eviction past it, a missed
// notification, or for a run whose start this replica did not see, the
// backlog is incomplete.
func TestBacklog(t *testing.T) {
	d := newDeltas(nil)
	other := newDeltas(nil)
	send := func(seq int64) {
		enc, _ := json.Marshal([]Delta{{SessionID: "ses_x", TurnID: "trn_x", Seq: seq, Type: "text_delta", Text: "x"}})
		d.received(other.origin + "\n" + string(enc))
	}
	for i := int64(1); i <= 10; i++ {
		send(RunSpan + i)
	}
	xs, complete := d.Backlog("ses_x", "trn_x", RunSpan+7)
	assert.True(t, complete)
	assert.Len(t, xs, 3)
	_, complete = d.Backlog("ses_x", "trn_x", 0)
	assert.True(t, complete, "the buffer has the run from its first delta")
	_, complete = d.Backlog("ses_x", "trn_y", 0)
	assert.False(t, complete, "an unknown turn")
	xs, complete = d.Backlog("ses_other", "trn_x", 0)
	assert.False(t, complete, "another session's turn is an unknown turn")
	assert.Empty(t, xs)

	// Its own notifications come back to a replica and are ignored.
	enc, _ := json.Marshal([]Delta{{SessionID: "ses_x", TurnID: "trn_x", Seq: RunSpan + 11, Type: "text_delta"}})
	d.received(d.origin + "\n" + string(enc))
	xs, _ = d.Backlog("ses_x", "trn_x", RunSpan+10)
	assert.Empty(t, xs)

	d.missed()
	_, complete = d.Backlog("ses_x", "trn_x", RunSpan+7)
	assert.False(t, complete, "notifications may have been missed")

	// A replica that joined mid-run cannot vouch for the start.
	late := newDeltas(nil)
	enc, _ = json.Marshal([]Delta{{SessionID: "ses_x", TurnID: "trn_z", Seq: 2*RunSpan + 5, Type: "text_delta"}})
	late.received(other.origin + "\n" + string(enc))
	_, complete = late.Backlog("ses_x", "trn_z", 2*RunSpan+1)
	assert.False(t, complete)
	_, complete = late.Backlog("ses_x", "trn_z", 2*RunSpan+4)
	assert.True(t, complete)

	// Evicted past the resume point.
	d = newDeltas(nil)
	for i := int64(1); i <= turnBufferLen+20; i++ {
		send(RunSpan + i)
	}
	_, complete = d.Backlog("ses_x", "trn_x", RunSpan+15)
	assert.False(t, complete)
	_, complete = d.Backlog("ses_x", "trn_x", RunSpan+30)
	assert.True(t, complete)
}

// TestLineEncodedOnce: every local stream a delta is delivered to sends
// the same bytes, encoded once.
func TestLineEncodedOnce(t *testing.T) {
	d := newDeltas(nil)
	a, b := d.Subscribe("ses_x"), d.Subscribe("ses_x")
	defer a.Close()
	defer b.Close()
	d.deliver(Delta{SessionID: "ses_x", TurnID: "trn_x", Seq: RunSpan + 1, Type: "text_delta", Text: "hi"})
	encodes := 0
	enc := func(x Delta) []byte {
		encodes++
		return []byte(x.Text + "\n")
	}
	xa, _ := a.Take()
	xb, _ := b.Take()
	require.Len(t, xa, 1)
	require.Len(t, xb, 1)
	assert.Equal(t, "hi\n", string(xa[0].Line(enc)))
	assert.Equal(t, "hi\n", string(xb[0].Line(enc)))
	assert.Equal(t, 1, encodes)
	assert.Equal(t, "hi\n", string(Delta{Text: "hi"}.Line(enc)), "a delta never delivered is encoded each time")
	assert.Equal(t, 2, encodes)
}

// TestStopTurnMessage: the hub hands a stop message's session and turn to
// every registered callback, and ignores one without a turn.
func TestStopTurnMessage(t *testing.T) {
	h := &Hub{waiters: map[string]map[*Waiter]struct{}{}}
	var got [][2]string
	h.OnStopTurn(func(sid, turn string) { got = append(got, [2]string{sid, turn}) })
	h.control(StopTurn("ses_1", "trn_2"))
	h.control("stop:ses_1/")
	h.control("stop:ses_1")
	if len(got) != 1 || got[0] != [2]string{"ses_1", "trn_2"} {
		t.Fatalf("callbacks got %v", got)
	}
}

// takeQueued empties d's notification queue: the interest messages and
// the payloads its sender would notify.
func takeQueued(d *Deltas) (ctl []string, payloads []string) {
	d.outMu.Lock()
	defer d.outMu.Unlock()
	for _, msg := range d.ctl {
		ctl = append(ctl, d.origin+"\n"+msg)
	}
	if len(d.out) > 0 {
		payloads = d.payloads(d.out)
	}
	d.out, d.ctl = nil, nil
	return ctl, payloads
}

// TestDeltasNotifiedOnlyForInterestedReplicas: a replica's deltas go
// through PostgreSQL only while another replica announced interest in
// their session; a replica whose interest arrives mid-turn gets the
// deltas kept so far first, each once, in order; interest ends a while
// after the last stream closed.
func TestDeltasNotifiedOnlyForInterestedReplicas(t *testing.T) {
	a, b := newDeltas(nil), newDeltas(nil)
	pub := func(i int64) {
		a.Publish(Delta{SessionID: "ses_x", TurnID: "trn_x", Seq: RunSpan + i, Type: "text_delta", Text: "x"})
	}
	local := a.Subscribe("ses_x")
	defer local.Close()
	_, _ = takeQueued(a)
	pub(1)
	pub(2)
	_, payloads := takeQueued(a)
	assert.Empty(t, payloads, "no other replica is interested")
	xs, _ := local.Take()
	assert.Len(t, xs, 2, "local streams get every delta")

	sub := b.Subscribe("ses_x")
	defer sub.Close()
	ctl, _ := takeQueued(b)
	require.Equal(t, []string{b.origin + "\n+ses_x"}, ctl, "the first stream on a session announces interest")
	pub(3) // before A learns of B's interest
	for _, msg := range ctl {
		a.received(msg)
	}
	pub(4)
	_, payloads = takeQueued(a)
	require.NotEmpty(t, payloads)
	for _, p := range append(payloads, payloads...) { // delivered twice: kept once
		b.received(p)
	}
	got, lost := sub.Take()
	assert.False(t, lost)
	var seqs []int64
	for _, x := range got {
		seqs = append(seqs, x.Seq-RunSpan)
	}
	assert.Equal(t, []int64{1, 2, 3, 4}, seqs, "what A kept, then what came after, each once")
	_, complete := b.Backlog("ses_x", "trn_x", 0)
	assert.True(t, complete)

	// A repeated announcement sends nothing again.
	a.received(b.origin + "\n+ses_x")
	_, payloads = takeQueued(a)
	assert.Empty(t, payloads)

	// B's last stream closes: interest lingers, then ends.
	sub.Close()
	b.sweep(time.Now())
	ctl, _ = takeQueued(b)
	assert.Empty(t, ctl, "still lingering")
	b.sweep(time.Now().Add(interestLinger + time.Second))
	ctl, _ = takeQueued(b)
	require.Equal(t, []string{b.origin + "\n-ses_x"}, ctl)
	_, complete = b.Backlog("ses_x", "trn_x", 0)
	assert.False(t, complete, "B may miss this turn's deltas from now on")
	for _, msg := range ctl {
		a.received(msg)
	}
	pub(5)
	_, payloads = takeQueued(a)
	assert.Empty(t, payloads, "nobody else interested any more")

	// A replica that (re)connects asks the others to announce again.
	c := newDeltas(nil)
	c.Subscribe("ses_y")
	_, _ = takeQueued(c)
	a.connected()
	ctl, _ = takeQueued(a)
	require.Equal(t, []string{a.origin + "\n?", a.origin + "\n+ses_x"}, ctl)
	c.received(ctl[0])
	ctl, _ = takeQueued(c)
	assert.Equal(t, []string{c.origin + "\n+ses_y"}, ctl)

	// An interest not repeated is forgotten.
	a.received(c.origin + "\n+ses_x")
	a.sweep(time.Now().Add(interestTTL + time.Second))
	_, _ = takeQueued(a)
	pub(6)
	_, payloads = takeQueued(a)
	assert.Empty(t, payloads)
}

// TestHoleInARunMarksTheBufferIncomplete: a delta missing in a run's
// numbering means a resume before it cannot be served whole.
func TestHoleInARunMarksTheBufferIncomplete(t *testing.T) {
	d, other := newDeltas(nil), newDeltas(nil)
	send := func(seq int64) {
		enc, _ := json.Marshal([]Delta{{SessionID: "ses_x", TurnID: "trn_x", Seq: seq, Type: "text_delta", Text: "x"}})
		d.received(other.origin + "\n" + string(enc))
	}
	send(RunSpan + 1)
	send(RunSpan + 2)
	send(RunSpan + 5)
	_, complete := d.Backlog("ses_x", "trn_x", RunSpan+1)
	assert.False(t, complete)
	_, complete = d.Backlog("ses_x", "trn_x", RunSpan+4)
	assert.True(t, complete)
}
