package tests

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/testdb"
	"github.com/bae-go/bae-go/internal/testing/testenv"
)

// TestTwoReplicasShareSessions runs two servers on one PostgreSQL and one
// Temporal: drivers on different replicas keep FIFO order on one session,
// and an observer on replica B sees events produced on replica A.
func TestTwoReplicasShareSessions(t *testing.T) {
	fake := fakeprovider.New(t)
	ts := testenv.Temporal(t)
	opts := testenv.Options{
		DatabaseURL: testdb.New(t),
		Temporal:    ts.GetDefaultClient(),
		DataDir:     t.TempDir(),
		ConfigTOML:  testenv.PrimaryProviderTOML(fake.URL()),
		Env:         map[string]string{"BAE_TASK_QUEUE": "replicas"},
	}
	a := testenv.Start(t, opts)
	b := testenv.Start(t, opts)
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
