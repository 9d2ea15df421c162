package tests

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/testenv"
)

func TestSimpleTextTurn(t *testing.T) {
	e := newEnv(t, envOpts{})
	d := e.open()
	notes, term := d.send("Hello there")

	evs := resultEvents(term)
	assert.Equal(t, []string{"client.message.send", "provider.request", "provider.response", "server.message.send"}, types(evs))
	// The sender's own client.message.send is not echoed back live.
	assert.Equal(t, []string{"provider.request", "provider.response", "server.message.send"}, types(notifications(notes)))
	assert.Equal(t, "echo: Hello there", firstText(message(term)))
	assert.Equal(t, "assistant", message(term)["role"])

	req := payload(evs[1])
	assert.EqualValues(t, 0, req["attempt"])
	assert.Equal(t, "primary", req["kind"])
	assert.Equal(t, "anthropic", req["provider"])
	assert.Equal(t, "claude-fake", req["model"])
	assert.EqualValues(t, 4096, req["max_tokens"])
	resp := payload(evs[2])
	assert.Equal(t, true, resp["ok"])
	assert.EqualValues(t, 200, resp["status"])
	assert.NotNil(t, resp["body"])
	for _, ev := range evs {
		assert.Equal(t, d.keyID, ev["client_key_id"], "every event is attributed to the acting driver")
	}
	// The token is resolved at call time and never logged.
	raw, _ := json.Marshal(d.allEvents())
	assert.NotContains(t, string(raw), "sk-fake-secret")
	reqs := e.fake.Requests()
	require.Len(t, reqs, 1)
	assert.Equal(t, "sk-fake-secret", reqs[0].Header.Get("x-api-key"))
	// ...nor does it, or the conversation, reach Temporal history.
	hist := e.srv.Temporal.GetWorkflowHistory(context.Background(), d.sid, "", false, 0)
	for hist.HasNext() {
		ev, err := hist.Next()
		require.NoError(t, err)
		text := ev.String() // prototext shows payload bytes as text
		assert.NotContains(t, text, "sk-fake-secret")
		assert.NotContains(t, text, "Hello there")
	}

	// A second turn carries the whole conversation.
	_, term = d.send("Again")
	assert.Equal(t, "echo: Again", firstText(message(term)))
	msgs := e.fake.Requests()[1].Messages()
	require.Len(t, msgs, 3)
	assert.Equal(t, "assistant", msgs[1]["role"])
}

func TestClientToolRoundTrip(t *testing.T) {
	e := newEnv(t, envOpts{})
	d := e.open("get_time")
	e.fake.Lane("primary").Enqueue(
		fakeprovider.ToolUse("tu_1", "get_time", map[string]any{"tz": "UTC"}),
		fakeprovider.Text("It is noon."),
	)
	_, term := d.send("What time is it?")
	evs := resultEvents(term)
	assert.Equal(t, []string{"client.message.send", "provider.request", "provider.response", "tool.call", "server.message.send"}, types(evs))
	call := payload(evs[3])
	assert.Equal(t, map[string]any{"id": "tu_1", "name": "get_time", "input": map[string]any{"tz": "UTC"}, "dispatch": "client", "server_name": nil}, call)
	content := message(term)["content"].([]any)
	require.Len(t, content, 1)
	block := content[0].(map[string]any)
	assert.Equal(t, "tool_use", block["type"])
	assert.Equal(t, "client", block["dispatch"])

	// The tool definition reached the provider.
	assert.Equal(t, []string{"get_time"}, e.fake.Requests()[0].ToolNames())

	_, term = d.send([]any{map[string]any{"type": "tool_result", "tool_use_id": "tu_1", "content": "12:00"}})
	evs = resultEvents(term)
	assert.Equal(t, []string{"client.message.send", "tool.result", "provider.request", "provider.response", "server.message.send"}, types(evs))
	assert.Equal(t, map[string]any{"tool_use_id": "tu_1", "dispatch": "client", "server_name": nil, "is_error": false, "content": "12:00"}, payload(evs[1]))
	assert.Equal(t, "It is noon.", firstText(message(term)))

	// dispatch never reaches the provider.
	second := e.fake.Requests()[1]
	raw := string(second.RawBody)
	assert.NotContains(t, raw, `"dispatch"`)
	msgs := second.Messages()
	require.Len(t, msgs, 3)
	assert.Equal(t, "user", msgs[2]["role"])
}

func TestFallbackToOpenAIKind(t *testing.T) {
	e := newEnv(t, envOpts{fallbacks: []string{"missing-name", "fallback"}})
	d := e.open()
	e.fake.Lane("primary").Enqueue(fakeprovider.Error(429, "rate limit exceeded"))
	e.fake.Lane("fallback").Enqueue(fakeprovider.Text("from the fallback"))
	_, term := d.send("hi")
	evs := resultEvents(term)
	assert.Equal(t, []string{"client.message.send", "provider.request", "provider.response", "session.error", "provider.request", "provider.response", "server.message.send"}, types(evs))
	failed := payload(evs[2])
	assert.Equal(t, false, failed["ok"])
	assert.EqualValues(t, 429, failed["status"])
	assert.Equal(t, "rate limit exceeded", failed["error"])
	assert.Equal(t, "provider_call_failed", payload(evs[3])["reason"])
	fb := payload(evs[4])
	assert.EqualValues(t, 1, fb["attempt"])
	assert.Equal(t, "fallback", fb["kind"])
	assert.Equal(t, "openai", fb["provider"])
	// The raw OpenAI body is logged untranslated...
	body := payload(evs[5])["body"].(map[string]any)
	assert.Contains(t, body, "choices")
	// ...while the turn sees canonical blocks.
	assert.Equal(t, "from the fallback", firstText(message(term)))
	reqs := e.fake.Requests()
	require.Len(t, reqs, 2)
	assert.Equal(t, "/fallback/v1/chat/completions", reqs[1].Path)
	assert.Equal(t, "Bearer literal-token", reqs[1].Header.Get("Authorization"))
}

func TestAllProvidersFail(t *testing.T) {
	e := newEnv(t, envOpts{fallbacks: []string{"fallback", "unset-token"}})
	d := e.open()
	e.fake.Lane("primary").Enqueue(fakeprovider.Error(500, "boom"))
	e.fake.Lane("fallback").Enqueue(fakeprovider.Error(503, "overloaded"))
	_, term := d.send("hi")
	evs := resultEvents(term)
	assert.Equal(t, []string{
		"client.message.send",
		"provider.request", "provider.response", "session.error",
		"provider.request", "provider.response",
		"provider.request", "provider.response",
		"session.error",
	}, types(evs))
	unset := payload(evs[7])
	assert.Equal(t, false, unset["ok"])
	assert.Nil(t, unset["status"])
	assert.Contains(t, unset["error"], "BAE_TEST_DEFINITELY_UNSET")
	last := payload(evs[8])
	assert.Equal(t, "all_providers_failed", last["reason"])
	assert.EqualValues(t, 3, last["attempts"])
	assert.Equal(t, "The provider is currently unavailable.", firstText(message(term)))
	r := e.srv.Admin(t, http.MethodGet, "/admin/v1/sessions?state=error", nil)
	assert.Len(t, r.Body["items"], 1)

	_, term = d.send("again?")
	assert.EqualValues(t, -32000, term["error"].(map[string]any)["code"])
}

func TestMergeInvalidEndsSession(t *testing.T) {
	e := newEnv(t, envOpts{})
	d := e.open("get_time")
	e.fake.Lane("primary").Enqueue(fakeprovider.ToolUse("tu_1", "get_time", nil))
	d.send("time?")
	_, term := d.send([]any{map[string]any{"type": "tool_result", "tool_use_id": "tu_wrong", "content": "x"}})
	errObj := term["error"].(map[string]any)
	assert.EqualValues(t, -32000, errObj["code"])
	assert.Contains(t, errObj["message"], "tool result merge invalid")
	all := d.allEvents()
	last := all[len(all)-1]
	assert.Equal(t, "session.error", last["event_type"])
	assert.Equal(t, "tool_result_merge_invalid", payload(last)["reason"])
	assert.NotEmpty(t, payload(last)["detail"])
	_, term = d.send("hello?")
	assert.EqualValues(t, -32000, term["error"].(map[string]any)["code"])
}

func TestVoluntaryAbandonmentKeepsSessionOpen(t *testing.T) {
	e := newEnv(t, envOpts{})
	d := e.open("get_time")
	e.fake.Lane("primary").Enqueue(fakeprovider.ToolUse("tu_1", "get_time", nil))
	d.send("time?")
	_, term := d.send("never mind, tell me a joke")
	assert.Equal(t, "echo: never mind, tell me a joke", firstText(message(term)))
	cms := payload(resultEvents(term)[0])
	blocks := cms["content"].([]any)
	require.Len(t, blocks, 2)
	assert.Equal(t, map[string]any{"type": "tool_result", "tool_use_id": "tu_1", "content": "Client tool call was abandoned before returning a result.", "is_error": true}, blocks[0])
	assert.Equal(t, map[string]any{"type": "text", "text": "never mind, tell me a joke"}, blocks[1])
}

func TestMixedClientAndServerToolsMergeOnResume(t *testing.T) {
	e := newEnv(t, envOpts{})
	d := e.open("get_time")
	e.fake.Lane("primary").Enqueue(
		fakeprovider.ToolUse("tu_c", "get_time", nil).WithToolUse("tu_s", "list_directory", map[string]any{"path": "/"}),
		fakeprovider.Text("done"),
	)
	_, term := d.send("go")
	evs := resultEvents(term)
	assert.Equal(t, []string{"client.message.send", "provider.request", "provider.response", "tool.call", "tool.call", "mcp.request", "mcp.response", "tool.result", "server.message.send"}, types(evs))
	assert.Equal(t, "mcp", payload(evs[4])["dispatch"])
	srvResult := payload(evs[7])
	assert.Equal(t, true, srvResult["is_error"])
	assert.Equal(t, "mcp", srvResult["dispatch"])
	content := message(term)["content"].([]any)
	require.Len(t, content, 2)
	assert.Equal(t, "client", content[0].(map[string]any)["dispatch"])
	assert.Equal(t, "mcp", content[1].(map[string]any)["dispatch"])

	// The client answers only its own id, plus a stray copy of the server's.
	_, term = d.send([]any{
		map[string]any{"type": "tool_result", "tool_use_id": "tu_s", "content": "client copy must be dropped"},
		map[string]any{"type": "tool_result", "tool_use_id": "tu_c", "content": "noon"},
	})
	evs = resultEvents(term)
	assert.Equal(t, []string{"client.message.send", "tool.result", "provider.request", "provider.response", "server.message.send"}, types(evs))
	merged := payload(evs[0])["content"].([]any)
	require.Len(t, merged, 2)
	assert.Equal(t, "tu_c", merged[0].(map[string]any)["tool_use_id"])
	assert.Equal(t, "tu_s", merged[1].(map[string]any)["tool_use_id"])
	assert.NotEqual(t, "client copy must be dropped", merged[1].(map[string]any)["content"])
	assert.Equal(t, "done", firstText(message(term)))
}

func TestLoopLimit(t *testing.T) {
	e := newEnv(t, envOpts{})
	d := e.open()
	e.fake.Lane("primary").Respond(func(fakeprovider.Recorded) fakeprovider.Reply {
		return fakeprovider.ToolUse("", "unroutable_tool", nil)
	})
	_, term := d.send("loop forever")
	evs := resultEvents(term)
	last := payload(evs[len(evs)-1])
	assert.Equal(t, "loop_limit", last["reason"])
	assert.EqualValues(t, 8, last["max_iterations"])
	assert.Equal(t, 8, e.fake.RequestCount())
	assert.Equal(t, "The provider is currently unavailable.", firstText(message(term)))
}

func TestTwoDriversFIFO(t *testing.T) {
	e := newEnv(t, envOpts{})
	a := e.open()
	b := e.join(a)
	e.fake.Lane("primary").Enqueue(fakeprovider.Text("A's answer").UntilReleased(), fakeprovider.Text("B's answer"))

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sa := a.stream(ctx, "from A")
	defer sa.Close()
	<-e.fake.Started() // A's provider call is in flight
	sb := b.stream(ctx, "from B")
	defer sb.Close()
	// B is queued: its stream stays silent while A's turn runs.
	assert.Nil(t, sb.Next(500*time.Millisecond), "a queued caller receives zero bytes")
	e.fake.Release()

	var aObjs, bObjs []map[string]any
	for m := range sa.Lines() {
		aObjs = append(aObjs, m)
	}
	for m := range sb.Lines() {
		bObjs = append(bObjs, m)
	}
	assert.Equal(t, "A's answer", firstText(message(aObjs[len(aObjs)-1])))
	assert.Equal(t, "B's answer", firstText(message(bObjs[len(bObjs)-1])))

	var seq []string
	for _, ev := range a.allEvents() {
		switch ev["event_type"] {
		case "client.message.send", "server.message.send":
			who := "A"
			if ev["client_key_id"] == b.keyID {
				who = "B"
			}
			seq = append(seq, who+":"+ev["event_type"].(string))
		}
	}
	assert.Equal(t, []string{"A:client.message.send", "A:server.message.send", "B:client.message.send", "B:server.message.send"}, seq)
	// Per-turn tool scoping: B's turn advertised only B's tools (none).
	assert.Empty(t, e.fake.Requests()[1].ToolNames())
	r := e.srv.Client(t, http.MethodGet, "/api/v1/sessions/"+a.sid+"/participants", a.sk, nil)
	assert.ElementsMatch(t, []any{a.keyID, b.keyID}, r.Body["drivers"])
}

func TestPausedTurnTimeoutAbandonment(t *testing.T) {
	e := newEnv(t, envOpts{turnTimeout: 2 * time.Second})
	a := e.open("get_time")
	b := e.join(a)
	e.fake.Lane("primary").Enqueue(fakeprovider.ToolUse("tu_1", "get_time", nil), fakeprovider.Text("B served"))
	_, term := a.send("time?")
	require.Equal(t, "tool_use", message(term)["content"].([]any)[0].(map[string]any)["type"])

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	sb := b.stream(ctx, "B's question")
	defer sb.Close()
	var objs []map[string]any
	for m := range sb.Lines() {
		objs = append(objs, m)
	}
	assert.GreaterOrEqual(t, time.Since(start), 1500*time.Millisecond, "B waited for A's turn to time out")
	term = objs[len(objs)-1]
	assert.Equal(t, "B served", firstText(message(term)))

	all := a.allEvents()
	var abandoned map[string]any
	for _, ev := range all {
		if ev["event_type"] == "session.error" {
			abandoned = ev
		}
	}
	require.NotNil(t, abandoned)
	assert.Equal(t, map[string]any{"reason": "driver_turn_abandoned", "owner_client_key_id": a.keyID}, payload(abandoned))
	assert.Equal(t, a.keyID, abandoned["client_key_id"])
	cms := payload(resultEvents(term)[0])
	blocks := cms["content"].([]any)
	assert.Equal(t, true, blocks[0].(map[string]any)["is_error"])
	assert.Equal(t, "B's question", blocks[1].(map[string]any)["text"])
	r := e.srv.Admin(t, http.MethodGet, "/admin/v1/sessions?state=open", nil)
	assert.Len(t, r.Body["items"], 1, "abandonment keeps the session open")
}

func TestSubscribeReplayAndLive(t *testing.T) {
	e := newEnv(t, envOpts{})
	d := e.open()
	d.send("first")
	all := d.allEvents()
	since := all[1]["id"].(string) // after session.open

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	obs := e.srv.RPCStream(t, ctx, d.sid, d.sk, map[string]any{"jsonrpc": "2.0", "id": 9, "method": "session.subscribe", "params": map[string]any{"since_event_id": since}})
	defer obs.Close()
	var replayed []string
	for i := 0; i < len(all)-2; i++ {
		m := obs.Next(10 * time.Second)
		require.NotNil(t, m)
		replayed = append(replayed, m["params"].(map[string]any)["event_type"].(string))
	}
	assert.Equal(t, types(all[2:]), replayed)

	d.send("second")
	var live []string
	for len(live) < 4 {
		m := obs.Next(10 * time.Second)
		require.NotNil(t, m, "live events arrive")
		_, hasID := m["id"]
		require.False(t, hasID, "subscribe has no terminal while active")
		live = append(live, m["params"].(map[string]any)["event_type"].(string))
	}
	// Observers see every event, the driver's own client.message.send included.
	assert.Equal(t, []string{"client.message.send", "provider.request", "provider.response", "server.message.send"}, live)

	objs := e.srv.Call(t, d.sid, d.sk, "session.unsubscribe", nil)
	assert.Equal(t, map[string]any{"unsubscribed": true}, objs[len(objs)-1]["result"])
	for range obs.Lines() {
	}
	assert.Nil(t, obs.Next(time.Second), "the subscription ended")
}

// TestStaleToolResultOfAnotherClientLeavesThePauseAlone: a driver's
// tool_result queued behind another driver's message reaches its begin
// after that message abandoned its pause and paused on a tool of its own
// (the chaos campaign's ses_6b5d…). The stale result answers none of the
// paused turn's calls: it is refused as a tool_result with no pause, and
// neither abandons the other driver's pause nor ends the session (it did:
// tool_result_merge_invalid, session in error, every later send refused).
// Seen red without the begin's check (the session ended).
func TestStaleToolResultOfAnotherClientLeavesThePauseAlone(t *testing.T) {
	e := newEnv(t, envOpts{turnTimeout: 2 * time.Second})
	a := e.open("get_time")
	b := e.join(a, "get_time")
	e.fake.Lane("primary").Enqueue(fakeprovider.ToolUse("tu_a", "get_time", nil), fakeprovider.ToolUse("tu_b", "get_time", nil))
	_, term := a.send("time?")
	require.Equal(t, "tool_use", message(term)["content"].([]any)[0].(map[string]any)["type"])
	// B's message waits out A's pause, abandons it and pauses on tu_b.
	_, term = b.send("B's question")
	require.Nil(t, term["error"], "%v", term["error"])
	require.Equal(t, "tu_b", message(term)["content"].([]any)[0].(map[string]any)["id"])

	// A's result for tu_a comes late.
	_, term = a.send([]any{map[string]any{"type": "tool_result", "tool_use_id": "tu_a", "content": "12:00"}})
	requireNoPausedTurnRefusal(t, term)
	for _, ev := range a.allEvents() {
		if ev["event_type"] == "session.error" {
			assert.NotEqual(t, "tool_result_merge_invalid", payload(ev)["reason"], "the session was ended")
		}
	}
	r := e.srv.Admin(t, http.MethodGet, "/admin/v1/sessions?state=open", nil)
	assert.Len(t, r.Body["items"], 1, "the stale result ended the session")

	// B's pause stands: its result resumes its turn.
	e.fake.Lane("primary").Enqueue(fakeprovider.Text("B done"))
	_, term = b.send([]any{map[string]any{"type": "tool_result", "tool_use_id": "tu_b", "content": "12:01"}})
	require.Nil(t, term["error"], "%v", term["error"])
	assert.Equal(t, "B done", firstText(message(term)))
}

// TestToolResultOfANonOwnerQueuedAtALivePause: a driver's tool_result sent
// while another driver's turn is paused waits its turn (the owner bypasses
// the queue, as in BAE) and, once the owner's result ended the pause,
// answers no tool_use. BAE stores such a message and sends it upstream,
// where a provider refuses a tool_result with no tool_use
// (all_providers_failed, the session in error); bae-go refuses it as
// no_paused_turn, with the -32602 error object pinned here, stores nothing
// and keeps the session open (docs/api.md, deliberate differences).
func TestToolResultOfANonOwnerQueuedAtALivePause(t *testing.T) {
	e := newEnv(t, envOpts{})
	a := e.open("get_time")
	b := e.join(a, "get_time")
	e.fake.Lane("primary").Enqueue(fakeprovider.ToolUse("tu_a", "get_time", nil))
	_, term := a.send("time?")
	require.Equal(t, "tu_a", message(term)["content"].([]any)[0].(map[string]any)["id"])

	// B's result is stored and queued before A resumes: its stream opens
	// only once the message is stored.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	late := b.stream(ctx, []any{map[string]any{"type": "tool_result", "tool_use_id": "tu_a", "content": "B's stale-result"}})
	defer late.Close()
	require.Equal(t, http.StatusOK, late.Status())

	e.fake.Lane("primary").Enqueue(fakeprovider.Text("A done"))
	_, term = a.send([]any{map[string]any{"type": "tool_result", "tool_use_id": "tu_a", "content": "12:00"}})
	require.Nil(t, term["error"], "%v", term["error"])
	assert.Equal(t, "A done", firstText(message(term)))

	var objs []map[string]any
	for m := range late.Lines() {
		objs = append(objs, m)
	}
	requireNoPausedTurnRefusal(t, testenv.Terminal(t, objs))
	// Nothing of it stored, nothing ended, no pause abandoned.
	for _, ev := range a.allEvents() {
		raw, err := json.Marshal(ev)
		require.NoError(t, err)
		assert.NotContains(t, string(raw), "B's stale-result", "the refused message was stored")
		assert.NotEqual(t, "session.error", ev["event_type"], "%s", raw)
	}
	r := e.srv.Admin(t, http.MethodGet, "/admin/v1/sessions?state=open", nil)
	assert.Len(t, r.Body["items"], 1, "the refused tool_result ended the session")

	// The session goes on.
	_, term = b.send("B's question")
	require.Nil(t, term["error"], "%v", term["error"])
	assert.Equal(t, "echo: B's question", firstText(message(term)))
}

// requireNoPausedTurnRefusal: the whole error object a tool_result that
// answers no paused tool call gets, BAE's shape for a refused request's
// params (code -32602, "Invalid params: …", no data).
func requireNoPausedTurnRefusal(t *testing.T, term map[string]any) {
	t.Helper()
	require.Nil(t, term["result"], "a tool_result answering no paused call was accepted: %v", term)
	assert.Equal(t, map[string]any{
		"code":    float64(-32602),
		"message": "Invalid params: tool_result blocks answer a paused tool call, and no turn is paused",
	}, term["error"])
}
