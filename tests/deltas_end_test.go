package tests

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/lib/live"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/testenv"
)

// inboundGate stands between replica B and the deltas the other replicas
// send it: batches pass, are held (in order) or are dropped.
type inboundGate struct {
	mu    sync.Mutex
	mode  string // "pass", "hold", "drop"
	held  []func()
	texts int
	// four closes once four text deltas reached the gate, with the turn.
	four   chan struct{}
	turnID string
}

func gateInbound(t *testing.T, srv *testenv.Server, mode string) *inboundGate {
	g := &inboundGate{mode: mode, four: make(chan struct{})}
	d := srv.Parts.Hub.Deltas()
	d.InterceptInbound(func(batch []live.Delta, deliver func()) {
		g.mu.Lock()
		defer g.mu.Unlock()
		switch g.mode {
		case "hold":
			g.held = append(g.held, deliver)
		case "pass":
			deliver()
		}
		for _, x := range batch {
			if x.Type != "text_delta" {
				continue
			}
			if g.texts++; g.texts == 4 {
				g.turnID = x.TurnID
				close(g.four)
			}
		}
	})
	t.Cleanup(func() { d.InterceptInbound(nil) })
	return g
}

func (g *inboundGate) set(mode string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.mode = mode
	if mode == "pass" {
		for _, deliver := range g.held {
			deliver()
		}
		g.held = nil
	}
}

// TestDeltasOvertakenByTheirAnswer: a turn runs on replica A and its
// driver's stream is on replica B; the turn's deltas reach B only half a
// second after its answer was stored and announced (a slow path between
// replicas: A stops waiting for its notifications after two seconds). B's
// stream still carries every delta, before the provider.response and the
// result they stand for, and no reset. Red when the relay ends at the
// result without waiting for the deltas (the stream then carries none).
func TestDeltasOvertakenByTheirAnswer(t *testing.T) {
	fake := fakeprovider.New(t)
	a, b := startReplicaPair(t, fake.URL(), "overtaken")
	gate := gateInbound(t, b, "hold")
	lines := streamAcrossReplicas(t, fake, a, b, gate, func(turnID string) {
		done, stop := b.Parts.Hub.WatchTurn(turnID)
		go func() {
			defer stop()
			<-done
			time.AfterFunc(500*time.Millisecond, func() { gate.set("pass") })
		}()
	})
	var ds []map[string]any
	response := -1
	for i, m := range lines {
		if isDelta(m) {
			assert.NotEqual(t, "reset", m["params"].(map[string]any)["type"], "every delta came: no reset")
			assert.Negative(t, response, "a delta after the provider.response it stands for: %v", m)
			ds = append(ds, m)
		}
		if response < 0 && isEventOf(m, "provider.response") {
			response = i
		}
	}
	assert.Equal(t, streamedText, joinText(ds), "B's stream carries the whole answer as deltas")
	assert.Equal(t, streamedText, firstText(message(lines[len(lines)-1])))
}

// TestDeltasLostBetweenReplicasGetAReset: the tail of a turn's deltas
// never reaches replica B (a notification lost, as when PostgreSQL
// restarts between A sending it and storing the answer). B's stream says
// so with a reset for the turn before the provider.response, instead of
// ending at the result with the answer's tail silently missing. Red
// without the check (the stream ends without its last deltas and no
// reset).
func TestDeltasLostBetweenReplicasGetAReset(t *testing.T) {
	fake := fakeprovider.New(t)
	a, b := startReplicaPair(t, fake.URL(), "lost")
	gate := gateInbound(t, b, "pass")
	lines := streamAcrossReplicas(t, fake, a, b, gate, func(string) { gate.set("drop") })
	reset, response, texts := -1, -1, 0
	for i, m := range lines {
		if isDelta(m) {
			p := m["params"].(map[string]any)
			switch p["type"] {
			case "reset":
				assert.Negative(t, reset, "one reset")
				reset = i
				assert.NotEmpty(t, p["turn_id"], "the reset names the turn")
			case "text_delta":
				texts++
			}
		}
		if response < 0 && isEventOf(m, "provider.response") {
			response = i
		}
	}
	require.Positive(t, reset, "the stream says it missed deltas")
	assert.Less(t, reset, response, "the reset comes before the provider.response")
	assert.Less(t, texts, 10, "the tail was lost on the way")
	assert.Equal(t, streamedText, firstText(message(lines[len(lines)-1])))
}

// TestObserverDeltasOvertakenByTheirAnswer is
// TestDeltasOvertakenByTheirAnswer for an observer: a session.subscribe
// stream on B with deltas on carries every delta of the turn run on A
// before the provider.response they stand for, and no reset. Red when a
// subscribe stream writes the response without waiting for them (the
// deltas then come after it).
func TestObserverDeltasOvertakenByTheirAnswer(t *testing.T) {
	fake := fakeprovider.New(t)
	a, b := startReplicaPair(t, fake.URL(), "obs-overtaken")
	gate := gateInbound(t, b, "hold")
	lines, turnID := observeAcrossReplicas(t, fake, a, b, gate, func(turnID string) {
		done, stop := b.Parts.Hub.WatchTurn(turnID)
		go func() {
			defer stop()
			<-done
			time.AfterFunc(500*time.Millisecond, func() { gate.set("pass") })
		}()
	})
	var ds []map[string]any
	response := -1
	for i, m := range lines {
		if isDelta(m) && deltaOf(m, turnID) {
			assert.NotEqual(t, "reset", m["params"].(map[string]any)["type"], "every delta came: no reset")
			assert.Negative(t, response, "a delta after the provider.response it stands for: %v", m)
			ds = append(ds, m)
		}
		if response < 0 && isEventOf(m, "provider.response") {
			response = i
		}
	}
	require.Positive(t, response, "the observer got the provider.response")
	assert.Equal(t, streamedText, joinText(ds), "the observer's stream carries the whole answer as deltas")
}

// TestObserverDeltasLostBetweenReplicasGetAReset is
// TestDeltasLostBetweenReplicasGetAReset for an observer: the tail of the
// turn's deltas never reaches B, and B's session.subscribe stream says so
// with a reset for the turn before the provider.response. Red without
// the check (the response comes after a silent gap).
func TestObserverDeltasLostBetweenReplicasGetAReset(t *testing.T) {
	fake := fakeprovider.New(t)
	a, b := startReplicaPair(t, fake.URL(), "obs-lost")
	gate := gateInbound(t, b, "pass")
	lines, turnID := observeAcrossReplicas(t, fake, a, b, gate, func(string) { gate.set("drop") })
	reset, response, texts := -1, -1, 0
	for i, m := range lines {
		if isDelta(m) && deltaOf(m, turnID) {
			p := m["params"].(map[string]any)
			switch p["type"] {
			case "reset":
				assert.Negative(t, reset, "one reset")
				reset = i
				assert.Equal(t, turnID, p["turn_id"], "the reset names the turn")
			case "text_delta":
				texts++
			}
		}
		if response < 0 && isEventOf(m, "provider.response") {
			response = i
		}
	}
	require.Positive(t, response, "the observer got the provider.response")
	require.Positive(t, reset, "the stream says it missed deltas")
	assert.Less(t, reset, response, "the reset comes before the provider.response")
	assert.Less(t, texts, 10, "the tail was lost on the way")
}

// observeAcrossReplicas opens a session on A (its turns run on A) and a
// session.subscribe stream on B with deltas on, sends a message on A
// and reads B's stream: up to the turn's provider.response and, once the
// driver got its answer, on until the answer's deltas are all there or a
// reset came (a second at most; what comes after the response is what
// the tests judge). A's provider streams ten pieces and holds after
// four; once the four reached B's gate, between runs with the turn id and
// the provider goes on. It returns the lines and the turn's id (the
// stream may also carry what A kept of the session's first turn, sent
// when B's interest reached it).
func observeAcrossReplicas(t *testing.T, fake *fakeprovider.Server, a, b *testenv.Server, gate *inboundGate, between func(turnID string)) ([]map[string]any, string) {
	t.Helper()
	sid, sk := openSessionStartedOn(t, fake, a)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	obs := openRaw(t, ctx, b, sid, sk, map[string]any{"jsonrpc": "2.0", "id": 2, "method": "session.subscribe", "params": map[string]any{}}, deltasOn)
	require.Equal(t, 200, obs.resp.StatusCode)
	fake.Enqueue(fakeprovider.Text(streamedText).Streamed(10, 0).HangStream(4))
	drv := openRaw(t, ctx, a, sid, sk, map[string]any{"jsonrpc": "2.0", "id": 1, "method": "session.sendMessage", "params": map[string]any{"message": map[string]any{"content": "hi"}}}, nil)
	require.Equal(t, 200, drv.resp.StatusCode)
	select {
	case <-gate.four:
		between(gate.turnID)
	case <-ctx.Done():
		t.Fatal("no delta reached B")
	}
	fake.Release()
	for {
		_, m := drv.next(20 * time.Second)
		require.NotNil(t, m, "the driver's stream ended early")
		if m["id"] != nil {
			require.Nil(t, m["error"], "%v", m["error"])
			require.Equal(t, streamedText, firstText(message(m)))
			break
		}
	}
	var lines, ds []map[string]any
	answered, reset := false, false
	deadline := time.Now().Add(20 * time.Second)
	for !answered || joinText(ds) != streamedText && !reset {
		_, m := obs.next(time.Until(deadline))
		if m == nil {
			require.True(t, answered, "no provider.response on the observer's stream: %v", lines)
			return lines, gate.turnID
		}
		lines = append(lines, m)
		if isDelta(m) && deltaOf(m, gate.turnID) {
			ds = append(ds, m)
			reset = reset || m["params"].(map[string]any)["type"] == "reset"
		}
		if !answered && isEventOf(m, "provider.response") {
			answered = true
			deadline = time.Now().Add(time.Second)
		}
	}
	return lines, gate.turnID
}

func deltaOf(m map[string]any, turnID string) bool {
	return m["params"].(map[string]any)["turn_id"] == turnID
}

// streamAcrossReplicas opens a session on A (its turns run on A), sends a
// message on B with deltas opted in, and reads B's stream to its
// terminal result. A's provider streams ten pieces and holds after four;
// once the four reached B's gate, between runs with the turn id and the
// provider goes on.
func streamAcrossReplicas(t *testing.T, fake *fakeprovider.Server, a, b *testenv.Server, gate *inboundGate, between func(turnID string)) []map[string]any {
	t.Helper()
	sid, sk := openSessionStartedOn(t, fake, a)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	fake.Enqueue(fakeprovider.Text(streamedText).Streamed(10, 0).HangStream(4))
	send := map[string]any{"jsonrpc": "2.0", "id": 1, "method": "session.sendMessage", "params": map[string]any{"message": map[string]any{"content": "hi"}}}
	drv := openRaw(t, ctx, b, sid, sk, send, http.Header{"Bae-Deltas": {"on"}})
	require.Equal(t, 200, drv.resp.StatusCode)
	var lines []map[string]any
	// Four pieces stream before the provider holds.
	select {
	case <-gate.four:
		between(gate.turnID)
	case <-ctx.Done():
		t.Fatal("no delta reached B")
	}
	fake.Release()
	for {
		_, m := drv.next(20 * time.Second)
		require.NotNil(t, m, "B's stream ended early: %v", lines)
		lines = append(lines, m)
		if m["id"] != nil {
			require.Nil(t, m["error"], "%v", m["error"])
			return lines
		}
	}
}
