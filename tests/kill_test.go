package tests

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/procserver"
	"github.com/bae-go/bae-go/internal/testing/testdb"
	"github.com/bae-go/bae-go/internal/testing/testenv"
)

// killableServer is what the SIGKILL tests share: a baesrv binary (built
// once per run, or BAE_CRASH_BAESRV), a database and a Temporal that
// outlive every baesrv process.
type killableServer struct {
	bin string
	db  string
	dir string // the replicas' shared data dir (admin key)
}

var (
	baesrvOnce sync.Once
	baesrvBin  string
	baesrvErr  error
)

func newKillable(t *testing.T) killableServer {
	t.Helper()
	if testing.Short() {
		t.Skip("kill test: builds baesrv and SIGKILLs it")
	}
	baesrvOnce.Do(func() {
		if baesrvBin = os.Getenv("BAE_CRASH_BAESRV"); baesrvBin == "" {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			baesrvBin, baesrvErr = procserver.Build(ctx)
		}
	})
	require.NoError(t, baesrvErr)
	return killableServer{bin: baesrvBin, db: testdb.New(t), dir: t.TempDir()}
}

// sendKeyed posts a sendMessage under an Idempotency-Key on api.
func sendKeyed(t *testing.T, ctx context.Context, api *testenv.Server, sid, sk, key string, content any, header http.Header) *testenv.Stream {
	t.Helper()
	h := http.Header{"Idempotency-Key": {key}}
	for k, v := range header {
		h[k] = v
	}
	return api.RPCStreamHeader(t, ctx, sid, sk, map[string]any{"jsonrpc": "2.0", "id": 1, "method": "session.sendMessage",
		"params": map[string]any{"message": map[string]any{"role": "user", "content": content}}}, h)
}

// terminalOf reads a stream to its terminal object (nil if it broke first).
func terminalOf(st *testenv.Stream, timeout time.Duration) map[string]any {
	for {
		m := st.Next(timeout)
		if m == nil || m["id"] != nil {
			return m
		}
	}
}

// eventsOf reads a session's whole log through api.
func eventsOf(t *testing.T, api *testenv.Server, sid, sk string) []map[string]any {
	d := &driver{e: &env{t: t, srv: api}, sid: sid, sk: sk}
	return d.allEvents()
}

// TestSIGKILLDuringSummarizing: the server process is SIGKILLed while the
// summarizer's provider call is in flight (the fake holds it until the
// process is gone). After a restart the compaction activity runs again,
// the session has exactly one summary and one session.compaction event, and
// the turn that needed it completes with its answer.
func TestSIGKILLDuringSummarizing(t *testing.T) {
	ks := newKillable(t)
	fake := fakeprovider.New(t)
	lane := fake.Lane("small")
	lane.ContextWindow(windowTokens)
	summarizerCalls := make(chan struct{}, 16)
	var mu sync.Mutex
	first := true
	lane.Respond(func(rec fakeprovider.Recorded) fakeprovider.Reply {
		if !summarizing(rec) {
			return fakeprovider.Echo()
		}
		summarizerCalls <- struct{}{}
		mu.Lock()
		defer mu.Unlock()
		if first {
			first = false
			return fakeprovider.Text("never sent").UntilReleased() // until the process dies
		}
		return fakeprovider.Text("The user sent numbered messages.")
	})
	srv := procserver.Start(t, procserver.Options{
		Bin: ks.bin, DatabaseURL: ks.db, Temporal: procserver.Temporal(t), DataDir: ks.dir,
		ConfigTOML: fmt.Sprintf(`
[[providers.entries]]
name = "small"
provider = "anthropic"
base_url = %q
model = "small-model"
auth_token = "literal-token"
context_window = %d
max_tokens = 1000
`, lane.URL(), windowTokens),
	})
	api := srv.API
	pid := api.Profile(t, map[string]any{"name": "compacting", "primary_provider": "small", "allowed_tools": []string{}})
	_, ck := api.Key(t, pid)
	sid, sk := api.Open(t, ck, map[string]any{"client_version": "test"})
	api.Call(t, sid, sk, "session.registerDriver", nil)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	killedAt := -1
	for i := 0; i < 150 && killedAt < 0; i++ {
		st := sendKeyed(t, ctx, api, sid, sk, fmt.Sprintf("turn-%d", i), userText(i), nil)
		done := make(chan map[string]any, 1)
		go func() { done <- terminalOf(st, 2*time.Minute) }()
		select {
		case term := <-done:
			require.NotNil(t, term, "turn %d", i)
			require.Nil(t, term["error"], "turn %d: %v", i, term["error"])
		case <-summarizerCalls:
			// The summarizer is called: this process dies mid-call.
			srv.Kill()
			killedAt = i
			assert.Nil(t, <-done, "the stream broke with the process")
		}
		st.Close()
	}
	require.GreaterOrEqual(t, killedAt, 0, "the session never needed a summary")
	srv.Start()

	// The resent message relays the turn, which completes after the
	// summary is written on the new process.
	st := sendKeyed(t, ctx, api, sid, sk, fmt.Sprintf("turn-%d", killedAt), userText(killedAt), nil)
	term := terminalOf(st, 2*time.Minute)
	st.Close()
	require.NotNil(t, term, "the turn's result after the restart\n%s", srv.Log())
	require.Nil(t, term["error"], "%v", term["error"])
	assert.Equal(t, "echo: "+userText(killedAt), firstText(message(term)))
	assert.GreaterOrEqual(t, len(summarizerCalls), 1, "the summarizer was asked again after the restart")

	summaries := 0
	for _, ev := range eventsOf(t, api, sid, sk) {
		if ev["event_type"] == "session.compaction" && payload(ev)["layer"] == "summary" {
			summaries++
		}
	}
	assert.Equal(t, 1, summaries, "one session.compaction summary event")
	conn, err := pgx.Connect(ctx, ks.db)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var rows int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM session_summaries WHERE session_id = $1`, sid).Scan(&rows))
	assert.Equal(t, 1, rows, "one stored summary")

	// The session goes on.
	st = sendKeyed(t, ctx, api, sid, sk, "after", "still there?", nil)
	term = terminalOf(st, 2*time.Minute)
	st.Close()
	require.NotNil(t, term)
	require.Nil(t, term["error"], "%v", term["error"])
	assert.Zero(t, lane.Refusals())
}

// TestSupersededAfterSIGKILLMidStream: replica A runs the session's turns
// (it polls its own task queue); the driver is connected to replica B with
// deltas on. A is SIGKILLed while the provider streams the answer; B's
// stream then gets a superseded marker and the deltas of the attempt A's
// restarted process runs again, then the answer; the turn's events are
// stored once.
func TestSupersededAfterSIGKILLMidStream(t *testing.T) {
	ks := newKillable(t)
	fake := fakeprovider.New(t)
	temporal := procserver.Temporal(t)
	replica := func(queue string) *procserver.Server {
		return procserver.Start(t, procserver.Options{
			Bin: ks.bin, DatabaseURL: ks.db, Temporal: temporal, DataDir: ks.dir,
			Env:        map[string]string{"BAE_TASK_QUEUE": queue},
			ConfigTOML: testenv.PrimaryProviderTOML(fake.URL()),
		})
	}
	a := replica("replica-a")
	b := replica("replica-b")
	pid := a.API.Profile(t, map[string]any{"name": "main", "primary_provider": "primary", "allowed_tools": []string{}})
	_, ck := a.API.Key(t, pid)
	sid, sk := a.API.Open(t, ck, map[string]any{"client_version": "test"})
	a.API.Call(t, sid, sk, "session.registerDriver", nil)
	// The first turn, on A, starts the session's workflow on A's queue.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	st := sendKeyed(t, ctx, a.API, sid, sk, "warm", "hello", nil)
	require.NotNil(t, terminalOf(st, time.Minute))
	st.Close()

	const partial = "this partial answer is cut off when its process dies mid stream"
	const final = "the answer of the attempt run again after the restart"
	fake.Enqueue(fakeprovider.Text(partial).Streamed(12, 0).HangStream(4), fakeprovider.Text(final).Streamed(6, 0))
	drv := sendKeyed(t, ctx, b.API, sid, sk, "streamed", "tell me", deltasOn)
	require.Equal(t, http.StatusOK, drv.Status())

	var ds []map[string]any
	texts := 0
	for texts < 4 {
		m := drv.Next(30 * time.Second)
		require.NotNil(t, m, "deltas on B before the kill, have %v", ds)
		if isDelta(m) {
			ds = append(ds, m)
			if m["params"].(map[string]any)["type"] == "text_delta" {
				texts++
			}
		}
	}
	a.Kill()
	a.Start()

	var term map[string]any
	for term == nil {
		m := drv.Next(90 * time.Second)
		require.NotNil(t, m, "B's stream after the kill, have %d deltas\nA:\n%s\nB:\n%s", len(ds), a.Log(), b.Log())
		switch {
		case isDelta(m):
			ds = append(ds, m)
		case m["id"] != nil:
			term = m
		}
	}
	drv.Close()
	require.Nil(t, term["error"], "%v", term["error"])
	assert.Equal(t, final, firstText(message(term)))

	// The partial deltas, then a superseded marker, then the retry's.
	sup := -1
	for i, m := range ds {
		if m["params"].(map[string]any)["type"] == "superseded" {
			sup = i
		}
	}
	require.Positive(t, sup, "a superseded marker after the partial deltas: %v", ds)
	assert.Equal(t, final, joinText(ds), "after the marker, the deltas are the answer")
	prev := 0.0
	for _, m := range ds {
		seq := m["params"].(map[string]any)["seq"].(float64)
		assert.Greater(t, seq, prev, "the turn's sequence only grows")
		prev = seq
	}

	// Stored once: one request, one answer, one reply for the turn, and
	// for the whole log (the first turn's and this one's).
	turn := types(resultEvents(term))
	for _, typ := range []string{"client.message.send", "provider.request", "provider.response", "server.message.send"} {
		assert.Equal(t, 1, count(turn, typ), "%s in the turn: %v", typ, turn)
	}
	all := types(eventsOf(t, b.API, sid, sk))
	for _, typ := range []string{"client.message.send", "provider.request", "provider.response", "server.message.send"} {
		assert.Equal(t, 2, count(all, typ), "%s in the log: %v", typ, all)
	}
}
