//go:build topology

package topology

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/testdb"
	"github.com/bae-go/bae-go/internal/testing/testenv"
)

// replicas is two baesrv replicas on one database and the suite's Temporal.
type replicas struct {
	a, b *testenv.Server
	fake *fakeprovider.Server
	pid  string
}

func startReplicas(t *testing.T) *replicas {
	t.Helper()
	return startReplicasEnv(t, nil)
}

// uncappedQueue lifts the per-session caps on live streams and queued
// turns, for tests that queue more drivers on one session than they allow
// (BAE's FIFO has no cap; bae-go's caps are the deployment's choice).
var uncappedQueue = map[string]string{"BAE_MAX_STREAMS_PER_SESSION": "0", "BAE_MAX_QUEUED_TURNS_PER_SESSION": "0"}

// startReplicasEnv is startReplicas with more server environment.
func startReplicasEnv(t *testing.T, env map[string]string) *replicas {
	t.Helper()
	fake := fakeprovider.New(t)
	opts := testenv.Options{
		DatabaseURL: testdb.New(t),
		Temporal:    temporalClient(t),
		DataDir:     t.TempDir(),
		ConfigTOML:  testenv.PrimaryProviderTOML(fake.URL()),
		// One task queue per test: both replicas' workers poll it, so
		// either may run any session's workflow and activities.
		Env: map[string]string{"BAE_TASK_QUEUE": "topology-" + t.Name()},
	}
	for k, v := range env {
		opts.Env[k] = v
	}
	r := &replicas{a: testenv.Start(t, opts), b: testenv.Start(t, opts), fake: fake}
	r.pid = r.a.Profile(t, map[string]any{"name": "main", "primary_provider": "primary"})
	return r
}

func sendRequest(id int, text string) map[string]any {
	return map[string]any{"jsonrpc": "2.0", "id": id, "method": "session.sendMessage",
		"params": map[string]any{"message": map[string]any{"content": text}}}
}

func message(term map[string]any) map[string]any {
	return term["result"].(map[string]any)["message"].(map[string]any)
}

// firstText is the first text block of a message (or its content when that
// is a plain string).
func firstText(msg map[string]any) string {
	if s, ok := msg["content"].(string); ok {
		return s
	}
	for _, b := range msg["content"].([]any) {
		if bm := b.(map[string]any); bm["type"] == "text" {
			return bm["text"].(string)
		}
	}
	return ""
}

// events lists every event of the session through s.
func events(t *testing.T, s *testenv.Server, sid, sk string) []map[string]any {
	t.Helper()
	var out []map[string]any
	cursor := ""
	for {
		r := s.Client(t, http.MethodGet, "/api/v1/sessions/"+sid+"/events?limit=200&cursor="+cursor, sk, nil)
		require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
		for _, it := range r.Body["items"].([]any) {
			out = append(out, it.(map[string]any))
		}
		if r.Body["next_cursor"] == nil {
			return out
		}
		cursor = r.Body["next_cursor"].(string)
	}
}

// A session opened on replica A is driven through replica B with the same
// session key, and A serves the stored turn afterwards.

func TestOpenOnADriveOnB(t *testing.T) {
	r := startReplicas(t)
	_, key := r.a.Key(t, r.pid)
	sid, sk := r.a.Open(t, key, nil)
	r.b.Call(t, sid, sk, "session.registerDriver", nil)
	r.fake.Enqueue(fakeprovider.Text("answered via B"))

	term := testenv.Terminal(t, r.b.RPC(t, sid, sk, sendRequest(1, "hello through B")))
	require.Contains(t, term, "result", "%v", term)
	assert.Equal(t, "answered via B", firstText(message(term)))

	var seq []string
	for _, ev := range events(t, r.a, sid, sk) {
		seq = append(seq, ev["event_type"].(string))
	}
	assert.Equal(t, []string{"session.open", "session.driver.register", "client.message.send", "provider.request", "provider.response", "server.message.send"}, seq)
	assert.Equal(t, 1, r.fake.RequestCount())
}

// An observer subscribed on replica B sees, live, a turn that a driver runs
// through replica A, including while its provider call is still in flight.
func TestSubscribeOnBToTurnOnA(t *testing.T) {
	r := startReplicas(t)
	_, key := r.a.Key(t, r.pid)
	sid, sk := r.a.Open(t, key, nil)
	r.a.Call(t, sid, sk, "session.registerDriver", nil)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	obs := r.b.RPCStream(t, ctx, sid, sk, map[string]any{"jsonrpc": "2.0", "id": 7, "method": "session.subscribe", "params": map[string]any{}})
	defer obs.Close()

	r.fake.Enqueue(fakeprovider.Text("slow answer").UntilReleased())
	turn := r.a.RPCStream(t, ctx, sid, sk, sendRequest(1, "run on A"))
	defer turn.Close()
	<-r.fake.Started()

	next := func() string {
		t.Helper()
		m := obs.Next(30 * time.Second)
		require.NotNil(t, m, "observer on B got no event")
		return m["params"].(map[string]any)["event_type"].(string)
	}
	// Before the provider answers, B has already relayed what A stored.
	assert.Equal(t, "client.message.send", next())
	assert.Equal(t, "provider.request", next())
	r.fake.Release()
	assert.Equal(t, "provider.response", next())
	assert.Equal(t, "server.message.send", next())

	var last map[string]any
	for m := range turn.Lines() {
		last = m
	}
	require.Contains(t, last, "result", "%v", last)
	assert.Equal(t, "slow answer", firstText(message(last)))
}

// BAE's FIFO has no cap: 60 drivers on one session, each sending one message
// 50 ms after the previous to a provider that takes 500 ms, are all answered
// in strict arrival order and none is refused, on a Temporal server with its
// stock dynamic config (history.maxInFlightUpdates = 10, as on Temporal
// Cloud). The drivers alternate between the two replicas. It failed while
// a queued sendMessage was an in-flight Update (most of the 60 lost their
// place); queued messages are signals now.
func TestSixtyDriversFIFOOnStockLimits(t *testing.T) {
	const drivers = 60
	r := startReplicasEnv(t, uncappedQueue)
	r.fake.Respond(func(fakeprovider.Recorded) fakeprovider.Reply {
		return fakeprovider.Echo().After(500 * time.Millisecond)
	})
	_, key := r.a.Key(t, r.pid)
	sid, sk := r.a.Open(t, key, nil)
	keys := make([]string, drivers)
	via := make([]*testenv.Server, drivers)
	keys[0], via[0] = sk, r.a
	for i := 1; i < drivers; i++ {
		via[i] = r.a
		if i%2 == 1 {
			via[i] = r.b
		}
		_, k := r.a.Key(t, r.pid)
		keys[i] = via[i].Join(t, sid, k, nil)
	}
	for i := range drivers {
		via[i].Call(t, sid, keys[i], "session.registerDriver", nil)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	text := func(i int) string { return fmt.Sprintf("message %02d", i) }
	terms := make([]map[string]any, drivers)
	var wg sync.WaitGroup
	tick := time.NewTicker(50 * time.Millisecond) // the load's shape, not synchronisation
	defer tick.Stop()
	for i := range drivers {
		if i > 0 {
			<-tick.C
		}
		st := via[i].RPCStream(t, ctx, sid, keys[i], sendRequest(i+1, text(i)))
		wg.Go(func() {
			defer st.Close()
			for m := range st.Lines() {
				terms[i] = m
			}
		})
	}
	wg.Wait()

	var refused []string
	for i, term := range terms {
		switch {
		case term == nil:
			refused = append(refused, fmt.Sprintf("%d: no reply", i))
		case term["error"] != nil:
			refused = append(refused, fmt.Sprintf("%d: %v", i, term["error"]))
		case firstText(message(term)) != "echo: "+text(i):
			refused = append(refused, fmt.Sprintf("%d: answered %q", i, firstText(message(term))))
		}
	}
	assert.Empty(t, refused, "%d of %d drivers were not answered with their own message", len(refused), drivers)

	var order []string
	for _, ev := range events(t, r.a, sid, sk) {
		if ev["event_type"] == "client.message.send" {
			p := ev["payload"].(map[string]any)
			order = append(order, firstText(p))
		}
	}
	want := make([]string, drivers)
	displaced := 0
	for i := range want {
		want[i] = text(i)
		if i < len(order) && order[i] != want[i] {
			displaced++
		}
	}
	assert.Equal(t, want, order, "turns ran in arrival order: %d of %d out of place", displaced, drivers)
}
