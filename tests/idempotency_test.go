package tests

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/testenv"
	"github.com/bae-go/bae-go/store"
)

// keyed sends a sendMessage with an Idempotency-Key and collects every
// object of its stream.
func (d *driver) keyed(ctx context.Context, key string, content any) []map[string]any {
	d.e.t.Helper()
	st := d.keyedStream(ctx, key, content)
	defer st.Close()
	require.Equal(d.e.t, http.StatusOK, st.Status())
	var out []map[string]any
	for m := range st.Lines() {
		out = append(out, m)
	}
	return out
}

func (d *driver) keyedStream(ctx context.Context, key string, content any) *testenv.Stream {
	return d.e.srv.RPCStreamHeader(d.e.t, ctx, d.sid, d.sk, d.request(content), http.Header{"Idempotency-Key": {key}})
}

// storedInputs counts the session's stored messages.
func (e *env) storedInputs(sid string) int {
	e.t.Helper()
	var n int
	require.NoError(e.t, e.srv.Parts.Store.Pool.QueryRow(context.Background(), `SELECT count(*) FROM turn_inputs WHERE session_id = $1`, sid).Scan(&n))
	return n
}

// TestResendWithIdempotencyKeyRelaysTheStoredTurn: a client whose response
// was lost (the stream broke before it saw anything) resends its message
// with the same Idempotency-Key, while the turn runs and after it finished.
// Nothing is stored twice, the turn runs once, every resend gets the same
// result.
func TestResendWithIdempotencyKeyRelaysTheStoredTurn(t *testing.T) {
	e := newEnv(t, envOpts{})
	d := e.open()
	lane := e.fake.Lane("primary")
	lane.Enqueue(fakeprovider.Text("the one answer").UntilReleased())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// The response is lost: the client hangs up once the turn is running.
	first := d.keyedStream(ctx, "msg-0001", "count me once")
	select {
	case <-e.fake.Started():
	case <-ctx.Done():
		t.Fatal("the provider call never started")
	}
	first.Close()

	// Resent while the turn runs: relayed live, from the turn's start.
	second := d.keyedStream(ctx, "msg-0001", "count me once")
	defer second.Close()
	require.Equal(t, http.StatusOK, second.Status())
	assert.Equal(t, "msg-0001", second.Header().Get("Idempotency-Key"), "the server says it honoured the key")
	assert.Equal(t, "provider.request", waitEvent(t, second, "provider.request")["event_type"])
	e.fake.Release()
	var live []map[string]any
	for m := range second.Lines() {
		live = append(live, m)
	}
	term := testenv.Terminal(t, live)
	require.NotNil(t, term["result"], "%v", term)
	assert.Equal(t, "the one answer", firstText(message(term)))

	// Resent after it finished: the same terminal result.
	again := testenv.Terminal(t, d.keyed(ctx, "msg-0001", "count me once"))
	require.NotNil(t, again["result"], "%v", again)
	assert.Equal(t, message(term), message(again))
	assert.Equal(t, types(resultEvents(term)), types(resultEvents(again)))

	assert.Equal(t, 1, e.storedInputs(d.sid), "one stored message")
	counts := countTypes(d.allEvents())
	assert.Equal(t, 1, counts["client.message.send"], "one turn")
	assert.Equal(t, 1, counts["server.message.send"])
	assert.Equal(t, 1, e.fake.RequestCount(), "the provider was called once")

	// The key is the message's: another message under it is refused, and a
	// new key is a new turn.
	bad := testenv.Terminal(t, d.keyed(ctx, "msg-0001", "something else"))
	require.NotNil(t, bad["error"], "%v", bad)
	assert.EqualValues(t, -32602, bad["error"].(map[string]any)["code"])
	next := testenv.Terminal(t, d.keyed(ctx, "msg-0002", "count me once"))
	assert.Equal(t, "echo: count me once", firstText(message(next)))
	assert.Equal(t, 2, e.storedInputs(d.sid))

	// Another driver of the session cannot attach to this client's turn.
	other := e.join(d)
	stolen := testenv.Terminal(t, other.keyed(ctx, "msg-0001", "count me once"))
	require.NotNil(t, stolen["error"], "%v", stolen)
	assert.EqualValues(t, -32602, stolen["error"].(map[string]any)["code"])
}

// TestIdempotencyKeyValidation: a malformed key is -32602 and stores nothing.
func TestIdempotencyKeyValidation(t *testing.T) {
	e := newEnv(t, envOpts{})
	d := e.open()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, key := range []string{"has space", "k\u00fc", "semi;colon", strings.Repeat("k", 129)} {
		term := testenv.Terminal(t, d.keyed(ctx, key, "hello"))
		require.NotNil(t, term["error"], "%q: %v", key, term)
		assert.EqualValues(t, -32602, term["error"].(map[string]any)["code"], "%q", key)
	}
	assert.Zero(t, e.storedInputs(d.sid))
}

// TestResendAfterTheTurnsRunEnded: the turn finished in a workflow run that
// is no longer the session's current one (here terminated and replaced; a
// continue-as-new does the same), so its result is rebuilt from the log.
// It is not submitted again: re-run, this paused tool turn (resumed since)
// would pause the session once more.
func TestResendAfterTheTurnsRunEnded(t *testing.T) {
	e := newEnv(t, envOpts{})
	d := e.open("get_time")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e.fake.Lane("primary").Enqueue(fakeprovider.ToolUse("tu_1", "get_time", nil), fakeprovider.Text("it is noon"))
	term := testenv.Terminal(t, d.keyed(ctx, "old-run", "what time is it?"))
	require.NotNil(t, term["result"], "%v", term)
	_, resumed := d.send([]any{map[string]any{"type": "tool_result", "tool_use_id": "tu_1", "content": "12:00"}})
	require.Equal(t, "it is noon", firstText(message(resumed)))
	require.NoError(t, e.srv.Temporal.TerminateWorkflow(ctx, d.sid, "", "simulated loss"))
	_, next := d.send("in the new run")
	require.Equal(t, "echo: in the new run", firstText(message(next)))

	again := testenv.Terminal(t, d.keyed(ctx, "old-run", "what time is it?"))
	require.NotNil(t, again["result"], "%v", again)
	assert.Equal(t, message(term), message(again), "the paused reply, as the first call got it")
	var pending bool
	require.NoError(t, e.srv.Parts.Store.Pool.QueryRow(ctx, `SELECT pending_turn IS NOT NULL FROM sessions WHERE id = $1`, d.sid).Scan(&pending))
	assert.False(t, pending, "the resend did not pause the session again")
	_, last := d.send("still plain?")
	assert.Equal(t, "echo: still plain?", firstText(message(last)))
	counts := countTypes(d.allEvents())
	assert.Equal(t, 4, counts["client.message.send"])
	assert.Zero(t, counts["session.error"])
}

// TestResendOfALostSubmissionRunsItOnce: the message was stored under its
// key but its submission died with the server; the resend submits it (the
// update id is the turn id, so the orphan sweep cannot double it).
func TestResendOfALostSubmissionRunsItOnce(t *testing.T) {
	e := newEnv(t, envOpts{})
	d := e.open()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	put, err := e.srv.Parts.Store.PutTurnInput(ctx, d.sid, "trn_lostkeyed00000000000000000000", d.keyID, []byte(`{"role":"user","content":"stored, never submitted"}`), "lost-1", store.Caps{})
	require.NoError(t, err)
	require.Nil(t, put.Prior)
	term := testenv.Terminal(t, d.keyed(ctx, "lost-1", "stored, never submitted"))
	require.NotNil(t, term["result"], "%v", term)
	assert.Equal(t, "echo: stored, never submitted", firstText(message(term)))
	assert.Equal(t, 1, e.storedInputs(d.sid))
	assert.Equal(t, 1, countTypes(d.allEvents())["client.message.send"])
}

// TestResentToolTurnKeepsItsPause is the crash bench's "lost continuation":
// a client tool turn whose response was lost is resent. Stored twice, the
// second copy abandoned the first pause and paused on a new tool_use, so the
// client's continuation (answering the tool_use it got first) failed the
// merge and ended the session in error. Under its Idempotency-Key the resend
// relays the first turn: the same tool_use, and the continuation resumes it.
func TestResentToolTurnKeepsItsPause(t *testing.T) {
	e := newEnv(t, envOpts{})
	d := e.open("get_time")
	lane := e.fake.Lane("primary")
	// Every question gets a tool call with a fresh id; an answer, the time.
	lane.Respond(func(r fakeprovider.Recorded) fakeprovider.Reply {
		switch {
		case r.HasToolResult():
			return fakeprovider.Text("it is noon")
		case r.Seq == 1:
			return fakeprovider.ToolUse("", "get_time", nil).UntilReleased()
		}
		return fakeprovider.ToolUse("", "get_time", nil)
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	lost := d.keyedStream(ctx, "tool-turn-1", "what time is it?")
	select {
	case <-e.fake.Started():
	case <-ctx.Done():
		t.Fatal("the provider call never started")
	}
	lost.Close()
	e.fake.Release()
	term := testenv.Terminal(t, d.keyed(ctx, "tool-turn-1", "what time is it?"))
	require.NotNil(t, term["result"], "%v", term)
	uses := message(term)["content"].([]any)
	require.Len(t, uses, 1)
	id := uses[0].(map[string]any)["id"]
	require.Equal(t, "toolu_fake_1_1", id, "the resend relays the first turn's tool_use")

	_, resumed := d.send([]any{map[string]any{"type": "tool_result", "tool_use_id": id, "content": "12:00"}})
	require.NotNil(t, resumed["result"], "%v", resumed)
	assert.Equal(t, "it is noon", firstText(message(resumed)))
	var state string
	require.NoError(t, e.srv.Parts.Store.Pool.QueryRow(ctx, `SELECT state FROM sessions WHERE id = $1`, d.sid).Scan(&state))
	assert.Equal(t, "open", state)
	counts := countTypes(d.allEvents())
	assert.Equal(t, 2, counts["client.message.send"], "the tool turn and its continuation, once each")
	assert.Zero(t, counts["session.error"])
}

// TestResendRefusedByAStreamCapSaysTheMessageIsStored: a resend under a
// stored Idempotency-Key that a live-stream cap refuses must not read as
// a refusal that stored nothing (docs/api.md): its message is stored and
// will run. The chaos campaign's ses_1fc2…: a send's response was lost,
// the SDK's resend was refused at the key's stream cap, the driver took
// the message for refused, and its turn ran after the driver's next one.
// Seen red with resendTurn answering the plain cap refusal.
func TestResendRefusedByAStreamCapSaysTheMessageIsStored(t *testing.T) {
	e := newEnv(t, envOpts{serverEnv: map[string]string{"BAE_MAX_STREAMS_PER_SESSION": "1"}})
	d := e.open()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d.requireResendAnswered(ctx, "k-stored", "hello")

	// The session's one stream: a subscribe.
	sub := e.srv.RPCStream(t, ctx, d.sid, d.sk, map[string]any{"jsonrpc": "2.0", "id": 9, "method": "session.subscribe", "params": map[string]any{}})
	defer sub.Close()
	require.Equal(t, http.StatusOK, sub.Status())

	term := testenv.Terminal(t, d.keyed(ctx, "k-stored", "hello"))
	errObj, _ := term["error"].(map[string]any)
	require.NotNil(t, errObj, "the resend was not refused: %v", term)
	assert.Contains(t, errObj["message"], "quota_exceeded")
	assert.Contains(t, errObj["message"], "already stored", "a refused resend reads as a message never stored")
	// A fresh message is refused as before: nothing stored.
	n := e.storedInputs(d.sid)
	term = testenv.Terminal(t, d.keyed(ctx, "k-new", "again"))
	errObj, _ = term["error"].(map[string]any)
	require.NotNil(t, errObj)
	assert.NotContains(t, errObj["message"], "already stored")
	assert.Equal(t, n, e.storedInputs(d.sid))
}
