package tests

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/testenv"
)

// TestQueuedTurnsAreCapped is the attack of issue 35's finding 5 on the
// queue: a driver stores turns behind a running one and hangs up, so they
// would run later whatever it sent. Turns stored and not yet begun are
// capped per session (BAE_MAX_QUEUED_TURNS_PER_SESSION) and per client key
// over its sessions (BAE_MAX_QUEUED_TURNS_PER_KEY), counted in PostgreSQL:
// the cap holds across two replicas, the one past it is refused with
// -32000 quota_exceeded and stores nothing, and a turn that begins frees
// its place.
func TestQueuedTurnsAreCapped(t *testing.T) {
	fake := fakeprovider.New(t)
	a, b := startReplicaPairEnv(t, fake.URL(), "queuecap", map[string]string{
		"BAE_MAX_QUEUED_TURNS_PER_SESSION": "3", "BAE_MAX_QUEUED_TURNS_PER_KEY": "5",
	})
	pid := a.Profile(t, map[string]any{"name": "main", "primary_provider": "primary"})
	_, key := a.Key(t, pid)
	one, oneKey := a.Open(t, key, nil)
	two, twoKey := a.Open(t, key, nil)
	for _, sess := range [][2]string{{one, oneKey}, {two, twoKey}} {
		reg := testenv.Terminal(t, a.Call(t, sess[0], sess[1], "session.registerDriver", nil))
		require.Contains(t, reg, "result", "%v", reg)
	}
	db, err := pgx.Connect(context.Background(), a.DatabaseURL)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close(context.Background()) })
	stored := func(sid string) int {
		var n int
		require.NoError(t, db.QueryRow(context.Background(), `SELECT count(*) FROM turn_inputs WHERE session_id = $1`, sid).Scan(&n))
		return n
	}
	refusal := func(srv *testenv.Server, sid, sk string) string {
		term := testenv.Terminal(t, srv.Call(t, sid, sk, "session.sendMessage", map[string]any{"message": map[string]any{"role": "user", "content": "one too many"}}))
		return rpcError(t, term, -32000)
	}

	// Each session's first turn begins and holds its provider call.
	fake.Enqueue(fakeprovider.Text("held").UntilReleased(), fakeprovider.Text("held").UntilReleased())
	t.Cleanup(fake.Release)
	hangUpCtx, hangUp := context.WithCancel(context.Background())
	defer hangUp()
	running := a.RPCStream(t, hangUpCtx, one, oneKey, sendBody("running"))
	require.Equal(t, http.StatusOK, running.Status())
	waitEvent(t, running, "provider.request")

	// Three queued on one, through both replicas; the driver hangs up.
	for i, srv := range []*testenv.Server{a, b, a} {
		st := srv.RPCStream(t, hangUpCtx, one, oneKey, sendBody(fmt.Sprintf("queued %d", i)))
		require.Equal(t, http.StatusOK, st.Status())
	}
	hangUp()
	assert.Equal(t, "quota_exceeded: this session already has 3 turns queued and not yet started, the most allowed; wait for one to start", refusal(b, one, oneKey))
	assert.Equal(t, 4, stored(one), "the refused message was not stored")
	// Refused before it would interrupt the running turn for its place.
	// (Without that it would take the interrupted turn's place and wait
	// behind the held turns: the deadline ends the wait.)
	busyCtx, busyDone := context.WithTimeout(context.Background(), 30*time.Second)
	defer busyDone()
	busy := b.RPCStreamHeader(t, busyCtx, one, oneKey, sendBody("make room"), http.Header{"Bae-When-Busy": {"interrupt"}})
	var last map[string]any
	for m := range busy.Lines() {
		last = m
	}
	assert.Contains(t, rpcError(t, last, -32000), "quota_exceeded: this session already has 3 turns queued")
	assert.Equal(t, 4, stored(one))

	// The key's cap counts its queued turns over its sessions.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	first := b.RPCStream(t, ctx, two, twoKey, sendBody("running on two"))
	require.Equal(t, http.StatusOK, first.Status())
	waitEvent(t, first, "provider.request")
	var queuedOnTwo []*testenv.Stream
	for i, srv := range []*testenv.Server{b, a} {
		st := srv.RPCStream(t, ctx, two, twoKey, sendBody(fmt.Sprintf("queued on two %d", i)))
		require.Equal(t, http.StatusOK, st.Status())
		queuedOnTwo = append(queuedOnTwo, st)
	}
	assert.Contains(t, refusal(a, two, twoKey), "quota_exceeded: this client key already has 5 turns queued and not yet started")
	assert.Equal(t, 3, stored(two))

	// Once the queue has run, there is room again.
	fake.Release()
	sub := a.RPCStream(t, ctx, one, oneKey, map[string]any{"jsonrpc": "2.0", "id": 2, "method": "session.subscribe", "params": map[string]any{"since_event_id": "evt_none"}})
	defer sub.Close()
	// The running turn and the three queued answer in turn: none was
	// interrupted.
	for replies := 0; replies < 4; {
		m := sub.Next(30 * time.Second)
		require.NotNil(t, m, "waiting for the queued turns' replies")
		ev := m["params"].(map[string]any)
		require.NotEqual(t, "server.message.interrupted", ev["event_type"])
		if ev["event_type"] == "server.message.send" {
			replies++
		}
	}
	term := testenv.Terminal(t, a.Call(t, one, oneKey, "session.sendMessage", map[string]any{"message": map[string]any{"role": "user", "content": "room again"}}))
	require.Nil(t, term["error"], "%v", term["error"])
	for _, st := range queuedOnTwo {
		for range st.Lines() {
		}
	}
}
