package tests

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/testdb"
	"github.com/bae-go/bae-go/internal/testing/testenv"
	"github.com/bae-go/bae-go/store"
)

// TestTurnSurvivesServerRestart stops the whole server (HTTP, worker) while
// a provider call is in flight, starts a new one on the same database and
// Temporal, and checks the turn completes exactly once.
func TestTurnSurvivesServerRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("restart test")
	}
	fake := fakeprovider.New(t)
	ts := testenv.Temporal(t)
	opts := testenv.Options{
		DatabaseURL: testdb.New(t),
		DataDir:     t.TempDir(),
		Temporal:    ts.GetDefaultClient(),
		ConfigTOML:  testenv.PrimaryProviderTOML(fake.URL()),
		Env:         map[string]string{"BAE_TASK_QUEUE": "durable", "BAE_ACTIVITY_HEARTBEAT_TIMEOUT": "1s"},
	}
	a := testenv.Start(t, opts)
	pid := a.Profile(t, map[string]any{"name": "main", "primary_provider": "primary"})
	_, key := a.Key(t, pid)
	sid, sk := a.Open(t, key, nil)
	a.Call(t, sid, sk, "session.registerDriver", nil)

	fake.Enqueue(fakeprovider.Text("lost").UntilReleased(), fakeprovider.Text("answered after restart"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stream := a.RPCStream(t, ctx, sid, sk, map[string]any{"jsonrpc": "2.0", "id": 1, "method": "session.sendMessage", "params": map[string]any{"message": map[string]any{"content": "survive this"}}})
	defer stream.Close()
	select {
	case <-fake.Started():
	case <-ctx.Done():
		t.Fatal("the provider call never started")
	}
	a.Stop() // mid provider call: the stream breaks, the activity is abandoned
	fake.Release()

	// A client whose stream broke recovers the turn from the log of a new server.
	b := testenv.Start(t, opts)
	obs := b.RPCStream(t, ctx, sid, sk, map[string]any{"jsonrpc": "2.0", "id": 2, "method": "session.subscribe", "params": map[string]any{"since_event_id": "evt_from_before_time"}})
	defer obs.Close()
	var answer map[string]any
	for answer == nil {
		m := obs.Next(time.Minute)
		require.NotNil(t, m, "the turn completes after the restart")
		ev := m["params"].(map[string]any)
		if ev["event_type"] == "server.message.send" {
			answer = ev
		}
	}
	text := answer["payload"].(map[string]any)["content"].([]any)[0].(map[string]any)["text"]
	assert.Equal(t, "answered after restart", text)

	r := b.Client(t, "GET", "/api/v1/sessions/"+sid+"/events?limit=200", sk, nil)
	require.Equal(t, 200, r.Status)
	counts := map[string]int{}
	for i, it := range r.Body["items"].([]any) {
		ev := it.(map[string]any)
		counts[ev["event_type"].(string)]++
		_ = i
	}
	assert.Equal(t, map[string]int{
		"session.open": 1, "session.driver.register": 1, "client.message.send": 1,
		"provider.request": 1, "provider.response": 1, "server.message.send": 1,
	}, counts, "no missing or duplicate events")
	assert.Equal(t, 2, fake.RequestCount(), "the interrupted call was retried once")

	// The session keeps working on the new server.
	objs := b.Call(t, sid, sk, "session.sendMessage", map[string]any{"message": map[string]any{"content": "still here?"}})
	res := testenv.Terminal(t, objs)["result"].(map[string]any)
	assert.Equal(t, "echo: still here?", res["message"].(map[string]any)["content"].([]any)[0].(map[string]any)["text"])
}

// TestSessionSurvivesLostWorkflow: when a session is open in PostgreSQL but
// its workflow is gone (Temporal data lost, or terminated by an operator),
// the next sendMessage starts a new run and the session carries on.
func TestSessionSurvivesLostWorkflow(t *testing.T) {
	e := newEnv(t, envOpts{})
	d := e.open()
	_, term := d.send("before")
	require.Equal(t, "echo: before", firstText(message(term)))
	require.NoError(t, e.srv.Temporal.TerminateWorkflow(context.Background(), d.sid, "", "simulated loss"))
	_, term = d.send("after")
	require.NotNil(t, term["result"], "%v", term)
	assert.Equal(t, "echo: after", firstText(message(term)))
	// The conversation survived: the provider saw both turns.
	reqs := e.fake.Requests()
	assert.Len(t, reqs[len(reqs)-1].Messages(), 3)
}

// TestLostSubmissionIsResubmitted: a message stored for a turn whose
// Enqueue signal never reached the workflow (the server died in
// between) is found by the orphan sweep and runs once.
func TestLostSubmissionIsResubmitted(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the orphan sweep")
	}
	e := newEnv(t, envOpts{})
	d := e.open()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	obs := e.srv.RPCStream(t, ctx, d.sid, d.sk, map[string]any{"jsonrpc": "2.0", "id": 5, "method": "session.subscribe", "params": map[string]any{}})
	defer obs.Close()
	// Store the message exactly as the handler does, but never submit it.
	_, err := e.srv.Parts.Store.PutTurnInput(ctx, d.sid, "trn_lostsubmission0000000000000000", d.keyID, []byte(`{"role":"user","content":"was I lost?"}`), "", store.Caps{})
	require.NoError(t, err)
	answer := waitEvent(t, obs, "server.message.send")
	assert.Equal(t, "echo: was I lost?", answer["payload"].(map[string]any)["content"].([]any)[0].(map[string]any)["text"])
	counts := map[string]int{}
	for _, ev := range d.allEvents() {
		counts[ev["event_type"].(string)]++
	}
	assert.Equal(t, 1, counts["client.message.send"])
	assert.Equal(t, 1, counts["server.message.send"])
}
