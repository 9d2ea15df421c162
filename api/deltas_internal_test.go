package api

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"runtime"
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
	// block, when set, holds every flush until it is closed (a client
	// that stopped reading).
	block chan struct{}
	// entered, when set, is told of every flush that block holds.
	entered chan struct{}
	// flushed, when set, is told of every flush that sent something.
	flushed chan struct{}
}

func (w *sentWriter) Header() http.Header { return w.header }
func (w *sentWriter) WriteHeader(int)     {}
func (w *sentWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pending.Write(p)
}

func (w *sentWriter) Flush() {
	if w.block != nil {
		if w.entered != nil {
			select {
			case w.entered <- struct{}{}:
			default:
			}
		}
		<-w.block
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pending.Len() > 0 {
		w.flushes = append(w.flushes, bytes.Clone(w.pending.Bytes()))
		w.pending.Reset()
		if w.flushed != nil {
			select {
			case w.flushed <- struct{}{}:
			default:
			}
		}
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

// testWriters is a replica's session writers on one session of a
// hub without a database.
type testWriters struct {
	ws  *deltaWriters
	hub *live.Hub
}

func newTestWriters(t *testing.T) *testWriters {
	t.Helper()
	return &testWriters{ws: newDeltaWriters(), hub: live.New(nil, slog.New(slog.DiscardHandler))}
}

// stream attaches a started stream writing to w.
func (tw *testWriters) stream(t *testing.T, w http.ResponseWriter) *deltaStream {
	t.Helper()
	d := &deltaStream{call: &rpcCall{out: &ndjson{w: w, opened: true}}, gone: make(chan struct{})}
	tw.ws.attach(tw.hub.Deltas(), d, "ses_x")
	t.Cleanup(d.close)
	require.NoError(t, d.drain())
	return d
}

func (tw *testWriters) publish(seq int64) {
	tw.hub.Deltas().Publish(live.Delta{SessionID: "ses_x", TurnID: "trn_x", Seq: live.RunSpan + seq, Type: provider.DeltaText, Text: "tk"})
}

// seqs is 1..n as published.
func seqs(from, to int64) []int64 {
	var out []int64
	for s := from; s <= to; s++ {
		out = append(out, live.RunSpan+s)
	}
	return out
}

func flat(xs [][]int64) []int64 {
	var out []int64
	for _, x := range xs {
		out = append(out, x...)
	}
	return out
}

// TestDeltasBatchedPerSocket: deltas closer together than deltaHold reach
// every stream of the session in order, all of them, with at most one
// flush per stream per deltaHold (plus the first delta's own).
func TestDeltasBatchedPerSocket(t *testing.T) {
	tw := newTestWriters(t)
	const streams, n = 5, 40
	ws := make([]*sentWriter, streams)
	for i := range ws {
		ws[i] = &sentWriter{header: http.Header{}}
		tw.stream(t, ws[i])
	}
	start := time.Now()
	for seq := int64(1); seq <= n; seq++ {
		tw.publish(seq)
		// Paced by spinning: a sleep oversleeps on a loaded machine.
		for next := time.Now().Add(deltaHold / 10); time.Now().Before(next); {
			runtime.Gosched()
		}
	}
	elapsed := time.Since(start)
	for _, w := range ws {
		require.Eventually(t, func() bool { return len(flat(w.sent(t))) == n }, 10*time.Second, time.Millisecond)
		sent := w.sent(t)
		assert.Equal(t, seqs(1, n), flat(sent), "in order, none lost")
		// A flush per started deltaHold window, and one for the first.
		limit := 2 + int(elapsed/deltaHold)
		assert.LessOrEqual(t, len(sent), limit, "flushes for %d deltas in %v", n, elapsed)
		t.Logf("%d deltas in %v: %d flushes (limit %d)", n, elapsed, len(sent), limit)
	}
}

// TestLoneDeltaIsNotHeldBack: a delta after a quiet spell goes out at
// once, the next one within the hold waits for it (here, an hour), and a
// stream's own drain (before it writes events) sends what is held.
func TestLoneDeltaIsNotHeldBack(t *testing.T) {
	tw := newTestWriters(t)
	tw.ws.hold = time.Hour
	w := &sentWriter{header: http.Header{}}
	d := tw.stream(t, w)
	tw.publish(1)
	require.Eventually(t, func() bool { return len(w.sent(t)) == 1 }, 10*time.Second, time.Millisecond, "sent at once")
	tw.publish(2)
	require.Never(t, func() bool { return len(w.sent(t)) > 1 }, 50*time.Millisecond, time.Millisecond, "held")
	require.NoError(t, d.drain())
	assert.Equal(t, [][]int64{seqs(1, 1), seqs(2, 2)}, w.sent(t), "the stream's drain sends what is held")
}

// TestStalledStreamDoesNotHoldBackOthers: a stream whose socket blocks
// keeps its session's other streams waiting writeStall at most; it then
// gets its deltas, in order, once its socket drains.
func TestStalledStreamDoesNotHoldBackOthers(t *testing.T) {
	tw := newTestWriters(t)
	tw.ws.stall = 20 * time.Millisecond
	release := make(chan struct{})
	unblock := sync.OnceFunc(func() { close(release) })
	stuck := &sentWriter{header: http.Header{}, block: release}
	fine := &sentWriter{header: http.Header{}}
	tw.stream(t, stuck)
	tw.stream(t, fine)
	t.Cleanup(unblock) // before the streams' own: a leaving stream waits for its write
	tw.publish(1)
	require.Eventually(t, func() bool { return len(flat(fine.sent(t))) == 1 }, 10*time.Second, time.Millisecond, "the other stream is written")
	tw.publish(2)
	require.Eventually(t, func() bool { return len(flat(fine.sent(t))) == 2 }, 10*time.Second, time.Millisecond, "and goes on being written")
	assert.Empty(t, stuck.sent(t))
	unblock()
	require.Eventually(t, func() bool { return len(flat(stuck.sent(t))) == 2 }, 10*time.Second, time.Millisecond, "the stalled stream catches up")
	assert.Equal(t, seqs(1, 2), flat(stuck.sent(t)))
	tw.publish(3)
	require.Eventually(t, func() bool { return len(flat(stuck.sent(t))) == 3 && len(flat(fine.sent(t))) == 3 }, 10*time.Second, time.Millisecond)
}
