package tests

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
)

// turnIDs are a session's own turns in order of their first event (the
// wire's events do not name their turn; a driver learns it from deltas).
func turnIDs(t *testing.T, e *env, sid string) []string {
	t.Helper()
	rows, err := e.srv.Parts.Store.Pool.Query(context.Background(), `SELECT turn_id FROM session_events
		WHERE session_id = $1 AND turn_id IS NOT NULL GROUP BY turn_id ORDER BY min(seq)`, sid)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return ids
}

// rewindOf rewinds d's session with params and returns the result.
func (d *driver) rewindOf(params map[string]any) map[string]any {
	d.e.t.Helper()
	return result(d.e.t, d.call("session.rewind", params))
}

// texts are the texts of a request's messages.
func texts(msgs []map[string]any) []string {
	out := make([]string, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, textOf(m["content"]))
	}
	return out
}

// TestRewindLastTurn: rewinding the last turn takes it out of what the
// next provider request carries (the strict fake accepts it), keeps it in
// the log, and records a session.rewind event naming it.
func TestRewindLastTurn(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.fake.Strict(true)
	d := e.open()
	for _, m := range []string{"one", "two"} {
		_, term := d.send(m)
		require.Nil(t, term["error"])
	}
	before := d.allEvents()
	turns := turnIDs(t, e, d.sid)
	require.Len(t, turns, 2)

	res := d.rewindOf(map[string]any{"turn_id": turns[1]})
	assert.Equal(t, []any{turns[1]}, res["turn_ids"])
	assert.Equal(t, []any{}, res["tool_calls"])
	assert.Nil(t, res["interrupted_turn_id"])
	assert.Equal(t, false, res["context_restored"])
	assert.Equal(t, d.keyID, res["by"])

	after := d.allEvents()
	require.Len(t, after, len(before)+1, "the rewound turn stays in the log")
	last := after[len(after)-1]
	assert.Equal(t, "session.rewind", last["event_type"])
	assert.Equal(t, res["event_id"], last["id"])
	assert.Equal(t, []any{turns[1]}, payload(last)["turn_ids"])

	n := len(e.fake.Requests())
	_, term := d.send("three")
	require.Nil(t, term["error"], "%v", term["error"])
	msgs := e.fake.Requests()[n].Messages()
	require.Len(t, msgs, 3, "one, its answer, three")
	assert.Equal(t, "one", texts(msgs)[0])
	assert.Equal(t, "three", texts(msgs)[2])
	assert.NotContains(t, string(e.fake.Requests()[n].RawBody), `"two"`)
	assert.Zero(t, e.fake.StrictRefusals())

	// Rewinding to the same point again takes only "three": a turn is
	// rewound once. Then nothing is left to rewind there.
	three := turnIDs(t, e, d.sid)[2]
	res = d.rewindOf(map[string]any{"turn_id": turns[1]})
	assert.Equal(t, []any{three}, res["turn_ids"])
	assert.Contains(t, rpcError(t, d.call("session.rewind", map[string]any{"turn_id": turns[1]}), -32000), "nothing_to_rewind")
}

// TestRewindThreeTurnsWithToolCalls: three turns that each called an MCP
// tool are rewound at once; the result and the event list the tool calls
// (not undone), the next request carries none of the turns (the strict
// fake accepts it), a fork taken before the rewind still has them and a
// fork taken after it has not.
func TestRewindThreeTurnsWithToolCalls(t *testing.T) {
	e := newEnv(t, envOpts{allowedTools: []string{}, extraTOML: fsStdioTOML(t, "fs")})
	e.fake.Strict(true)
	pid := e.profile(map[string]any{"mcp_servers": []string{"fs"}})
	d := e.openOn(pid, nil)
	d.register()
	lane := e.fake.Lane("primary")
	lane.Enqueue(fakeprovider.Text("hello"))
	_, term := d.send("zero")
	require.Nil(t, term["error"])
	for i, m := range []string{"first", "second", "third"} {
		id := "tu_" + m
		lane.Enqueue(fakeprovider.ToolUse(id, "list_files", map[string]any{"path": "/data"}), fakeprovider.Text("listed "+m))
		_, term := d.send(m)
		require.Nil(t, term["error"], "turn %d: %v", i, term["error"])
	}
	evs := d.allEvents()
	turns := turnIDs(t, e, d.sid)
	require.Len(t, turns, 4)
	beforeRewind := evs[len(evs)-1]["id"]

	res := d.rewindOf(map[string]any{"turn_id": turns[1]})
	assert.Equal(t, []any{turns[1], turns[2], turns[3]}, res["turn_ids"])
	calls := res["tool_calls"].([]any)
	require.Len(t, calls, 3)
	for i, m := range []string{"first", "second", "third"} {
		c := calls[i].(map[string]any)
		assert.Equal(t, map[string]any{"turn_id": turns[i+1], "tool_use_id": "tu_" + m, "name": "list_files", "dispatch": "mcp", "server_name": "fs"}, c)
	}

	lane.Enqueue(fakeprovider.Text("fresh"))
	n := len(e.fake.Requests())
	_, term = d.send("again")
	require.Nil(t, term["error"], "%v", term["error"])
	req := e.fake.Requests()[n]
	assert.Equal(t, []string{"zero", "hello", "again"}, texts(req.Messages()))
	assert.NotContains(t, string(req.RawBody), "tu_")
	assert.Zero(t, e.fake.StrictRefusals())

	// A fork at the last event before the rewind inherits the three turns;
	// a fork at the latest inherits the rewound conversation.
	early, _ := d.forkOf(map[string]any{"at_event_id": beforeRewind})
	lane.Enqueue(fakeprovider.Text("early fork"))
	n = len(e.fake.Requests())
	_, term = early.send("from before")
	require.Nil(t, term["error"], "%v", term["error"])
	msgs := e.fake.Requests()[n].Messages()
	require.Len(t, msgs, 2+3*4+1, "zero and the three tool turns, then the new message")
	assert.Contains(t, string(e.fake.Requests()[n].RawBody), "tu_third")

	late, _ := d.forkOf(map[string]any{})
	lane.Enqueue(fakeprovider.Text("late fork"))
	n = len(e.fake.Requests())
	_, term = late.send("from now")
	require.Nil(t, term["error"], "%v", term["error"])
	assert.Equal(t, []string{"zero", "hello", "again", "fresh", "from now"}, texts(e.fake.Requests()[n].Messages()))
	assert.Zero(t, e.fake.StrictRefusals())

	// The late fork cannot rewind what it inherited.
	assert.Contains(t, rpcError(t, late.call("session.rewind", map[string]any{"turn_id": turns[0]}), -32000), "rewind_before_fork")
}

// TestRewindWhileTurnRunning: a rewind reaching a running turn interrupts
// it first; a message queued behind it stays queued and then runs on the
// rewound conversation.
func TestRewindWhileTurnRunning(t *testing.T) {
	e, pid := interruptEnv(t, "primary", nil)
	d := e.openOn(pid, nil)
	d.register()
	lane := e.fake.Lane("primary")
	lane.Enqueue(fakeprovider.Text("kept"))
	_, term := d.send("keep me")
	require.Nil(t, term["error"])
	lane.Enqueue(fakeprovider.Text(streamedText).HangStream(4), fakeprovider.Text("after the rewind"))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	send := openRaw(t, ctx, e.srv, d.sid, d.sk, d.request("drop me"), deltasOn)
	seen := textDeltas(t, send, 4)
	running := seen[0]["params"].(map[string]any)["turn_id"].(string)

	other := e.joinOn(pid, d)
	queued := other.stream(ctx, "queued")
	defer queued.Close()
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, e.srv.Parts.Store.Pool.QueryRow(ctx, `SELECT count(*) FROM turn_inputs WHERE session_id = $1 AND result IS NULL`, d.sid).Scan(&n))
		return n == 2
	}, time.Minute, 20*time.Millisecond, "the second message is queued")

	// A rewind refused anyway leaves the running turn alone.
	rpcError(t, d.call("session.rewind", map[string]any{"turn_id": "trn_" + strings.Repeat("0", 32)}), -32602)
	res := d.rewindOf(map[string]any{"turn_id": running})
	assert.Equal(t, running, res["interrupted_turn_id"], "the refused rewind did not interrupt it")
	assert.Equal(t, []any{running}, res["turn_ids"])
	_, out := untilTerminal(t, send)
	assert.Equal(t, true, out["result"].(map[string]any)["interrupted"])

	qterm := terminalOf(queued, time.Minute)
	require.NotNil(t, qterm)
	require.Nil(t, qterm["error"], "%v", qterm["error"])
	assert.Equal(t, "after the rewind", firstText(message(qterm)))
	reqs := e.fake.Requests()
	assert.Equal(t, []string{"keep me", "kept", "queued"}, texts(reqs[len(reqs)-1].Messages()))
	assert.Zero(t, e.fake.StrictRefusals())
	requireValidNextTurn(t, e, d, "primary")
}

// TestRewindRacingTurnEnd: rewinds sent as turns end, before or after,
// leave a log whose next turn the strict fake accepts, and every rewound
// turn is named by exactly one session.rewind event.
func TestRewindRacingTurnEnd(t *testing.T) {
	e, pid := interruptEnv(t, "primary", map[string]any{"allowed_tools": []string{"get_time"}})
	d := e.openOn(pid, map[string]any{"tools": []any{tool("get_time")}})
	d.register()
	lane := e.fake.Lane("primary")
	lane.Enqueue(fakeprovider.Text("base"))
	_, term := d.send("base")
	require.Nil(t, term["error"])
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for i := range 6 {
		// Turns that end on their own, that pause for a client tool, and
		// that stream: the rewind lands while they run or once they ended.
		switch i % 3 {
		case 0:
			lane.Enqueue(fakeprovider.Text("done " + strings.Repeat("x", i)))
		case 1:
			lane.Enqueue(fakeprovider.Text("pausing").WithToolUse("tu_r"+strings.Repeat("x", i), "get_time", nil))
		case 2:
			lane.Enqueue(fakeprovider.Text(streamedText).HangStream(2))
		}
		send := openRaw(t, ctx, e.srv, d.sid, d.sk, d.request("racing"), deltasOn)
		var turnID string
		require.Eventually(t, func() bool {
			turnID = lastTurn(t, e, d.sid)
			return turnID != ""
		}, time.Minute, 5*time.Millisecond)
		res := d.rewindOf(map[string]any{"turn_id": turnID})
		assert.Equal(t, []any{turnID}, res["turn_ids"], "race %d", i)
		untilTerminal(t, send)
	}
	rewound := map[string]int{}
	for _, ev := range d.allEvents() {
		if ev["event_type"] == "session.rewind" {
			for _, id := range payload(ev)["turn_ids"].([]any) {
				rewound[id.(string)]++
			}
		}
	}
	assert.Len(t, rewound, 6)
	for id, n := range rewound {
		assert.Equal(t, 1, n, "turn %s rewound once", id)
	}
	n := len(e.fake.Requests())
	requireValidNextTurn(t, e, d, "primary")
	assert.Equal(t, []string{"base", "base", "go on"}, texts(e.fake.Requests()[n].Messages()))
}

// lastTurn is the session's newest begun turn ("" for none), read from
// the database so the race does not wait on a stream.
func lastTurn(t *testing.T, e *env, sid string) string {
	var id string
	err := e.srv.Parts.Store.Pool.QueryRow(context.Background(), `SELECT coalesce((SELECT turn_id FROM session_events
		WHERE session_id = $1 AND turn_id IS NOT NULL AND turn_id NOT IN (
			SELECT json_array_elements_text(payload->'turn_ids') FROM session_events WHERE session_id = $1 AND event_type = 'session.rewind')
		ORDER BY seq DESC LIMIT 1), '')`, sid).Scan(&id)
	require.NoError(t, err)
	if id == "" {
		return ""
	}
	// The base turn is never the one racing.
	var first string
	require.NoError(t, e.srv.Parts.Store.Pool.QueryRow(context.Background(), `SELECT turn_id FROM session_events WHERE session_id = $1 AND turn_id IS NOT NULL ORDER BY seq LIMIT 1`, sid).Scan(&first))
	if id == first {
		return ""
	}
	return id
}

// TestRewindRefusals: an observer that is not a registered driver is
// refused; bad params are invalid params; an unknown turn is refused; the
// admin route rewinds as the operator and answers problems for the rest.
func TestRewindRefusals(t *testing.T) {
	e := newEnv(t, envOpts{})
	d := e.open()
	_, term := d.send("hello")
	require.Nil(t, term["error"])
	_, term = d.send("world")
	require.Nil(t, term["error"])
	turns := turnIDs(t, e, d.sid)

	keyID, key := e.srv.Key(t, e.pid)
	sk := e.srv.Join(t, d.sid, key, map[string]any{})
	observer := &driver{e: e, keyID: keyID, key: key, sid: d.sid, sk: sk}
	rpcError(t, observer.call("session.rewind", map[string]any{"turn_id": turns[1]}), -32001)

	rpcError(t, d.call("session.rewind", map[string]any{}), -32602)
	rpcError(t, d.call("session.rewind", map[string]any{"turn_id": turns[1], "before_event_id": "evt_x"}), -32602)
	rpcError(t, d.call("session.rewind", map[string]any{"turn_id": "not-a-turn"}), -32602)
	rpcError(t, d.call("session.rewind", map[string]any{"turn_id": "trn_nope"}), -32602)
	rpcError(t, d.call("session.rewind", map[string]any{"before_event_id": "evt_nope"}), -32602)
	other := e.open()
	rpcError(t, other.call("session.rewind", map[string]any{"turn_id": turns[1]}), -32602)
	assert.Len(t, ofTypeIn(d.allEvents(), "session.rewind"), 0, "nothing refused was stored")

	r := e.srv.Admin(t, http.MethodPost, "/admin/v1/sessions/ses_nope/rewind", map[string]any{"turn_id": turns[1]})
	assert.Equal(t, http.StatusNotFound, r.Status, string(r.Raw))
	r = e.srv.Admin(t, http.MethodPost, "/admin/v1/sessions/"+d.sid+"/rewind", map[string]any{})
	assert.Equal(t, http.StatusBadRequest, r.Status, string(r.Raw))

	// The operator rewinds to before an event inside the second turn: the
	// whole turn goes.
	var mid any
	sends := 0
	for _, ev := range d.allEvents() {
		if ev["event_type"] == "client.message.send" {
			sends++
		}
		if sends == 2 && ev["event_type"] == "provider.response" {
			mid = ev["id"]
		}
	}
	require.NotNil(t, mid)
	r = e.srv.Admin(t, http.MethodPost, "/admin/v1/sessions/"+d.sid+"/rewind", map[string]any{"before_event_id": mid})
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	assert.Equal(t, []any{turns[1]}, r.Body["turn_ids"])
	assert.Equal(t, "operator", r.Body["by"])
	r = e.srv.Admin(t, http.MethodPost, "/admin/v1/sessions/"+d.sid+"/rewind", map[string]any{"turn_id": turns[1]})
	assert.Equal(t, http.StatusConflict, r.Status, string(r.Raw))
	assert.Contains(t, string(r.Raw), "nothing_to_rewind")

	d.closeSession()
	rpcErr := d.call("session.rewind", map[string]any{"turn_id": turns[0]})
	require.NotNil(t, rpcErr["error"])
}

// TestRewindBeforeCompaction: a rewind of the turn that compacted the
// conversation restores the view from before it ("context_restored"): the
// source's next request is the bytes a fork taken just before that turn
// sends, which never saw the summary.
func TestRewindBeforeCompaction(t *testing.T) {
	e, _, pid := newCompactionEnv(t, "anthropic", windowTokens, map[string]any{})
	d := e.openOn(pid, nil)
	d.register()
	var lastBefore any // the last event before the compacting turn
	compacted := false
	for i := 0; i < 120 && !compacted; i++ {
		evs := d.allEvents()
		lastBefore = evs[len(evs)-1]["id"]
		_, term := d.send(userText(i))
		require.Nil(t, term["error"], "turn %d", i)
		for _, ev := range resultEvents(term) {
			compacted = compacted || ev["event_type"] == "session.compaction" && payload(ev)["layer"] == "summary"
		}
	}
	require.True(t, compacted, "the session compacted")
	f, _ := d.forkOf(map[string]any{"at_event_id": lastBefore, "client_version": "test"})

	res := d.rewindOf(map[string]any{"before_event_id": nextEventID(t, d, lastBefore)})
	assert.Equal(t, true, res["context_restored"])
	require.Len(t, res["turn_ids"], 1)

	n := len(e.fake.Requests())
	_, term := f.send("after the rewind")
	require.Nil(t, term["error"])
	forkReq := lastRequestOn(t, e.fake, "small", n)
	n = len(e.fake.Requests())
	_, term = d.send("after the rewind")
	require.Nil(t, term["error"])
	srcReq := lastRequestOn(t, e.fake, "small", n)
	assert.Equal(t, string(forkReq), string(srcReq), fmt.Sprintf("fork request %d bytes, source %d", len(forkReq), len(srcReq)))
}

// nextEventID is the id of the event after id in d's log.
func nextEventID(t *testing.T, d *driver, id any) string {
	t.Helper()
	evs := d.allEvents()
	for i, ev := range evs[:len(evs)-1] {
		if ev["id"] == id {
			return evs[i+1]["id"].(string)
		}
	}
	t.Fatalf("no event after %v", id)
	return ""
}
