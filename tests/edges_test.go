package tests

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/lib/tcpproxy"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/testdb"
	"github.com/bae-go/bae-go/internal/testing/testenv"
)

// edgeEnv is a server whose database connections may run through a proxy
// that simulates outages, with one primary provider and one open session.
type edgeEnv struct {
	srv   *testenv.Server
	fake  *fakeprovider.Server
	proxy *tcpproxy.Proxy
	dbURL string // direct, for the test's own statements
	sid   string
	sk    string
}

func newEdgeEnv(t *testing.T, env map[string]string) *edgeEnv {
	t.Helper()
	fake := fakeprovider.New(t)
	dbURL := testdb.New(t)
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	proxy, err := tcpproxy.Start(u.Host)
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	u.Host = proxy.Addr()
	srv := testenv.Start(t, testenv.Options{
		DatabaseURL: u.String(),
		ConfigTOML:  testenv.PrimaryProviderTOML(fake.URL()),
		Env:         env,
	})
	pid := srv.Profile(t, map[string]any{"name": "main", "primary_provider": "primary"})
	_, key := srv.Key(t, pid)
	sid, sk := srv.Open(t, key, nil)
	srv.Call(t, sid, sk, "session.registerDriver", nil)
	return &edgeEnv{srv: srv, fake: fake, proxy: proxy, dbURL: dbURL, sid: sid, sk: sk}
}

func (e *edgeEnv) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), e.dbURL)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(context.Background(), sql, args...)
	require.NoError(t, err)
}

func sendReq(id int, text string) map[string]any {
	return map[string]any{"jsonrpc": "2.0", "id": id, "method": "session.sendMessage", "params": map[string]any{"message": map[string]any{"role": "user", "content": text}}}
}

func eventCounts(t *testing.T, srv *testenv.Server, sid, sk string) map[string]int {
	t.Helper()
	r := srv.Client(t, http.MethodGet, "/api/v1/sessions/"+sid+"/events?limit=200", sk, nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	counts := map[string]int{}
	for _, it := range r.Body["items"].([]any) {
		counts[it.(map[string]any)["event_type"].(string)]++
	}
	return counts
}

// TestSendMessageStreamOpensOnlyOnceStored: the 200 of a sendMessage must
// not reach the client before its message is stored, or a crash in between
// loses a message the client saw accepted. The store step is held on an
// advisory lock, and the response must not have started meanwhile.
func TestSendMessageStreamOpensOnlyOnceStored(t *testing.T) {
	e := newEdgeEnv(t, nil)
	// Hold every turn_inputs insert until the test releases the lock.
	e.exec(t, `CREATE FUNCTION hold_turn_input() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN PERFORM pg_advisory_xact_lock(4242); RETURN NEW; END $$`)
	e.exec(t, `CREATE TRIGGER hold BEFORE INSERT ON turn_inputs FOR EACH ROW EXECUTE FUNCTION hold_turn_input()`)
	ctx := context.Background()
	lock, err := pgx.Connect(ctx, e.dbURL)
	require.NoError(t, err)
	defer lock.Close(ctx)
	_, err = lock.Exec(ctx, `SELECT pg_advisory_lock(4242)`)
	require.NoError(t, err)

	opened := make(chan *http.Response, 1)
	go func() {
		body, _ := json.Marshal(sendReq(1, "stored first"))
		req, _ := http.NewRequest(http.MethodPost, e.srv.ClientURL+"/api/v1/sessions/"+e.sid+"/rpc", strings.NewReader(string(body)))
		req.Header.Set("Authorization", "Bearer "+e.sk)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			opened <- resp
		}
		close(opened)
	}()
	require.Eventually(t, func() bool {
		var waiting bool
		_ = lock.QueryRow(ctx, `SELECT count(*) > 0 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'INSERT INTO turn_inputs%'`).Scan(&waiting)
		return waiting
	}, 30*time.Second, 20*time.Millisecond, "the store step is waiting on the lock")
	select {
	case <-opened:
		t.Fatal("the response started before the message was stored")
	case <-time.After(time.Second): // the header would have been flushed by now
	}

	_, err = lock.Exec(ctx, `SELECT pg_advisory_unlock(4242)`)
	require.NoError(t, err)
	resp := <-opened
	require.NotNil(t, resp)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	var last map[string]any
	dec := json.NewDecoder(resp.Body)
	for dec.More() {
		last = nil
		require.NoError(t, dec.Decode(&last))
	}
	require.Contains(t, last, "result", "the stored turn runs")
}

// TestTurnRidesOutDatabaseOutage: PostgreSQL goes away while a provider call
// is in flight and stays away for longer than the provider attempt's
// retries; the turn completes once the database is back, with the provider
// called once and every event logged once. /readyz reports the outage.
func TestTurnRidesOutDatabaseOutage(t *testing.T) {
	e := newEdgeEnv(t, nil)
	e.fake.Enqueue(fakeprovider.Text("after the outage").UntilReleased())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// An observer from the start of the session's log.
	obs := e.srv.RPCStream(t, ctx, e.sid, e.sk, map[string]any{"jsonrpc": "2.0", "id": 9, "method": "session.subscribe", "params": map[string]any{"since_event_id": "evt_none"}})
	defer obs.Close()
	stream := e.srv.RPCStream(t, ctx, e.sid, e.sk, sendReq(1, "hold on"))
	defer stream.Close()
	select {
	case <-e.fake.Started():
	case <-ctx.Done():
		t.Fatal("the provider call never started")
	}
	e.proxy.Down()
	r := testenv.Do(t, http.MethodGet, e.srv.ClientURL+"/readyz", "", nil)
	assert.Equal(t, http.StatusServiceUnavailable, r.Status)
	assert.Equal(t, "unavailable", r.Body["checks"].(map[string]any)["database"])
	assert.Equal(t, "ok", r.Body["checks"].(map[string]any)["temporal"])
	// The provider answers into the outage, which outlasts the attempt's
	// transport retries several times over.
	e.fake.Release()
	outage := time.AfterFunc(4*time.Second, e.proxy.Up)
	defer outage.Stop()

	var term map[string]any
	var notified []string
	for term == nil {
		m := stream.Next(time.Minute)
		require.NotNil(t, m, "the stream ends with the turn's answer")
		if m["method"] == "session.event" {
			notified = append(notified, m["params"].(map[string]any)["event_type"].(string))
			continue
		}
		term = m
	}
	require.Contains(t, term, "result", "the turn completes: %v", term)
	res := term["result"].(map[string]any)
	assert.Equal(t, "after the outage", res["message"].(map[string]any)["content"].([]any)[0].(map[string]any)["text"])
	assert.Equal(t, []string{"provider.request", "provider.response", "server.message.send"}, notified, "the live stream lost nothing")
	assert.Equal(t, 1, e.fake.RequestCount(), "the provider is not asked again because the database blinked")
	assert.Equal(t, map[string]int{
		"session.open": 1, "session.driver.register": 1, "client.message.send": 1,
		"provider.request": 1, "provider.response": 1, "server.message.send": 1,
	}, eventCounts(t, e.srv, e.sid, e.sk))
	r = testenv.Do(t, http.MethodGet, e.srv.ClientURL+"/readyz", "", nil)
	assert.Equal(t, http.StatusOK, r.Status)

	// The observer's stream stayed open through the outage and carries the
	// whole log once, in order.
	var observed []string
	for len(observed) < 6 {
		m := obs.Next(time.Minute)
		require.NotNil(t, m, "the subscription survives the outage; so far %v", observed)
		observed = append(observed, m["params"].(map[string]any)["event_type"].(string))
	}
	assert.Equal(t, []string{"session.open", "session.driver.register", "client.message.send", "provider.request", "provider.response", "server.message.send"}, observed)
}

// TestOutageLongerThanTheHeartbeatTimeout: an activity waiting out a
// database outage keeps heartbeating, however short the heartbeat timeout,
// so Temporal does not count the waiting worker as lost and run the
// attempt (and the provider call) again. (The crash bench found the wait
// heartbeating only between retries, up to 2 s apart, which a 1 s timeout
// did not survive: the attempt was lost, and after two kills the turn
// failed.)
func TestOutageLongerThanTheHeartbeatTimeout(t *testing.T) {
	e := newEdgeEnv(t, map[string]string{"BAE_ACTIVITY_HEARTBEAT_TIMEOUT": "1s"})
	e.fake.Enqueue(fakeprovider.Text("after the outage").UntilReleased())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stream := e.srv.RPCStream(t, ctx, e.sid, e.sk, sendReq(1, "hold on"))
	defer stream.Close()
	select {
	case <-e.fake.Started():
	case <-ctx.Done():
		t.Fatal("the provider call never started")
	}
	e.proxy.Down()
	e.fake.Release()
	// Long enough for the wait's backoff to reach its 2 s ceiling twice.
	outage := time.AfterFunc(8*time.Second, e.proxy.Up)
	defer outage.Stop()
	var term map[string]any
	for term == nil {
		m := stream.Next(time.Minute)
		require.NotNil(t, m, "the stream ends with the turn's answer")
		if m["method"] != "session.event" {
			term = m
		}
	}
	require.Contains(t, term, "result", "the turn completes: %v", term)
	assert.Equal(t, 1, e.fake.RequestCount(), "the attempt waiting for the database was not given up as lost")
}

// TestFailedTurnLeavesConsistentConversation: a turn whose step fails past
// its retries logs session.error (turn_failed), answers the client with an
// error, keeps the session open, and is left out of the conversation, so
// the next provider call never sees two user messages in a row.
func TestFailedTurnLeavesConsistentConversation(t *testing.T) {
	e := newEdgeEnv(t, nil)
	// Storing any assistant message fails: a statement error, not an
	// outage, so it is not waited out.
	e.exec(t, `CREATE FUNCTION refuse_assistant() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF NEW.role = 'assistant' THEN RAISE EXCEPTION 'assistant messages refused'; END IF; RETURN NEW; END $$`)
	e.exec(t, `CREATE TRIGGER refuse BEFORE INSERT ON session_messages FOR EACH ROW EXECUTE FUNCTION refuse_assistant()`)

	objs := e.srv.RPC(t, e.sid, e.sk, sendReq(1, "first, doomed"))
	term := testenv.Terminal(t, objs)
	require.Contains(t, term, "error", "a failed turn answers with an error: %v", term)
	assert.Equal(t, float64(-32603), term["error"].(map[string]any)["code"])
	assert.Contains(t, term["error"].(map[string]any)["message"], "session is still open")
	var reasons []any
	for _, o := range objs {
		if o["method"] == "session.event" {
			p := o["params"].(map[string]any)
			if p["event_type"] == "session.error" {
				reasons = append(reasons, p["payload"].(map[string]any)["reason"])
			}
		}
	}
	assert.Equal(t, []any{"turn_failed"}, reasons, "the failure is logged with its reason")

	e.exec(t, `DROP TRIGGER refuse ON session_messages`)
	objs = e.srv.RPC(t, e.sid, e.sk, sendReq(2, "second, fine"))
	term = testenv.Terminal(t, objs)
	require.Contains(t, term, "result", "the session goes on: %v", term)
	reqs := e.fake.Requests()
	last := reqs[len(reqs)-1].Messages()
	require.Len(t, last, 1, "the failed turn is not in the conversation: %v", last)
	assert.Equal(t, "user", last[0]["role"])
}
