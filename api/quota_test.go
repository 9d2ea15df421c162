package api_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/api"
	"github.com/bae-go/bae-go/internal/app"
	"github.com/bae-go/bae-go/internal/lib/live"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/testenv"
)

// TestSessionCapsPerKeyAndProfile: a client key at BAE_MAX_SESSIONS_PER_KEY
// open sessions, or on a profile at BAE_MAX_SESSIONS_PER_PROFILE, is
// refused with 429 quota_exceeded; closing one frees its place.
func TestSessionCapsPerKeyAndProfile(t *testing.T) {
	s := testenv.Start(t, testenv.Options{ConfigTOML: providersTOML, Env: map[string]string{
		"BAE_MAX_SESSIONS_PER_KEY": "2", "BAE_MAX_SESSIONS_PER_PROFILE": "3",
	}})
	pid := s.Profile(t, map[string]any{"name": "main", "primary_provider": "main"})
	_, a := s.Key(t, pid)
	_, b := s.Key(t, pid)

	first, firstKey := s.Open(t, a, nil)
	s.Open(t, a, nil)
	r := s.Client(t, http.MethodPost, "/api/v1/sessions", a, map[string]any{})
	require.Equal(t, http.StatusTooManyRequests, r.Status, string(r.Raw))
	assert.Equal(t, "quota_exceeded", r.Body["type"])
	assert.Contains(t, r.Body["detail"], "this client key already has 2 open sessions")

	// A join counts against the joining key's cap.
	s.Join(t, first, b, nil)
	s.Open(t, b, nil)
	r = s.Client(t, http.MethodPost, "/api/v1/sessions/"+first+"/join", b, map[string]any{})
	require.Equal(t, http.StatusCreated, r.Status, "re-joining a session it is in takes no new place: %s", r.Raw)
	_, c := s.Key(t, pid)
	r = s.Client(t, http.MethodPost, "/api/v1/sessions", c, map[string]any{})
	require.Equal(t, http.StatusTooManyRequests, r.Status, "the profile holds 3 open sessions: %s", r.Raw)
	assert.Equal(t, "quota_exceeded", r.Body["type"])
	assert.Contains(t, r.Body["detail"], "profile already has 3 open sessions")

	r = s.Client(t, http.MethodDelete, "/api/v1/sessions/"+first, firstKey, nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	s.Open(t, c, nil)
}

// subscribe opens a session.subscribe stream and waits for it to open.
func subscribe(t *testing.T, s *testenv.Server, ctx context.Context, sid, sk string) *testenv.Stream {
	t.Helper()
	st := s.RPCStream(t, ctx, sid, sk, map[string]any{"jsonrpc": "2.0", "id": 1, "method": "session.subscribe", "params": map[string]any{}})
	require.Equal(t, http.StatusOK, st.Status())
	t.Cleanup(st.Close)
	return st
}

// TestSubscribeStreamCaps: streams past BAE_MAX_STREAMS_PER_SESSION on a
// session, or past BAE_MAX_STREAMS_PER_KEY on a client key, end at once
// with -32000 quota_exceeded; a stream that ends gives its place back.
func TestSubscribeStreamCaps(t *testing.T) {
	s := testenv.Start(t, testenv.Options{ConfigTOML: providersTOML, Env: map[string]string{
		"BAE_MAX_STREAMS_PER_SESSION": "2", "BAE_MAX_STREAMS_PER_KEY": "3",
	}})
	pid := s.Profile(t, map[string]any{"name": "main", "primary_provider": "main"})
	_, key := s.Key(t, pid)
	one, oneKey := s.Open(t, key, nil)
	two, twoKey := s.Open(t, key, nil)
	ctx := context.Background()

	held := []*testenv.Stream{subscribe(t, s, ctx, one, oneKey), subscribe(t, s, ctx, one, oneKey)}
	refused := testenv.Terminal(t, s.Call(t, one, oneKey, "session.subscribe", nil))
	e, _ := refused["error"].(map[string]any)
	require.NotNil(t, e, "%v", refused)
	assert.EqualValues(t, -32000, e["code"])
	assert.Equal(t, "quota_exceeded: this session already has 2 live streams (session.subscribe and session.sendMessage), the most allowed; close one first", e["message"])

	subscribe(t, s, ctx, two, twoKey)
	refused = testenv.Terminal(t, s.Call(t, two, twoKey, "session.subscribe", nil))
	e, _ = refused["error"].(map[string]any)
	require.NotNil(t, e, "%v", refused)
	assert.Contains(t, e["message"], "quota_exceeded: this client key already has 3 live streams")

	// session.unsubscribe ends the streams of a session; their places
	// come back once they have ended.
	unsub := testenv.Terminal(t, s.Call(t, one, oneKey, "session.unsubscribe", nil))
	require.Contains(t, unsub, "result", "%v", unsub)
	for _, st := range held {
		for range st.Lines() {
		}
	}
	again := subscribe(t, s, ctx, one, oneKey)
	reg := testenv.Terminal(t, s.Call(t, one, oneKey, "session.registerDriver", nil))
	require.Contains(t, reg, "result", "%v", reg)
	m := again.Next(10 * time.Second)
	require.NotNil(t, m, "the re-admitted stream ended or stayed silent")
	require.Equal(t, "session.event", m["method"], "the stream was admitted and relays events: %v", m)
}

// TestStreamRechecksArePerSession: the authorization re-reads of a
// session's subscribe streams do not grow with the number of streams. With
// the fallback poll out of the way, every announced re-check (a key
// revoked elsewhere) and the session's close cost one read for the
// session, whether it has 1 stream or 20.
func TestStreamRechecksArePerSession(t *testing.T) {
	var deps *api.Deps
	s := testenv.Start(t, testenv.Options{ConfigTOML: providersTOML, Env: map[string]string{
		"BAE_MAX_STREAMS_PER_SESSION": "32",
	}, Extend: func(p *app.Parts) error {
		p.Deps.RecheckInterval = time.Hour
		deps = p.Deps
		return nil
	}})
	pid := s.Profile(t, map[string]any{"name": "main", "primary_provider": "main"})
	_, key := s.Key(t, pid)
	db, err := pgx.Connect(context.Background(), s.DatabaseURL)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close(context.Background()) })
	const announcements = 5

	reads := map[int]int64{}
	for _, n := range []int{1, 20} {
		sid, sk := s.Open(t, key, nil)
		ctx, cancel := context.WithCancel(context.Background())
		streams := make([]*testenv.Stream, n)
		for i := range streams {
			streams[i] = subscribe(t, s, ctx, sid, sk)
		}
		before := api.AccessReads(deps)
		for i := range announcements {
			_, err := db.Exec(context.Background(), `SELECT pg_notify($1, $2)`, live.ControlChannel, live.AuthChanged(fmt.Sprintf("key_elsewhere_%d", i)))
			require.NoError(t, err)
		}
		r := s.Client(t, http.MethodDelete, "/api/v1/sessions/"+sid, sk, nil)
		require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
		// Every stream ends on a re-check that saw the session closed:
		// once all have ended, every read they caused is counted.
		for _, st := range streams {
			var last map[string]any
			for m := range st.Lines() {
				last = m
			}
			e, _ := last["error"].(map[string]any)
			require.NotNil(t, e, "%v", last)
			assert.Equal(t, "session is closed, not open", e["message"])
		}
		cancel()
		reads[n] = api.AccessReads(deps) - before
	}
	t.Logf("authorization reads for %d announcements and a close: %d with 1 stream, %d with 20 streams", announcements, reads[1], reads[20])
	assert.LessOrEqual(t, reads[20], int64(announcements+1), "one read per re-check for the session, not one per stream")
	assert.LessOrEqual(t, reads[1], int64(announcements+1))
}

// TestIdleSessionIsClosed: with BAE_SESSION_IDLE_TTL set, a session nobody
// uses is closed by the server: its stream ends with the session closed,
// the log ends with session.close (idle_timeout), and REST calls get 409.
func TestIdleSessionIsClosed(t *testing.T) {
	s := testenv.Start(t, testenv.Options{ConfigTOML: providersTOML, Env: map[string]string{"BAE_SESSION_IDLE_TTL": "300ms"}})
	pid := s.Profile(t, map[string]any{"name": "main", "primary_provider": "main"})
	_, key := s.Key(t, pid)
	sid, sk := s.Open(t, key, nil)
	st := subscribe(t, s, context.Background(), sid, sk)

	var last map[string]any
	deadline := time.After(30 * time.Second)
	for done := false; !done; {
		select {
		case m, ok := <-st.Lines():
			if !ok {
				done = true
				break
			}
			last = m
		case <-deadline:
			require.FailNow(t, "the idle session's stream was still open after 30 s")
		}
	}
	e, _ := last["error"].(map[string]any)
	require.NotNil(t, e, "%v", last)
	assert.Equal(t, "session is closed, not open", e["message"])

	ctx := context.Background()
	db, err := pgx.Connect(ctx, s.DatabaseURL)
	require.NoError(t, err)
	defer db.Close(ctx)
	var typ, payload string
	require.NoError(t, db.QueryRow(ctx, `SELECT event_type, payload::text FROM session_events WHERE session_id = $1 ORDER BY seq DESC LIMIT 1`, sid).Scan(&typ, &payload))
	assert.Equal(t, "session.close", typ)
	assert.JSONEq(t, `{"reason":"idle_timeout"}`, payload)
	r := s.Client(t, http.MethodDelete, "/api/v1/sessions/"+sid, sk, nil)
	assert.Equal(t, http.StatusConflict, r.Status, string(r.Raw))
	assert.Equal(t, "session_closed", r.Body["type"])
}

// sendStream starts a session.sendMessage and waits for its stream to open
// (the message is stored).
func sendStream(t *testing.T, s *testenv.Server, ctx context.Context, sid, sk, text string) *testenv.Stream {
	t.Helper()
	st := s.RPCStream(t, ctx, sid, sk, map[string]any{"jsonrpc": "2.0", "id": 1, "method": "session.sendMessage", "params": map[string]any{"message": map[string]any{"role": "user", "content": text}}})
	require.Equal(t, http.StatusOK, st.Status())
	t.Cleanup(st.Close)
	return st
}

func storedTurns(t *testing.T, s *testenv.Server, sid string) int {
	t.Helper()
	ctx := context.Background()
	db, err := pgx.Connect(ctx, s.DatabaseURL)
	require.NoError(t, err)
	defer db.Close(ctx)
	var n int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM turn_inputs WHERE session_id = $1`, sid).Scan(&n))
	return n
}

// TestSendMessageRelaysCountAgainstStreamCaps is the attack of issue 35's
// finding 5 on the stream caps: one driver opening sendMessage streams
// behind a running turn. Relays count with subscribe streams against
// BAE_MAX_STREAMS_PER_SESSION and BAE_MAX_STREAMS_PER_KEY: the one past a
// cap is refused with -32000 quota_exceeded and stores nothing.
func TestSendMessageRelaysCountAgainstStreamCaps(t *testing.T) {
	fake := fakeprovider.New(t)
	s := testenv.Start(t, testenv.Options{ConfigTOML: testenv.PrimaryProviderTOML(fake.URL()), Env: map[string]string{
		"BAE_MAX_STREAMS_PER_SESSION": "4", "BAE_MAX_STREAMS_PER_KEY": "6",
		"BAE_MAX_QUEUED_TURNS_PER_SESSION": "0", "BAE_MAX_QUEUED_TURNS_PER_KEY": "0",
	}})
	pid := s.Profile(t, map[string]any{"name": "main", "primary_provider": "primary"})
	_, key := s.Key(t, pid)
	one, oneKey := s.Open(t, key, nil)
	two, twoKey := s.Open(t, key, nil)
	for _, sess := range [][2]string{{one, oneKey}, {two, twoKey}} {
		reg := testenv.Terminal(t, s.Call(t, sess[0], sess[1], "session.registerDriver", nil))
		require.Contains(t, reg, "result", "%v", reg)
	}
	// Each session's first turn holds its provider call; the rest queue.
	fake.Enqueue(fakeprovider.Text("held").UntilReleased(), fakeprovider.Text("held").UntilReleased())
	t.Cleanup(fake.Release)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	subscribe(t, s, ctx, one, oneKey)
	for i := range 3 {
		sendStream(t, s, ctx, one, oneKey, fmt.Sprintf("relay %d", i))
	}
	refused := testenv.Terminal(t, s.Call(t, one, oneKey, "session.sendMessage", map[string]any{"message": map[string]any{"role": "user", "content": "one too many"}}))
	e, _ := refused["error"].(map[string]any)
	require.NotNil(t, e, "a fifth stream on the session: %v", refused)
	assert.EqualValues(t, -32000, e["code"])
	assert.Equal(t, "quota_exceeded: this session already has 4 live streams (session.subscribe and session.sendMessage), the most allowed; close one first", e["message"])
	assert.Equal(t, 3, storedTurns(t, s, one), "the refused message was not stored")

	sendStream(t, s, ctx, two, twoKey, "relay on two")
	sendStream(t, s, ctx, two, twoKey, "another on two")
	refused = testenv.Terminal(t, s.Call(t, two, twoKey, "session.sendMessage", map[string]any{"message": map[string]any{"role": "user", "content": "one too many"}}))
	e, _ = refused["error"].(map[string]any)
	require.NotNil(t, e, "a seventh stream of the key: %v", refused)
	assert.Contains(t, e["message"], "quota_exceeded: this client key already has 6 live streams")
	assert.Equal(t, 2, storedTurns(t, s, two))
}

// TestRelayRechecksArePerSession: the sendMessage relays of a session
// share its one authorization checker with its subscribe streams: with the
// fallback poll out of the way, every announced re-check costs one read
// for the session however many relays it has.
func TestRelayRechecksArePerSession(t *testing.T) {
	var deps *api.Deps
	fake := fakeprovider.New(t)
	s := testenv.Start(t, testenv.Options{ConfigTOML: testenv.PrimaryProviderTOML(fake.URL()), Env: map[string]string{
		"BAE_MAX_STREAMS_PER_SESSION": "0", "BAE_MAX_QUEUED_TURNS_PER_SESSION": "0",
	}, Extend: func(p *app.Parts) error {
		p.Deps.RecheckInterval = time.Hour
		deps = p.Deps
		return nil
	}})
	pid := s.Profile(t, map[string]any{"name": "main", "primary_provider": "primary"})
	_, key := s.Key(t, pid)
	sid, sk := s.Open(t, key, nil)
	reg := testenv.Terminal(t, s.Call(t, sid, sk, "session.registerDriver", nil))
	require.Contains(t, reg, "result", "%v", reg)
	db, err := pgx.Connect(context.Background(), s.DatabaseURL)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close(context.Background()) })

	fake.Enqueue(fakeprovider.Text("held").UntilReleased())
	t.Cleanup(fake.Release)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const relays, announcements = 20, 5
	streams := make([]*testenv.Stream, relays)
	for i := range streams {
		streams[i] = sendStream(t, s, ctx, sid, sk, fmt.Sprintf("relay %d", i))
	}
	// Some turn holds the provider call. Not necessarily relay 0's: a
	// message stored later can be admitted before the idle one's SendIdle
	// Update, and a relay sees only its own turn's events.
	require.Eventually(t, func() bool {
		var n int
		err := db.QueryRow(context.Background(), `SELECT count(*) FROM session_events WHERE session_id = $1 AND event_type = 'provider.request'`, sid).Scan(&n)
		return err == nil && n > 0
	}, 30*time.Second, 20*time.Millisecond, "waiting for provider.request")

	before := api.AccessReads(deps)
	for i := range announcements {
		_, err := db.Exec(context.Background(), `SELECT pg_notify($1, $2)`, live.ControlChannel, live.AuthChanged(fmt.Sprintf("key_elsewhere_%d", i)))
		require.NoError(t, err)
	}
	// The turns then run one after the other: every relay ends with its
	// result, and every read the announcements caused is counted.
	fake.Release()
	for i, st := range streams {
		var last map[string]any
		for m := range st.Lines() {
			last = m
		}
		require.Contains(t, last, "result", "relay %d: %v", i, last)
	}
	reads := api.AccessReads(deps) - before
	t.Logf("authorization reads for %d announcements with %d relays: %d", announcements, relays, reads)
	assert.LessOrEqual(t, reads, int64(announcements), "one read per re-check for the session, not one per relay")
}
