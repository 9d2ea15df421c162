package tests

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/app"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/testenv"
)

// endsWithin reads st until it ends, failing unless that happens within d
// and the last line is a JSON-RPC error; it returns that error and the
// session.event notifications seen on the way.
func endsWithin(t *testing.T, st *testenv.Stream, d time.Duration) (map[string]any, []string) {
	t.Helper()
	deadline := time.After(d)
	var last map[string]any
	var seen []string
	for {
		select {
		case m, ok := <-st.Lines():
			if !ok {
				require.NotNil(t, last, "the stream ended without a line")
				errObj, _ := last["error"].(map[string]any)
				require.NotNil(t, errObj, "the last line is not an error: %v", last)
				return errObj, seen
			}
			last = m
			if m["method"] == "session.event" {
				seen = append(seen, m["params"].(map[string]any)["event_type"].(string))
			}
		case <-deadline:
			require.FailNow(t, fmt.Sprintf("the stream was still open after %s", d), "events seen: %v", seen)
		}
	}
}

// TestRevocationEndsLiveStreamsOnEveryReplica: revoking a client key ends
// its subscribe stream and its queued sendMessage on the other replica
// within a second, the queued turn never runs, and the session goes on
// for the other driver; closing the session ends the remaining streams.
func TestRevocationEndsLiveStreamsOnEveryReplica(t *testing.T) {
	// A recheck interval far beyond the test's deadlines: only the
	// LISTEN/NOTIFY announcements can end the streams in time.
	fake, a, b := twoReplicas(t, "liveauth", func(p *app.Parts) error {
		p.Deps.RecheckInterval = time.Hour
		return nil
	})
	pid := a.Profile(t, map[string]any{"name": "main", "primary_provider": "primary"})
	_, clientA := a.Key(t, pid)
	keyB, clientB := b.Key(t, pid)
	sid, skA := a.Open(t, clientA, nil)
	skB := b.Join(t, sid, clientB, nil)
	a.Call(t, sid, skA, "session.registerDriver", nil)
	b.Call(t, sid, skB, "session.registerDriver", nil)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	subscribe := func(s *testenv.Server, sk string) *testenv.Stream {
		st := s.RPCStream(t, ctx, sid, sk, map[string]any{"jsonrpc": "2.0", "id": 9, "method": "session.subscribe", "params": map[string]any{}})
		require.Equal(t, http.StatusOK, st.Status())
		return st
	}
	send := func(s *testenv.Server, sk, text string) *testenv.Stream {
		return s.RPCStream(t, ctx, sid, sk, map[string]any{"jsonrpc": "2.0", "id": 1, "method": "session.sendMessage", "params": map[string]any{"message": map[string]any{"content": text}}})
	}
	obsB := subscribe(b, skB)
	defer obsB.Close()
	obsA := subscribe(b, skA) // A's observer, also on replica B
	defer obsA.Close()

	// A's turn holds the session; B's message queues behind it on replica B.
	fake.Enqueue(fakeprovider.Text("first").UntilReleased(), fakeprovider.Text("after revocation"))
	sa := send(a, skA, "from A")
	defer sa.Close()
	<-fake.Started()
	sb := send(b, skB, "from B, queued")
	defer sb.Close()
	require.Nil(t, sb.Next(300*time.Millisecond), "B is queued")

	// Revoke B's key through replica A's admin port.
	rr := a.Admin(t, http.MethodDelete, "/admin/v1/keys/"+keyB, nil)
	require.Equal(t, http.StatusNoContent, rr.Status, string(rr.Raw))
	errObj, _ := endsWithin(t, sb, time.Second)
	assert.EqualValues(t, -32000, errObj["code"])
	assert.Contains(t, errObj["message"], "revoked")
	errObj, _ = endsWithin(t, obsB, time.Second)
	assert.EqualValues(t, -32000, errObj["code"])
	assert.Contains(t, errObj["message"], "revoked")

	// A's turn finishes; B's queued message never runs.
	fake.Release()
	var last map[string]any
	for m := range sa.Lines() {
		last = m
	}
	assert.Equal(t, "first", firstText(message(last)))
	objs := a.Call(t, sid, skA, "session.sendMessage", map[string]any{"message": map[string]any{"content": "A again"}})
	assert.Equal(t, "after revocation", firstText(message(testenv.Terminal(t, objs))))
	for _, req := range fake.Requests() {
		assert.NotContains(t, req.LastUserText(), "from B")
	}
	ev := a.Client(t, http.MethodGet, "/api/v1/sessions/"+sid+"/events?limit=200", skA, nil)
	require.Equal(t, http.StatusOK, ev.Status)
	for _, it := range ev.Body["items"].([]any) {
		e := it.(map[string]any)
		if e["client_key_id"] == keyB {
			assert.NotEqual(t, "client.message.send", e["event_type"], "the revoked key's queued message ran")
		}
	}

	// Closing the session (via replica A) ends A's observer on replica B.
	rc := a.Client(t, http.MethodDelete, "/api/v1/sessions/"+sid, skA, nil)
	require.Equal(t, http.StatusOK, rc.Status, string(rc.Raw))
	errObj, _ = endsWithin(t, obsA, time.Second+500*time.Millisecond)
	assert.EqualValues(t, -32000, errObj["code"])
	assert.Contains(t, errObj["message"], "not open")
}

// TestStreamsRecheckStoredAuthorization: a revocation or deletion that no
// notification announced (written straight to PostgreSQL) still ends the
// streams that depend on it, at the next periodic re-check.
func TestStreamsRecheckStoredAuthorization(t *testing.T) {
	e := newEnvWith(t, envOpts{}, func(p *app.Parts) error {
		p.Deps.RecheckInterval = 100 * time.Millisecond
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, e.srv.DatabaseURL)
	require.NoError(t, err)
	defer pool.Close()

	a := e.open()
	obs := e.srv.RPCStream(t, ctx, a.sid, a.sk, map[string]any{"jsonrpc": "2.0", "id": 3, "method": "session.subscribe", "params": map[string]any{}})
	defer obs.Close()
	require.Nil(t, obs.Next(300*time.Millisecond), "the stream stays open while authorized")
	_, err = pool.Exec(ctx, `UPDATE keys SET deleted_at = now() WHERE id = $1`, a.keyID)
	require.NoError(t, err)
	errObj, _ := endsWithin(t, obs, time.Second)
	assert.EqualValues(t, -32000, errObj["code"])
	assert.Contains(t, errObj["message"], "revoked")

	b := e.open()
	obs = e.srv.RPCStream(t, ctx, b.sid, b.sk, map[string]any{"jsonrpc": "2.0", "id": 3, "method": "session.subscribe", "params": map[string]any{}})
	defer obs.Close()
	require.Nil(t, obs.Next(300*time.Millisecond))
	_, err = pool.Exec(ctx, `UPDATE profiles SET deleted_at = now() WHERE id = $1`, e.pid)
	require.NoError(t, err)
	errObj, _ = endsWithin(t, obs, time.Second)
	assert.EqualValues(t, -32000, errObj["code"])
	assert.Contains(t, errObj["message"], "profile_unavailable")
}
