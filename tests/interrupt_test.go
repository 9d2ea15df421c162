package tests

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/api"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/testenv"
	"github.com/bae-go/bae-go/store"
	"github.com/bae-go/bae-go/workflows"
)

// interruptEnv is an env whose fake refuses what a real provider refuses
// (a tool_use without its tool_result), with a profile on provider.
func interruptEnv(t *testing.T, provider string, body map[string]any) (*env, string) {
	t.Helper()
	e := newEnv(t, envOpts{})
	e.fake.Strict(true)
	if body == nil {
		body = map[string]any{}
	}
	if _, ok := body["allowed_tools"]; !ok {
		body["allowed_tools"] = []string{}
	}
	body["name"] = fmt.Sprintf("interrupt-%d", profileSeq.Add(1))
	body["primary_provider"] = provider
	pid := e.srv.Profile(t, body)
	return e, pid
}

// joinOn attaches a new client key of profile pid to d's session and
// registers it.
func (e *env) joinOn(pid string, d *driver) *driver {
	e.t.Helper()
	keyID, key := e.srv.Key(e.t, pid)
	sk := e.srv.Join(e.t, d.sid, key, map[string]any{})
	j := &driver{e: e, keyID: keyID, key: key, sid: d.sid, sk: sk}
	j.register()
	return j
}

// untilTerminal reads a raw stream to its terminal response, keeping the
// deltas on the way.
func untilTerminal(t *testing.T, r *rawLines) (deltas []map[string]any, term map[string]any) {
	t.Helper()
	for {
		line, m := r.next(time.Minute)
		require.NotNil(t, line, "the stream ended without a terminal response")
		if isDelta(m) {
			deltas = append(deltas, m)
			continue
		}
		if _, ok := m["id"]; ok {
			return deltas, m
		}
	}
}

// textDeltas reads deltas until n text deltas arrived.
func textDeltas(t *testing.T, r *rawLines, n int) []map[string]any {
	t.Helper()
	var ds []map[string]any
	got := 0
	for got < n {
		line, m := r.next(time.Minute)
		require.NotNil(t, line, "the stream ended before %d text deltas", n)
		if isDelta(m) {
			ds = append(ds, m)
			if m["params"].(map[string]any)["type"] == "text_delta" {
				got++
			}
		}
	}
	return ds
}

func ofTypeIn(evs []map[string]any, typ string) []map[string]any {
	var out []map[string]any
	for _, e := range evs {
		if e["event_type"] == typ {
			out = append(out, e)
		}
	}
	return out
}

// requireValidNextTurn runs another turn on the strict fake: it answers
// only if the stored conversation closed every tool_use.
func requireValidNextTurn(t *testing.T, e *env, d *driver, lane string) {
	t.Helper()
	e.fake.Lane(lane).Enqueue(fakeprovider.Text("carrying on"))
	_, term := d.send("go on")
	require.Nil(t, term["error"], "%v", term["error"])
	assert.Equal(t, "carrying on", firstText(message(term)))
	assert.Zero(t, e.fake.StrictRefusals(), "the strict fake refused a conversation")
	reqs := e.fake.Requests()
	require.NoError(t, fakeprovider.ConversationError(reqs[len(reqs)-1]))
}

// TestInterruptStreamingTurn: a driver interrupts a turn while the provider
// streams it. The provider stream closes, the sendMessage stream ends with
// the text streamed so far as its message and "interrupted": true, the log
// keeps that text in server.message.interrupted, and the next turn's
// conversation (with that partial answer) is one the strict fake accepts.
// Both wire formats.
func TestInterruptStreamingTurn(t *testing.T) {
	for _, c := range []struct{ name, provider string }{{"anthropic", "primary"}, {"openai", "fallback"}} {
		t.Run(c.name, func(t *testing.T) {
			e, pid := interruptEnv(t, c.provider, nil)
			d := e.openOn(pid, nil)
			d.register()
			e.fake.Lane(c.provider).Enqueue(fakeprovider.Text(streamedText).HangStream(4))
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			send := openRaw(t, ctx, e.srv, d.sid, d.sk, d.request("tell me"), deltasOn)
			seen := textDeltas(t, send, 4)
			turnID := seen[0]["params"].(map[string]any)["turn_id"].(string)

			res := result(t, d.call("session.interrupt", map[string]any{}))
			assert.Equal(t, true, res["interrupted"])
			assert.Equal(t, turnID, res["turnId"])

			rest, term := untilTerminal(t, send)
			out := term["result"].(map[string]any)
			assert.Equal(t, true, out["interrupted"])
			partial := joinText(append(seen, rest...))
			require.NotEmpty(t, strings.TrimSpace(partial))
			assert.Equal(t, partial, firstText(out["message"].(map[string]any)))
			assert.True(t, strings.HasPrefix(streamedText, partial))
			evs := resultEvents(term)
			require.NotEmpty(t, evs)
			last := evs[len(evs)-1]
			assert.Equal(t, "server.message.interrupted", last["event_type"])
			assert.Equal(t, true, payload(last)["partial"])
			assert.Equal(t, d.keyID, payload(last)["by"])

			// A second interrupt finds nothing running.
			again := result(t, d.call("session.interrupt", map[string]any{}))
			assert.Equal(t, false, again["interrupted"])
			assert.Nil(t, again["turnId"])
			term = d.call("session.interrupt", map[string]any{"turnId": turnID})
			assert.Contains(t, rpcError(t, term, -32000), "turn_not_running")

			requireValidNextTurn(t, e, d, c.provider)
			reqs := e.fake.Requests()
			msgs := reqs[len(reqs)-1].Messages()
			require.GreaterOrEqual(t, len(msgs), 3)
			found := false
			for _, m := range msgs {
				if m["role"] == "assistant" && strings.Contains(textOf(m["content"]), partial) {
					found = true
				}
			}
			assert.True(t, found, "the partial answer is in the next turn's conversation: %v", msgs)
		})
	}
}

// textOf is the text of message content in either wire format.
func textOf(content any) string {
	if s, ok := content.(string); ok {
		return s
	}
	var b strings.Builder
	arr, _ := content.([]any)
	for _, x := range arr {
		if m, ok := x.(map[string]any); ok && m["type"] == "text" {
			s, _ := m["text"].(string)
			b.WriteString(s)
		}
	}
	return b.String()
}

// TestInterruptPausedTurn: a turn paused for a client tool is interrupted
// by its driver: its tool_use is closed with an error tool_result, the
// gate is free, and another driver's next turn runs on a conversation
// the strict fake accepts.
func TestInterruptPausedTurn(t *testing.T) {
	e, pid := interruptEnv(t, "primary", map[string]any{"allowed_tools": []string{"get_time"}})
	d := e.openOn(pid, map[string]any{"tools": []any{tool("get_time")}})
	d.register()
	e.fake.Lane("primary").Enqueue(fakeprovider.Text("let me look").WithToolUse("tu_p", "get_time", nil))
	_, term := d.send("what time?")
	require.Nil(t, term["error"])

	// An observer (joined, not registered) may not interrupt.
	_, key := e.srv.Key(t, pid)
	osk := e.srv.Join(t, d.sid, key, map[string]any{})
	obs := &driver{e: e, sid: d.sid, sk: osk}
	rpcError(t, obs.call("session.interrupt", map[string]any{}), -32001)

	assert.Contains(t, rpcError(t, d.call("session.interrupt", map[string]any{"turnId": "trn_other"}), -32000), "turn_not_running")
	res := result(t, d.call("session.interrupt", map[string]any{}))
	assert.Equal(t, true, res["interrupted"])
	turnID, _ := res["turnId"].(string)
	require.NotEmpty(t, turnID)
	assert.Contains(t, rpcError(t, d.call("session.interrupt", map[string]any{"turnId": turnID}), -32000), "turn_not_running")
	evs := d.allEvents()
	last := evs[len(evs)-1]
	require.Equal(t, "server.message.interrupted", last["event_type"])
	assert.Equal(t, []any{"tu_p"}, payload(last)["closed_tool_use_ids"])
	assert.Equal(t, false, payload(last)["partial"])
	results := ofTypeIn(evs, "tool.result")
	require.Len(t, results, 1)
	assert.Equal(t, true, payload(results[0])["is_error"])

	// The gate is free: another driver's turn runs at once.
	other := e.joinOn(pid, d)
	requireValidNextTurn(t, e, other, "primary")
}

// TestInterruptSandboxExec: an interrupt kills a sandbox command the turn
// is waiting for (real Docker): the command's process is gone, its
// tool_use is closed with an error tool_result, and the next turn's
// conversation is valid.
func TestInterruptSandboxExec(t *testing.T) {
	image := buildImages(t, 1)[0]
	e, pid := interruptEnv(t, "primary", map[string]any{"available_sandboxes": []string{image}})
	e.waitProvisioned(pid, image)
	d := e.openOn(pid, map[string]any{"sandbox_tools": []any{shellTool}})
	d.reapOnCleanup()
	d.register()
	result(t, d.call("session.startRemoteSandbox", map[string]any{"image": image}))
	e.fake.Lane("primary").Enqueue(fakeprovider.ToolUse("tu_x", "run_shell_command", map[string]any{"command": "sleep 321"}))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	send := d.stream(ctx, "run it")
	defer send.Close()
	cs := e.containers(d.sid)
	require.Len(t, cs, 1)
	drv := e.srv.Parts.Services.Driver()
	running := func() bool {
		r, err := drv.Exec(ctx, cs[0].ID, "ps", nil)
		return err == nil && strings.Contains(r.Stdout, "sleep 321")
	}
	require.Eventually(t, running, time.Minute, 50*time.Millisecond, "the command runs")

	res := result(t, d.call("session.interrupt", map[string]any{}))
	assert.Equal(t, true, res["interrupted"])
	assert.False(t, running(), "the command was killed")
	term := testenv.Terminal(t, drain(send))
	assert.Equal(t, true, term["result"].(map[string]any)["interrupted"])
	evs := d.allEvents()
	last := evs[len(evs)-1]
	require.Equal(t, "server.message.interrupted", last["event_type"])
	assert.Equal(t, []any{"tu_x"}, payload(last)["closed_tool_use_ids"])
	requireValidNextTurn(t, e, d, "primary")
}

// drain reads a stream to its end.
func drain(s *testenv.Stream) []map[string]any {
	var out []map[string]any
	for m := range s.Lines() {
		out = append(out, m)
	}
	return out
}

// TestInterruptAuthorization: a revoked key is refused before anything
// (401), an unknown turn id is a params error, and the admin route
// interrupts like a driver, recording "by": "operator".
func TestInterruptAuthorization(t *testing.T) {
	e, pid := interruptEnv(t, "primary", nil)
	d := e.openOn(pid, nil)
	d.register()
	rpcError(t, d.call("session.interrupt", map[string]any{"turnId": 7}), -32602)
	rpcError(t, d.call("session.interrupt", map[string]any{"turnId": "nope"}), -32602)

	// Admin: nothing running, then a hanging turn.
	r := e.srv.Admin(t, http.MethodPost, "/admin/v1/sessions/"+d.sid+"/interrupt", nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	assert.Equal(t, false, r.Body["interrupted"])
	r = e.srv.Admin(t, http.MethodPost, "/admin/v1/sessions/ses_missing/interrupt", nil)
	assert.Equal(t, http.StatusNotFound, r.Status)
	r = e.srv.Admin(t, http.MethodPost, "/admin/v1/sessions/"+d.sid+"/interrupt", map[string]any{"turnId": "trn_nope"})
	assert.Equal(t, http.StatusConflict, r.Status)

	e.fake.Lane("primary").Enqueue(fakeprovider.Hang())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	send := d.stream(ctx, "hang on")
	defer send.Close()
	<-e.fake.Started()
	r = e.srv.Admin(t, http.MethodPost, "/admin/v1/sessions/"+d.sid+"/interrupt", nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	assert.Equal(t, true, r.Body["interrupted"])
	term := testenv.Terminal(t, drain(send))
	out := term["result"].(map[string]any)
	assert.Equal(t, true, out["interrupted"])
	assert.Equal(t, "[interrupted]", firstText(out["message"].(map[string]any)))
	evs := resultEvents(term)
	assert.Equal(t, "operator", payload(evs[len(evs)-1])["by"])

	// Revoked: the key's session key no longer authenticates.
	rv := e.srv.Admin(t, http.MethodDelete, "/admin/v1/keys/"+d.keyID, nil)
	require.Equal(t, http.StatusNoContent, rv.Status, string(rv.Raw))
	buf := map[string]any{"jsonrpc": "2.0", "id": 1, "method": "session.interrupt", "params": map[string]any{}}
	resp := testenv.Do(t, http.MethodPost, e.srv.ClientURL+"/api/v1/sessions/"+d.sid+"/rpc", d.sk, buf)
	assert.Equal(t, http.StatusUnauthorized, resp.Status, string(resp.Raw))
}

// TestWhenBusy: Bae-When-Busy reject refuses a message while a turn runs;
// interrupt stops the running turn (whose sender gets its interrupted
// result) and runs the new message; enqueue (and no header) wait as BAE.
func TestWhenBusy(t *testing.T) {
	e, pid := interruptEnv(t, "primary", nil)
	d := e.openOn(pid, nil)
	d.register()
	other := e.joinOn(pid, d)
	e.fake.Lane("primary").Enqueue(fakeprovider.Hang())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	first := d.stream(ctx, "long one")
	defer first.Close()
	<-e.fake.Started()

	reject := e.srv.RPCStreamHeader(t, ctx, other.sid, other.sk, other.request("me too"), http.Header{"Bae-When-Busy": {"reject"}})
	assert.Contains(t, rpcError(t, testenv.Terminal(t, drain(reject)), -32000), "session_busy")
	bad := e.srv.RPCStreamHeader(t, ctx, other.sid, other.sk, other.request("me too"), http.Header{"Bae-When-Busy": {"later"}})
	rpcError(t, testenv.Terminal(t, drain(bad)), -32602)

	e.fake.Lane("primary").Enqueue(fakeprovider.Text("second answered"))
	second := e.srv.RPCStreamHeader(t, ctx, other.sid, other.sk, other.request("now"), http.Header{"Bae-When-Busy": {"interrupt"}})
	term := testenv.Terminal(t, drain(second))
	require.Nil(t, term["error"], "%v", term["error"])
	assert.Equal(t, "second answered", firstText(message(term)))
	ft := testenv.Terminal(t, drain(first))
	assert.Equal(t, true, ft["result"].(map[string]any)["interrupted"])
	assert.Zero(t, e.fake.StrictRefusals())

	// Nothing running: reject sends as usual.
	e.fake.Lane("primary").Enqueue(fakeprovider.Text("idle answer"))
	idle := e.srv.RPCStreamHeader(t, ctx, other.sid, other.sk, other.request("idle"), http.Header{"Bae-When-Busy": {"reject"}})
	term = testenv.Terminal(t, drain(idle))
	require.Nil(t, term["error"], "%v", term["error"])
	assert.Equal(t, "idle answer", firstText(message(term)))
}

// TestRecordedInterruptHistories records (BAE_RECORD_HISTORY=1) and
// replays one history per interrupt behaviour of the Session workflow.
func TestRecordedInterruptHistories(t *testing.T) {
	t.Run("interrupt_streaming", func(t *testing.T) {
		e, pid := interruptEnv(t, "primary", nil)
		// The interrupt reaches the call through the workflow only.
		e.srv.Parts.Deps.SlowInterrupt.Store(true)
		d := e.openOn(pid, nil)
		d.register()
		e.fake.Lane("primary").Enqueue(fakeprovider.Text(streamedText).HangStream(3))
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		send := openRaw(t, ctx, e.srv, d.sid, d.sk, d.request("tell me"), deltasOn)
		textDeltas(t, send, 3)
		assert.Equal(t, true, result(t, d.call("session.interrupt", map[string]any{}))["interrupted"])
		untilTerminal(t, send)
		requireValidNextTurn(t, e, d, "primary")
		d.closeSession()
		recordAndReplay(t, e, d.sid, "interrupt_streaming")
	})
	t.Run("interrupt_stopped_call", func(t *testing.T) {
		// The interrupt's stop message ends the call; the stopped attempt
		// waits for the update on a timer.
		e, pid := interruptEnv(t, "primary", nil)
		d := e.openOn(pid, nil)
		d.register()
		e.fake.Lane("primary").Enqueue(fakeprovider.Text(endlessText).Streamed(0, 5*time.Millisecond))
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		send := openRaw(t, ctx, e.srv, d.sid, d.sk, d.request("tell me"), deltasOn)
		textDeltas(t, send, 3)
		assert.Equal(t, true, result(t, d.call("session.interrupt", map[string]any{}))["interrupted"])
		untilTerminal(t, send)
		require.Equal(t, 1, stoppedAttempts(t, e.srv.Temporal, d.sid))
		requireValidNextTurn(t, e, d, "primary")
		d.closeSession()
		recordAndReplay(t, e, d.sid, "interrupt_stopped_call")
	})
	t.Run("interrupt_paused", func(t *testing.T) {
		e, pid := interruptEnv(t, "primary", map[string]any{"allowed_tools": []string{"get_time"}})
		d := e.openOn(pid, map[string]any{"tools": []any{tool("get_time")}})
		d.register()
		e.fake.Lane("primary").Enqueue(fakeprovider.ToolUse("tu_p", "get_time", nil))
		d.send("what time?")
		assert.Equal(t, true, result(t, d.call("session.interrupt", map[string]any{}))["interrupted"])
		requireValidNextTurn(t, e, d, "primary")
		d.closeSession()
		recordAndReplay(t, e, d.sid, "interrupt_paused")
	})
}

// controlCounter counts the turn-gate queries the API sends the workflow.
type controlCounter struct {
	api.Engine
	calls atomic.Int32
}

func (c *controlCounter) Control(ctx context.Context, sessionID string) (workflows.ControlView, error) {
	c.calls.Add(1)
	return c.Engine.Control(ctx, sessionID)
}

// TestWhenBusyRejectAsksPostgreSQL: Bae-When-Busy reject is answered from
// the stored messages and their recorded results, never by a query the
// workflow answers only once its provider call's workflow task ends; it
// refuses while a turn runs and while another waits behind it, and accepts
// once both results are recorded.
func TestWhenBusyRejectAsksPostgreSQL(t *testing.T) {
	e, pid := interruptEnv(t, "primary", nil)
	counter := &controlCounter{Engine: e.srv.Parts.Deps.Engine}
	e.srv.Parts.Deps.Engine = counter
	d := e.openOn(pid, nil)
	d.register()
	other := e.joinOn(pid, d)
	e.fake.Lane("primary").Enqueue(fakeprovider.Text("first answer").UntilReleased())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	first := d.stream(ctx, "long one")
	defer first.Close()
	<-e.fake.Started()

	reject := func(text string) map[string]any {
		t.Helper()
		return testenv.Terminal(t, drain(e.srv.RPCStreamHeader(t, ctx, other.sid, other.sk, other.request(text), http.Header{"Bae-When-Busy": {"reject"}})))
	}
	assert.Contains(t, rpcError(t, reject("while it runs"), -32000), "session_busy")
	// A message queued behind the running turn keeps the session busy.
	e.fake.Lane("primary").Enqueue(fakeprovider.Text("queued answer"))
	queued := other.stream(ctx, "queued")
	defer queued.Close()
	conn, err := pgx.Connect(ctx, e.srv.DatabaseURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	require.Eventually(t, func() bool {
		var n int
		return conn.QueryRow(ctx, `SELECT count(*) FROM turn_inputs WHERE session_id = $1`, d.sid).Scan(&n) == nil && n == 2
	}, 30*time.Second, 10*time.Millisecond, "the queued message is stored")
	assert.Contains(t, rpcError(t, reject("while one waits"), -32000), "session_busy")
	assert.Zero(t, counter.calls.Load(), "the workflow was not asked")

	e.fake.Release()
	for _, s := range []*testenv.Stream{first, queued} {
		term := testenv.Terminal(t, drain(s))
		require.Nil(t, term["error"], "%v", term["error"])
	}
	e.fake.Lane("primary").Enqueue(fakeprovider.Text("idle answer"))
	term := reject("idle")
	require.Nil(t, term["error"], "%v", term["error"])
	assert.Equal(t, "idle answer", firstText(message(term)))
	assert.Zero(t, counter.calls.Load(), "the workflow was not asked")
}

// TestWhenBusyRejectOneRoundTrip: a Bae-When-Busy: reject send on a busy
// session is answered from one PostgreSQL round trip, its authentication,
// budgets and turn gate read together (it made three one after the other);
// the budgets read are the sender's (another client key's spent budget does
// not refuse it) and a spent budget of its own still wins over the busy
// session, as it did.
func TestWhenBusyRejectOneRoundTrip(t *testing.T) {
	e, pid := interruptEnv(t, "primary", nil)
	d := e.openOn(pid, nil)
	d.register()
	other := e.joinOn(pid, d)
	e.fake.Lane("primary").Enqueue(fakeprovider.Text("first answer").UntilReleased())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	first := d.stream(ctx, "long one")
	defer first.Close()
	<-e.fake.Started()

	// Served in-process, so that the round trips counted are the reject's
	// own and not the running turn's.
	router := api.ClientRouter(e.srv.Parts.Deps)
	reject := func(text string) (string, store.DBCalls) {
		t.Helper()
		term, calls := other.sendCounted(ctx, router, text, http.Header{"Bae-When-Busy": {"reject"}})
		return rpcError(t, term, -32000), calls
	}
	msg, calls := reject("while it runs")
	assert.Contains(t, msg, "session_busy")
	assert.EqualValues(t, 1, calls.RoundTrips, "round trips of a refused reject")

	spent := func(keyID string) {
		t.Helper()
		r := e.srv.Admin(t, http.MethodPut, "/admin/v1/budgets/key/"+keyID, map[string]any{"unit": "tokens", "limit": 0})
		require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	}
	spent(d.keyID)
	msg, calls = reject("another key's budget is spent")
	assert.Contains(t, msg, "session_busy")
	assert.EqualValues(t, 1, calls.RoundTrips)
	spent(other.keyID)
	msg, calls = reject("my budget is spent")
	assert.Contains(t, msg, "quota_exceeded: the client key budget of "+other.keyID)
	assert.EqualValues(t, 1, calls.RoundTrips)

	e.fake.Release()
	drain(first)
}

// TestWhenBusyRejectPausedTurn: another driver's paused turn holds the gate
// for reject (its expiry is the workflow's to say, and it is idle then);
// the pause's owner resuming with its tool results is not refused.
func TestWhenBusyRejectPausedTurn(t *testing.T) {
	e, pid := interruptEnv(t, "primary", map[string]any{"allowed_tools": []string{"get_time"}})
	d := e.openOn(pid, map[string]any{"tools": []any{tool("get_time")}})
	d.register()
	other := e.joinOn(pid, d)
	e.fake.Lane("primary").Enqueue(fakeprovider.Text("let me look").WithToolUse("tu_p", "get_time", nil))
	_, term := d.send("what time?")
	require.Nil(t, term["error"])

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rejectBy := func(dr *driver, content any) map[string]any {
		t.Helper()
		return testenv.Terminal(t, drain(e.srv.RPCStreamHeader(t, ctx, dr.sid, dr.sk, dr.request(content), http.Header{"Bae-When-Busy": {"reject"}})))
	}
	assert.Contains(t, rpcError(t, rejectBy(other, "mine now"), -32000), "session_busy")

	e.fake.Lane("primary").Enqueue(fakeprovider.Text("it is noon"))
	term = rejectBy(d, []any{map[string]any{"type": "tool_result", "tool_use_id": "tu_p", "content": "12:00"}})
	require.Nil(t, term["error"], "%v", term["error"])
	assert.Equal(t, "it is noon", firstText(message(term)))
}
