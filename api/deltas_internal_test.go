package api

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/lib/live"
	"github.com/bae-go/bae-go/internal/provider"
)

// sentWriter is a ResponseWriter that records what each flush sent.
type sentWriter struct {
	mu      sync.Mutex
	header  http.Header
	pending bytes.Buffer
	flushes [][]byte
}

func (w *sentWriter) Header() http.Header { return w.header }
func (w *sentWriter) WriteHeader(int)     {}
func (w *sentWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pending.Write(p)
}

func (w *sentWriter) Flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pending.Len() > 0 {
		w.flushes = append(w.flushes, bytes.Clone(w.pending.Bytes()))
		w.pending.Reset()
	}
}

// sent is every flush's text deltas' sequence numbers.
func (w *sentWriter) sent(t *testing.T) [][]int64 {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	var out [][]int64
	for _, f := range w.flushes {
		var seqs []int64
		for _, line := range bytes.Split(bytes.TrimSpace(f), []byte("\n")) {
			var n struct {
				Params struct {
					Seq int64 `json:"seq"`
				} `json:"params"`
			}
			require.NoError(t, json.Unmarshal(line, &n))
			seqs = append(seqs, n.Params.Seq)
		}
		out = append(out, seqs)
	}
	return out
}

func newTestDeltaStream(t *testing.T, now func() time.Time) (*deltaStream, *sentWriter, func(seq int64)) {
	t.Helper()
	hub := live.New(nil, slog.New(slog.DiscardHandler))
	w := &sentWriter{header: http.Header{}}
	call := &rpcCall{out: &ndjson{w: w, opened: true}}
	d := &deltaStream{call: call, sub: hub.Deltas().Subscribe("ses_x"), now: now}
	t.Cleanup(d.close)
	publish := func(seq int64) {
		hub.Deltas().Publish(live.Delta{SessionID: "ses_x", TurnID: "trn_x", Seq: live.RunSpan + seq, Type: provider.DeltaText, Text: "tk"})
	}
	return d, w, publish
}

// TestLoneDeltaIsNotHeldBack: a delta after a quiet spell is on the socket
// when drain returns, and so is the next one after another quiet spell.
func TestLoneDeltaIsNotHeldBack(t *testing.T) {
	now := time.Unix(1000, 0)
	d, w, publish := newTestDeltaStream(t, func() time.Time { return now })
	publish(1)
	require.NoError(t, d.drain())
	assert.Equal(t, [][]int64{{live.RunSpan + 1}}, w.sent(t), "sent at once")
	assert.Nil(t, d.due(), "nothing held")
	now = now.Add(deltaHold)
	publish(2)
	require.NoError(t, d.drain())
	assert.Equal(t, [][]int64{{live.RunSpan + 1}, {live.RunSpan + 2}}, w.sent(t), "sent at once after a quiet spell")
}

// TestCoalescedDeltasArriveInOrder: deltas that follow a send within
// deltaHold are held and then sent together, in order and all of them,
// no later than deltaHold after that send.
func TestCoalescedDeltasArriveInOrder(t *testing.T) {
	start := time.Unix(1000, 0)
	now := start
	d, w, publish := newTestDeltaStream(t, func() time.Time { return now })
	publish(1)
	require.NoError(t, d.drain())
	held := time.Now()
	for seq := int64(2); seq <= 50; seq++ {
		now = start.Add(time.Duration(seq) * deltaHold / 100)
		publish(seq)
		if seq%7 == 0 {
			require.NoError(t, d.drain())
		}
	}
	require.NoError(t, d.drain())
	assert.Len(t, w.sent(t), 1, "the deltas after the first are held")
	due := d.due()
	require.NotNil(t, due)
	select {
	case <-due:
	case <-time.After(10 * time.Second):
		t.Fatal("the held deltas never came due")
	}
	waited := time.Since(held)
	d.flushHeld()
	sent := w.sent(t)
	require.Len(t, sent, 2, "one send for the held deltas")
	var want []int64
	for seq := int64(2); seq <= 50; seq++ {
		want = append(want, live.RunSpan+seq)
	}
	assert.Equal(t, want, sent[1], "in order, none lost")
	// The hold is counted from the first send (deltaHold after it, minus
	// the 0.5 ms the test's clock had moved on): never longer.
	assert.GreaterOrEqual(t, waited, deltaHold/2, "held, not sent at once")
	t.Logf("held for %v (deltaHold %v)", waited, deltaHold)
	assert.Nil(t, d.due(), "nothing held any more")
}
