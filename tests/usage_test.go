package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/provider"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/procserver"
	"github.com/bae-go/bae-go/internal/testing/testenv"
)

// loggedUsage sums the usage every successful provider.response of evs
// reports, the figure the usage tables must equal.
func loggedUsage(t *testing.T, evs []map[string]any) (calls int64, u provider.Usage) {
	t.Helper()
	for _, ev := range evs {
		if ev["event_type"] != "provider.response" || payload(ev)["ok"] != true {
			continue
		}
		body, err := json.Marshal(payload(ev)["body"])
		require.NoError(t, err)
		calls++
		u = u.Add(provider.UsageOf(payload(ev)["provider"].(string), body))
	}
	return calls, u
}

// sums reads a wire.UsageSums object as (calls, usage).
func sums(t *testing.T, v any) (int64, provider.Usage) {
	t.Helper()
	m, ok := v.(map[string]any)
	require.True(t, ok, "usage sums: %v", v)
	n := func(k string) int64 { return int64(m[k].(float64)) }
	u := provider.Usage{Input: n("input_tokens"), Output: n("output_tokens"), CacheRead: n("cache_read_tokens"), CacheWrite: n("cache_write_tokens")}
	assert.Equal(t, u.Total(), n("total_tokens"))
	return n("calls"), u
}

// TestSessionBudgetStopsALoopingAgent: the model keeps calling a tool; the
// session's lifetime cap, spent by the first call, stops the turn before
// the second (not at the loop limit of 8). The turn fails naming the
// budget, the session stays open, the next message is refused before
// anything is stored, and a raised budget lets it go on. The usage read
// back equals what the provider.response events report.
func TestSessionBudgetStopsALoopingAgent(t *testing.T) {
	e := newEnv(t, envOpts{})
	d := e.open()
	looping := true
	e.fake.Lane("primary").Respond(func(fakeprovider.Recorded) fakeprovider.Reply {
		if looping {
			return fakeprovider.ToolUse("", "unroutable_tool", nil)
		}
		return fakeprovider.Echo()
	})
	put := e.srv.Admin(t, http.MethodPut, "/admin/v1/budgets/session/"+d.sid, map[string]any{"unit": "tokens", "limit": 1, "period": "none"})
	require.Equal(t, http.StatusOK, put.Status, string(put.Raw))
	assert.Equal(t, false, put.Body["exhausted"])
	assert.Nil(t, put.Body["resets_at"])

	_, term := d.send("loop forever")
	msg := rpcError(t, term, -32000)
	assert.True(t, strings.HasPrefix(msg, "quota_exceeded: the session budget of "+d.sid+" (1 tokens) is spent"), msg)
	assert.Contains(t, msg, "does not reset by itself")
	assert.Equal(t, 1, e.fake.RequestCount(), "stopped before its second provider call")

	evs := d.allEvents()
	last := payload(evs[len(evs)-1])
	assert.Equal(t, "session.error", evs[len(evs)-1]["event_type"])
	assert.Equal(t, "turn_failed", last["reason"])
	assert.Equal(t, "budget", last["step"])
	assert.Contains(t, last["detail"], "the session budget of "+d.sid)
	assert.NotContains(t, types(evs)[len(evs)-2:], "provider.request", "no request was logged for the call not made")

	// Still open; the next message is refused up front.
	stored := e.storedInputs(d.sid)
	_, term = d.send("again")
	msg = rpcError(t, term, -32000)
	assert.Contains(t, msg, "quota_exceeded: the session budget of "+d.sid)
	assert.Equal(t, stored, e.storedInputs(d.sid), "a refused message is not stored")
	assert.Equal(t, 1, e.fake.RequestCount())

	// Raised: the session goes on.
	looping = false
	put = e.srv.Admin(t, http.MethodPut, "/admin/v1/budgets/session/"+d.sid, map[string]any{"unit": "tokens", "limit": 1_000_000})
	require.Equal(t, http.StatusOK, put.Status, string(put.Raw))
	_, term = d.send("and now?")
	require.Nil(t, term["error"], "%v", term["error"])
	assert.Equal(t, "echo: and now?", firstText(message(term)))

	// Usage equals the logged responses', in the session view and grouped.
	calls, want := loggedUsage(t, d.allEvents())
	assert.EqualValues(t, 2, calls)
	view := e.srv.Admin(t, http.MethodGet, "/admin/v1/sessions/"+d.sid+"/usage", nil)
	require.Equal(t, http.StatusOK, view.Status, string(view.Raw))
	n, got := sums(t, view.Body["totals"])
	assert.Equal(t, calls, n)
	assert.Equal(t, want, got)
	require.Len(t, view.Body["budgets"], 1)
	b := view.Body["budgets"].([]any)[0].(map[string]any)
	assert.EqualValues(t, want.Total(), b["spent"])
	for _, g := range []string{"session", "key", "profile", "provider", "day"} {
		r := e.srv.Admin(t, http.MethodGet, "/admin/v1/usage?group_by="+g, nil)
		require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
		items := r.Body["items"].([]any)
		require.Len(t, items, 1, g)
		n, got := sums(t, items[0])
		assert.Equal(t, calls, n, g)
		assert.Equal(t, want, got, g)
	}

	// Both changes are audited.
	audit := e.srv.Admin(t, http.MethodGet, "/admin/v1/budgets/changes?scope=session&subject="+d.sid, nil)
	require.Equal(t, http.StatusOK, audit.Status, string(audit.Raw))
	items := audit.Body["items"].([]any)
	require.Len(t, items, 2)
	newest := items[0].(map[string]any)
	assert.Equal(t, "set", newest["action"])
	assert.True(t, strings.HasPrefix(newest["actor"].(string), "admin-api "), newest["actor"])
	assert.EqualValues(t, 1, newest["before"].(map[string]any)["limit"])
	assert.EqualValues(t, 1_000_000, newest["after"].(map[string]any)["limit"])
}

// TestBudgetAdminValidation: bad budget bodies and unknown subjects are
// refused in the documented shapes, and nothing is stored.
func TestBudgetAdminValidation(t *testing.T) {
	e := newEnv(t, envOpts{})
	d := e.open()
	for _, c := range []struct {
		path string
		body any
		want int
	}{
		{"/admin/v1/budgets/session/" + d.sid, map[string]any{"unit": "tokens", "limit": 10, "period": "day"}, http.StatusBadRequest},
		{"/admin/v1/budgets/key/" + d.keyID, map[string]any{"unit": "coins", "limit": 10}, http.StatusBadRequest},
		{"/admin/v1/budgets/key/" + d.keyID, map[string]any{"unit": "tokens", "limit": 1.5}, http.StatusBadRequest},
		{"/admin/v1/budgets/key/" + d.keyID, map[string]any{"unit": "usd", "limit": -1}, http.StatusBadRequest},
		{"/admin/v1/budgets/key/" + d.keyID, map[string]any{"unit": "usd"}, http.StatusBadRequest},
		{"/admin/v1/budgets/key/" + d.keyID, map[string]any{"unit": "usd", "limit": 1, "period": "year"}, http.StatusBadRequest},
		{"/admin/v1/budgets/key/ck_nope", map[string]any{"unit": "usd", "limit": 1}, http.StatusNotFound},
		{"/admin/v1/budgets/team/x", map[string]any{"unit": "usd", "limit": 1}, http.StatusNotFound},
	} {
		r := e.srv.Admin(t, http.MethodPut, c.path, c.body)
		assert.Equal(t, c.want, r.Status, "%s %v: %s", c.path, c.body, r.Raw)
	}
	list := e.srv.Admin(t, http.MethodGet, "/admin/v1/budgets", nil)
	require.Equal(t, http.StatusOK, list.Status)
	assert.Empty(t, list.Body["items"])
	for _, q := range []string{"group_by=team", "from=yesterday", "from=2026-01-02&to=2026-01-01", "order=size", "cursor=x"} {
		r := e.srv.Admin(t, http.MethodGet, "/admin/v1/usage?"+q, nil)
		assert.Equal(t, http.StatusBadRequest, r.Status, q)
		assert.Equal(t, "bad_request", r.Body["type"], q)
	}
	r := e.srv.Admin(t, http.MethodPost, "/admin/v1/budgets/key/"+d.keyID+"/reset", nil)
	assert.Equal(t, http.StatusNotFound, r.Status)
}

// TestKeyBudgetHoldsAcrossReplicas: one client key drives a session on
// each of two replicas, each running its own sessions. The key's daily
// budget, spent by a turn on replica A, stops the looping turn on replica
// B after one call and refuses the next message on A; both name the
// budget and when it resets (the next UTC midnight). The key's usage is
// the sum of both sessions' logged responses.
func TestKeyBudgetHoldsAcrossReplicas(t *testing.T) {
	fake := fakeprovider.New(t)
	fake.Respond(func(rec fakeprovider.Recorded) fakeprovider.Reply {
		msgs := rec.Messages()
		if len(msgs) > 0 && strings.Contains(fmt.Sprint(msgs[0]["content"]), "loop") {
			return fakeprovider.ToolUse("", "unroutable_tool", nil)
		}
		return fakeprovider.Echo()
	})
	a, b := startReplicaPair(t, fake.URL(), "budget")
	pid := a.Profile(t, map[string]any{"name": "main", "primary_provider": "primary", "allowed_tools": []string{}})
	keyID, key := a.Key(t, pid)
	sidA, skA := a.Open(t, key, map[string]any{"client_version": "test"})
	sidB, skB := b.Open(t, key, map[string]any{"client_version": "test"})
	a.Call(t, sidA, skA, "session.registerDriver", nil)
	b.Call(t, sidB, skB, "session.registerDriver", nil)
	send := func(s *testenv.Server, sid, sk, text string) map[string]any {
		return testenv.Terminal(t, s.RPC(t, sid, sk, map[string]any{"jsonrpc": "2.0", "id": 1, "method": "session.sendMessage", "params": map[string]any{"message": map[string]any{"content": text}}}))
	}

	// Set on A, generous.
	r := a.Admin(t, http.MethodPut, "/admin/v1/budgets/key/"+keyID, map[string]any{"unit": "tokens", "limit": 1_000_000, "period": "day"})
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	term := send(a, sidA, skA, "hello from A")
	require.Nil(t, term["error"], "%v", term["error"])
	spentA := int64(0)
	_, u := loggedUsage(t, eventsOf(t, a, sidA, skA))
	spentA = u.Total()
	require.Positive(t, spentA)

	// Lowered on B to one token more than A spent: B's looping turn makes
	// one call, which spends it, and is stopped before the next.
	r = b.Admin(t, http.MethodPut, "/admin/v1/budgets/key/"+keyID, map[string]any{"unit": "tokens", "limit": spentA + 1, "period": "day"})
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	assert.EqualValues(t, spentA, r.Body["spent"], "B reads what A's session spent")
	before := fake.RequestCount()
	term = send(b, sidB, skB, "loop forever")
	msg := rpcError(t, term, -32000)
	tomorrow := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, 1)
	assert.Contains(t, msg, "quota_exceeded: the client key budget of "+keyID)
	assert.Contains(t, msg, "a day) is spent")
	assert.Contains(t, msg, "it resets at "+tomorrow.Format("2006-01-02T15:04:05.000Z"))
	assert.Equal(t, before+1, fake.RequestCount(), "one call on B, then stopped")

	// A refuses the key's next message up front.
	term = send(a, sidA, skA, "hello again")
	msg = rpcError(t, term, -32000)
	assert.Contains(t, msg, "quota_exceeded: the client key budget of "+keyID)
	assert.Equal(t, before+1, fake.RequestCount())

	// The key's usage (read on either replica) is both sessions' logged usage.
	callsA, ua := loggedUsage(t, eventsOf(t, a, sidA, skA))
	callsB, ub := loggedUsage(t, eventsOf(t, b, sidB, skB))
	for _, s := range []*testenv.Server{a, b} {
		r := s.Admin(t, http.MethodGet, "/admin/v1/usage?group_by=key&client_key_id="+keyID, nil)
		require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
		require.Len(t, r.Body["items"], 1)
		n, got := sums(t, r.Body["items"].([]any)[0])
		assert.Equal(t, callsA+callsB, n)
		assert.Equal(t, ua.Add(ub), got)
	}
	r = a.Admin(t, http.MethodGet, "/admin/v1/usage?group_by=session&order=tokens", nil)
	require.Equal(t, http.StatusOK, r.Status)
	require.Len(t, r.Body["items"], 2)
}

// TestUsageExactThroughSIGKILL: the server is SIGKILLed while a provider
// call is in flight, and again just as a provider finished answering
// (before or after the response is stored, whichever comes first). After
// restarts and resends, every session's recorded usage equals the sum of
// its provider.response events' usage, call for call.
func TestUsageExactThroughSIGKILL(t *testing.T) {
	ks := newKillable(t)
	fake := fakeprovider.New(t)
	srv := procserver.Start(t, procserver.Options{
		Bin: ks.bin, DatabaseURL: ks.db, Temporal: procserver.Temporal(t), DataDir: ks.dir,
		ConfigTOML: testenv.PrimaryProviderTOML(fake.URL()),
	})
	api := srv.API
	pid := api.Profile(t, map[string]any{"name": "main", "primary_provider": "primary", "allowed_tools": []string{}})
	_, ck := api.Key(t, pid)
	sid, sk := api.Open(t, ck, map[string]any{"client_version": "test"})
	api.Call(t, sid, sk, "session.registerDriver", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	turn := func(key, text string) map[string]any {
		st := sendKeyed(t, ctx, api, sid, sk, key, text, nil)
		defer st.Close()
		return terminalOf(st, 2*time.Minute)
	}
	require.Nil(t, turn("t0", "before")["error"])

	// Killed mid-call.
	fake.Enqueue(fakeprovider.Text("never delivered").UntilReleased())
	st := sendKeyed(t, ctx, api, sid, sk, "t1", "mid-call", nil)
	<-fake.Started() // t0's
	<-fake.Started() // t1's, held
	srv.Kill()
	st.Close()
	fake.Release()
	srv.Start()
	term := turn("t1", "mid-call")
	require.NotNil(t, term, "t1 after the restart\n%s", srv.Log())
	require.Nil(t, term["error"], "%v", term["error"])

	// Killed as the answer ends.
	for len(fake.StreamEnds()) > 0 {
		<-fake.StreamEnds()
	}
	st = sendKeyed(t, ctx, api, sid, sk, "t2", "as it answers", nil)
	end := <-fake.StreamEnds()
	srv.Kill()
	st.Close()
	assert.True(t, end.Whole)
	srv.Start()
	term = turn("t2", "as it answers")
	require.NotNil(t, term, "t2 after the restart\n%s", srv.Log())
	require.Nil(t, term["error"], "%v", term["error"])
	require.Nil(t, turn("t3", "after")["error"])

	calls, want := loggedUsage(t, eventsOf(t, api, sid, sk))
	assert.EqualValues(t, 4, calls, "one answered call per turn")
	conn, err := pgx.Connect(ctx, ks.db)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var ledger provider.Usage
	var n int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*), coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0),
		coalesce(sum(cache_read_tokens), 0), coalesce(sum(cache_write_tokens), 0) FROM usage_calls WHERE session_id = $1`, sid).
		Scan(&n, &ledger.Input, &ledger.Output, &ledger.CacheRead, &ledger.CacheWrite))
	assert.Equal(t, calls, n, "one ledger row per logged response")
	assert.Equal(t, want, ledger)
	view := api.Admin(t, http.MethodGet, "/admin/v1/sessions/"+sid+"/usage", nil)
	require.Equal(t, http.StatusOK, view.Status, string(view.Raw))
	n, got := sums(t, view.Body["totals"])
	assert.Equal(t, calls, n)
	assert.Equal(t, want, got)
}

// TestUsageCountsTheSummarizer: a session compacted with summaries counts
// its summarizer's calls too: its usage is its provider.response usage
// plus its session.compaction events' summarizer usage, exactly.
func TestUsageCountsTheSummarizer(t *testing.T) {
	e, _, pid := newCompactionEnv(t, "anthropic", windowTokens, map[string]any{})
	d := e.openOn(pid, nil)
	d.register()
	summaries := 0
	for i := 0; summaries == 0 && i < 60; i++ {
		_, term := d.send(userText(i))
		require.Nil(t, term["error"], "%v", term["error"])
		summaries = 0
		for _, ev := range d.allEvents() {
			if ev["event_type"] == "session.compaction" && payload(ev)["summarizer"] != nil {
				summaries++
			}
		}
	}
	require.Positive(t, summaries, "the session was summarized")
	evs := d.allEvents()
	calls, want := loggedUsage(t, evs)
	for _, ev := range evs {
		if s, ok := payload(ev)["summarizer"].(map[string]any); ok && ev["event_type"] == "session.compaction" {
			calls++
			want = want.Add(provider.Usage{Input: int64(s["input_tokens"].(float64)), Output: int64(s["output_tokens"].(float64))})
		}
	}
	view := e.srv.Admin(t, http.MethodGet, "/admin/v1/sessions/"+d.sid+"/usage", nil)
	require.Equal(t, http.StatusOK, view.Status, string(view.Raw))
	n, got := sums(t, view.Body["totals"])
	assert.Equal(t, calls, n)
	assert.Equal(t, want, got)
}
