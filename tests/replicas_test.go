package tests

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/api"
	"github.com/bae-go/bae-go/internal/app"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/testdb"
	"github.com/bae-go/bae-go/internal/testing/testenv"
)

// TestTwoReplicasShareSessions runs two servers on one PostgreSQL and one
// Temporal: drivers on different replicas keep FIFO order on one session,
// and an observer on replica B sees events produced on replica A.
func TestTwoReplicasShareSessions(t *testing.T) {
	fake, a, b := twoReplicas(t, "replicas", nil)
	pid := a.Profile(t, map[string]any{"name": "main", "primary_provider": "primary"})
	keyA, clientA := a.Key(t, pid)
	keyB, clientB := b.Key(t, pid)
	sid, skA := a.Open(t, clientA, nil)
	skB := b.Join(t, sid, clientB, nil)
	// Registered on A, sending on B (and vice versa) must work.
	a.Call(t, sid, skB, "session.registerDriver", nil)
	b.Call(t, sid, skA, "session.registerDriver", nil)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	obs := b.RPCStream(t, ctx, sid, skB, map[string]any{"jsonrpc": "2.0", "id": 7, "method": "session.subscribe", "params": map[string]any{}})
	defer obs.Close()

	fake.Enqueue(fakeprovider.Text("first").UntilReleased(), fakeprovider.Text("second"))
	send := func(s *testenv.Server, sk, text string) *testenv.Stream {
		return s.RPCStream(t, ctx, sid, sk, map[string]any{"jsonrpc": "2.0", "id": 1, "method": "session.sendMessage", "params": map[string]any{"message": map[string]any{"content": text}}})
	}
	sa := send(a, skA, "from A via replica A")
	defer sa.Close()
	<-fake.Started()
	sb := send(b, skB, "from B via replica B")
	defer sb.Close()
	assert.Nil(t, sb.Next(500*time.Millisecond), "B is queued behind A's turn across replicas")
	fake.Release()
	var last map[string]any
	for m := range sa.Lines() {
		last = m
	}
	assert.Equal(t, "first", firstText(message(last)))
	for m := range sb.Lines() {
		last = m
	}
	assert.Equal(t, "second", firstText(message(last)))

	// The observer on B saw A's turn (produced by A's handler) live.
	var seen []string
	for len(seen) < 8 {
		m := obs.Next(10 * time.Second)
		require.NotNil(t, m, "observer events, have %v", seen)
		ev := m["params"].(map[string]any)
		who := "A"
		if ev["client_key_id"] == keyB {
			who = "B"
		}
		seen = append(seen, who+":"+ev["event_type"].(string))
	}
	assert.Equal(t, []string{
		"A:client.message.send", "A:provider.request", "A:provider.response", "A:server.message.send",
		"B:client.message.send", "B:provider.request", "B:provider.response", "B:server.message.send",
	}, seen)
	parts := a.Client(t, http.MethodGet, "/api/v1/sessions/"+sid+"/participants", skA, nil)
	assert.ElementsMatch(t, []any{keyA, keyB}, parts.Body["drivers"])
}

// TestReplicaHearsTurnsRunOnAnother pins every turn onto replica A (B's
// worker is stopped: no workflow task, no activity and no commit of a
// turn happens on B) and waits on replica B: B's observer must get the
// events of a turn A ran, and B's driver the result of its own turn, run
// by A after a turn that held the session busy (so it went to the queue,
// not as an Update whose answer would come back to B directly). Each must
// reach B in less than half the fallback polls' interval (the stream's
// re-check, api.DefaultRecheckInterval, and the result wait's check,
// api.TurnCheckInterval): only A's notices (LISTEN/NOTIFY on the events
// and turns channels) bring them that soon.
func TestReplicaHearsTurnsRunOnAnother(t *testing.T) {
	fake, a, b := twoReplicas(t, "replicas-notices", nil)
	b.Parts.Worker.Stop()
	bound := min(api.DefaultRecheckInterval, api.TurnCheckInterval) / 2

	pid := a.Profile(t, map[string]any{"name": "main", "primary_provider": "primary"})
	_, clientA := a.Key(t, pid)
	_, clientB := b.Key(t, pid)
	sid, skA := a.Open(t, clientA, nil)
	skB := b.Join(t, sid, clientB, nil)
	a.Call(t, sid, skA, "session.registerDriver", nil)
	b.Call(t, sid, skB, "session.registerDriver", nil)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	obs := b.RPCStream(t, ctx, sid, skB, map[string]any{"jsonrpc": "2.0", "id": 7, "method": "session.subscribe", "params": map[string]any{}})
	defer obs.Close()
	require.Equal(t, http.StatusOK, obs.Status())
	obsLines := arrivals(obs)
	// observed reads B's observer up to the next server.message.send and
	// returns the event types read, and how long after since it came.
	observed := func(since time.Time) ([]string, time.Duration) {
		t.Helper()
		var seen []string
		for {
			l := nextArrival(obsLines, 4*bound)
			require.NotNil(t, l.m, "B's observer, have %v", seen)
			if l.m["method"] != "session.event" {
				continue
			}
			typ := l.m["params"].(map[string]any)["event_type"].(string)
			seen = append(seen, typ)
			if typ == "server.message.send" {
				return seen, l.at.Sub(since)
			}
		}
	}
	turnEvents := []string{"client.message.send", "provider.request", "provider.response", "server.message.send"}

	// A turn sent and run on A: B's observer hears of its events.
	fake.Enqueue(fakeprovider.Text("one"))
	term := testenv.Terminal(t, a.RPC(t, sid, skA, sendReq(1, "on A")))
	answered := time.Now()
	require.Equal(t, "one", firstText(message(term)))
	<-fake.Started()
	seen, late := observed(answered)
	assert.Equal(t, turnEvents, seen)
	t.Logf("B's observer: A's turn %v after A's driver", late)
	assert.Less(t, late, bound, "B's observer got A's turn %v after A's driver", late)

	// A turn sent on B while A's turn holds the session: queued, run on
	// A, its result announced to B.
	fake.Enqueue(fakeprovider.Text("held").UntilReleased(), fakeprovider.Text("queued"))
	sa := a.RPCStream(t, ctx, sid, skA, sendReq(1, "held on A"))
	defer sa.Close()
	<-fake.Started()
	// Open once B stored the turn, behind A's.
	sb := b.RPCStream(t, ctx, sid, skB, sendReq(1, "queued on B"))
	defer sb.Close()
	require.Equal(t, http.StatusOK, sb.Status())
	fake.Release()
	released := time.Now()
	var last arrival
	for l := range arrivals(sb) {
		last = l
	}
	require.NotNil(t, last.m, "B's driver got no result")
	late = last.at.Sub(released)
	t.Logf("B's driver: its result %v after A's turn was let go", late)
	require.Nil(t, last.m["error"], "%v", last.m["error"])
	assert.Equal(t, "queued", firstText(message(last.m)))
	assert.Less(t, late, bound, "B's driver got its result %v after A's turn was let go", late)
	seen, late = observed(released)
	assert.Equal(t, turnEvents, seen, "A's held turn")
	seen, late2 := observed(released)
	assert.Equal(t, turnEvents, seen, "B's turn")
	t.Logf("B's observer: the two turns %v and %v after A's turn was let go", late, late2)
	assert.Less(t, max(late, late2), bound, "B's observer got the two turns %v and %v after A's turn was let go", late, late2)
}

// arrival is a stream's object and when it came.
type arrival struct {
	m  map[string]any
	at time.Time
}

// arrivals stamps each object of st as it comes, so a test reading
// several streams one after the other still knows when each came.
func arrivals(st *testenv.Stream) <-chan arrival {
	out := make(chan arrival, 1024)
	go func() {
		defer close(out)
		for m := range st.Lines() {
			out <- arrival{m, time.Now()}
		}
	}()
	return out
}

// nextArrival is the next of ls, or nothing when ls ended or within
// timeout nothing came.
func nextArrival(ls <-chan arrival, timeout time.Duration) arrival {
	select {
	case l := <-ls:
		return l
	case <-time.After(timeout):
		return arrival{}
	}
}

// twoReplicas starts two servers on one PostgreSQL database, one Temporal
// and one task queue, with the fake provider as their primary.
func twoReplicas(t *testing.T, queue string, extend func(*app.Parts) error) (*fakeprovider.Server, *testenv.Server, *testenv.Server) {
	t.Helper()
	fake := fakeprovider.New(t)
	opts := testenv.Options{
		DatabaseURL: testdb.New(t),
		Temporal:    testenv.Temporal(t).GetDefaultClient(),
		DataDir:     t.TempDir(),
		ConfigTOML:  testenv.PrimaryProviderTOML(fake.URL()),
		Env:         map[string]string{"BAE_TASK_QUEUE": queue},
		Extend:      extend,
	}
	return fake, testenv.Start(t, opts), testenv.Start(t, opts)
}
