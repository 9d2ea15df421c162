package tests

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
)

// forkOf forks d's session through session.fork with params and returns
// the forking client's driver on the fork, registered.
func (d *driver) forkOf(params map[string]any) (*driver, map[string]any) {
	d.e.t.Helper()
	term := d.call("session.fork", params)
	require.Nil(d.e.t, term["error"], "session.fork: %v", term["error"])
	res := term["result"].(map[string]any)
	f := &driver{e: d.e, keyID: d.keyID, key: d.key, sid: res["session_id"].(string), sk: res["session_key"].(string)}
	f.register()
	return f, res
}

// lastRequestOn is the body of the newest request lane answered that is
// not a summarizer's.
func lastRequestOn(t *testing.T, fake *fakeprovider.Server, lane string, after int) []byte {
	t.Helper()
	reqs := fake.Requests()
	for i := len(reqs) - 1; i >= after; i-- {
		if reqs[i].Lane == lane && !summarizing(reqs[i]) {
			return reqs[i].RawBody
		}
	}
	t.Fatalf("no request on lane %q after %d", lane, after)
	return nil
}

// TestForkStartsWhereTheSourceIs: a fork at the latest event sends the
// provider, for its first turn, exactly the bytes the source sends for the
// same turn; its log is the source's, marked inherited, then its own; the
// source and the fork then go their own ways.
func TestForkStartsWhereTheSourceIs(t *testing.T) {
	e := newEnv(t, envOpts{})
	d := e.open("get_time")
	for _, m := range []string{"one", "two"} {
		_, term := d.send(m)
		require.Nil(t, term["error"])
	}
	srcEvents := d.allEvents()

	f, res := d.forkOf(map[string]any{"client_version": "test", "tools": []any{tool("get_time")}})
	from := res["forked_from"].(map[string]any)
	assert.Equal(t, d.sid, from["session_id"])
	assert.Equal(t, false, from["moved_to_turn_start"])

	got := f.allEvents()
	require.Greater(t, len(got), len(srcEvents))
	for i, ev := range srcEvents {
		assert.Equal(t, ev["id"], got[i]["id"])
		assert.Equal(t, d.sid, got[i]["session_id"])
		assert.Equal(t, true, got[i]["inherited"])
	}
	for _, ev := range got[len(srcEvents):] {
		assert.Equal(t, f.sid, ev["session_id"])
		assert.Nil(t, ev["inherited"])
	}
	assert.Equal(t, "session.open", got[len(srcEvents)]["event_type"])
	for _, ev := range srcEvents {
		assert.Nil(t, ev["inherited"], "the source's own log is unchanged")
	}

	n := len(e.fake.Requests())
	_, term := f.send("three")
	require.Nil(t, term["error"])
	forkReq := lastRequestOn(t, e.fake, "primary", n)
	n = len(e.fake.Requests())
	_, term = d.send("three")
	require.Nil(t, term["error"])
	srcReq := lastRequestOn(t, e.fake, "primary", n)
	assert.Equal(t, string(srcReq), string(forkReq), "the fork's first request is the source's next")

	// Each goes on alone.
	_, term = f.send("fork only")
	require.Nil(t, term["error"])
	msgs := e.fake.Requests()[len(e.fake.Requests())-1].Messages()
	require.Len(t, msgs, 7, "one, two, three (each with its answer) and the new message")
	_, term = d.send("source only")
	require.Nil(t, term["error"])
	last := string(e.fake.Requests()[len(e.fake.Requests())-1].RawBody)
	assert.NotContains(t, last, "fork only")
}

// TestForkMidTurnAndOfForks: a fork at an event inside a turn starts
// before that turn; a fork of a fork works, also once both sources are
// closed.
func TestForkMidTurnAndOfForks(t *testing.T) {
	e := newEnv(t, envOpts{})
	d := e.open("get_time")
	_, term := d.send("first")
	require.Nil(t, term["error"])
	_, term = d.send("second")
	require.Nil(t, term["error"])
	evs := d.allEvents()
	var mid map[string]any
	secondStart := -1
	for i, ev := range evs {
		if ev["event_type"] == "provider.request" {
			mid = ev // the last one: inside the turn that sent "second"
		}
		if ev["event_type"] == "client.message.send" {
			secondStart = i
		}
	}
	require.NotNil(t, mid)

	f, res := d.forkOf(map[string]any{"at_event_id": mid["id"], "tools": []any{tool("get_time")}})
	assert.Equal(t, true, res["forked_from"].(map[string]any)["moved_to_turn_start"])
	inherited := 0
	for _, ev := range f.allEvents() {
		if ev["inherited"] == true {
			inherited++
		}
	}
	assert.Equal(t, secondStart, inherited, "the fork inherits up to the cut turn's first event, none of it")
	n := len(e.fake.Requests())
	_, term = f.send("instead")
	require.Nil(t, term["error"])
	msgs := e.fake.Requests()[n].Messages()
	require.Len(t, msgs, 3, "first, its answer, and the new message")
	assert.Equal(t, "first", textOf(msgs[0]["content"]))
	assert.Equal(t, "instead", textOf(msgs[2]["content"]))

	// A fork of the fork, then both sources closed.
	g, _ := f.forkOf(map[string]any{"tools": []any{tool("get_time")}})
	for _, x := range []*driver{d, f} {
		r := e.srv.Client(t, http.MethodDelete, "/api/v1/sessions/"+x.sid, x.sk, nil)
		require.Less(t, r.Status, 300, string(r.Raw))
	}
	n = len(e.fake.Requests())
	_, term = g.send("grandchild")
	require.Nil(t, term["error"])
	msgs = e.fake.Requests()[n].Messages()
	require.Len(t, msgs, 5)
	for i, want := range []string{"first", "", "instead", "", "grandchild"} {
		if want != "" {
			assert.Equal(t, want, textOf(msgs[i]["content"]))
		}
	}
	from := map[string]bool{}
	for _, ev := range g.allEvents() {
		from[ev["session_id"].(string)] = true
	}
	assert.Equal(t, map[string]bool{d.sid: true, f.sid: true, g.sid: true}, from)
}

// TestForkRefusals: a session key of another session cannot reach the
// source's session.fork; a participant that is not a registered driver is
// refused; an unknown event is an invalid param.
func TestForkRefusals(t *testing.T) {
	e := newEnv(t, envOpts{})
	d := e.open()
	_, term := d.send("hello")
	require.Nil(t, term["error"])
	other := e.open()

	r := e.srv.Client(t, http.MethodPost, "/api/v1/sessions/"+d.sid+"/rpc", other.sk,
		map[string]any{"jsonrpc": "2.0", "id": 1, "method": "session.fork", "params": map[string]any{}})
	assert.Equal(t, http.StatusUnauthorized, r.Status, string(r.Raw))

	keyID, key := e.srv.Key(t, e.pid)
	sk := e.srv.Join(t, d.sid, key, map[string]any{})
	joined := &driver{e: e, keyID: keyID, key: key, sid: d.sid, sk: sk}
	term = joined.call("session.fork", map[string]any{})
	require.NotNil(t, term["error"])
	assert.EqualValues(t, -32001, term["error"].(map[string]any)["code"])

	// The fork's key reaches the fork only.
	f, _ := d.forkOf(map[string]any{})
	r = e.srv.Client(t, http.MethodGet, "/api/v1/sessions/"+d.sid+"/events", f.sk, nil)
	assert.Equal(t, http.StatusUnauthorized, r.Status, string(r.Raw))
	r = e.srv.Client(t, http.MethodPost, "/api/v1/sessions/"+d.sid+"/rpc", f.sk,
		map[string]any{"jsonrpc": "2.0", "id": 1, "method": "session.fork", "params": map[string]any{}})
	assert.Equal(t, http.StatusUnauthorized, r.Status, string(r.Raw))

	term = d.call("session.fork", map[string]any{"at_event_id": "evt_nope"})
	require.NotNil(t, term["error"])
	assert.EqualValues(t, -32602, term["error"].(map[string]any)["code"])

	term = d.call("session.fork", map[string]any{"tools": []any{tool("not_allowed")}})
	require.NotNil(t, term["error"])
	assert.EqualValues(t, -32602, term["error"].(map[string]any)["code"])

}

// TestForkAtCompactionBoundary: a session compacted (summary and cleared
// boundary) forks with its view: the fork's first request is the bytes of
// the source's next.
func TestForkAtCompactionBoundary(t *testing.T) {
	e, _, pid := newCompactionEnv(t, "anthropic", windowTokens, map[string]any{})
	d := e.openOn(pid, nil)
	d.register()
	compacted := false
	for i := 0; i < 120 && !compacted; i++ {
		_, term := d.send(userText(i))
		require.Nil(t, term["error"], "turn %d", i)
		for _, ev := range resultEvents(term) {
			compacted = compacted || ev["event_type"] == "session.compaction" && payload(ev)["layer"] == "summary"
		}
	}
	require.True(t, compacted, "the source compacted")

	f, _ := d.forkOf(map[string]any{"client_version": "test"})
	n := len(e.fake.Requests())
	_, term := f.send("after the fork")
	require.Nil(t, term["error"])
	forkReq := lastRequestOn(t, e.fake, "small", n)
	n = len(e.fake.Requests())
	_, term = d.send("after the fork")
	require.Nil(t, term["error"])
	srcReq := lastRequestOn(t, e.fake, "small", n)
	assert.Contains(t, string(forkReq), "Summary of the earlier conversation")
	assert.Equal(t, string(srcReq), string(forkReq), fmt.Sprintf("fork request %d bytes, source %d", len(forkReq), len(srcReq)))
}

// TestAdminForkAndLineage: an operator forks a session for one of its
// participants (who keeps its declarations), and reads the lineage of
// both sides; a client key that is not a participant is refused.
func TestAdminForkAndLineage(t *testing.T) {
	e := newEnv(t, envOpts{})
	d := e.open("get_time")
	_, term := d.send("hello")
	require.Nil(t, term["error"])

	r := e.srv.Admin(t, http.MethodPost, "/admin/v1/sessions/"+d.sid+"/fork", map[string]any{"client_key_id": d.keyID})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Raw))
	f := &driver{e: e, keyID: d.keyID, key: d.key, sid: r.Body["session_id"].(string), sk: r.Body["session_key"].(string)}
	f.register()
	n := len(e.fake.Requests())
	_, term = f.send("again")
	require.Nil(t, term["error"])
	req := e.fake.Requests()[n]
	assert.Equal(t, []string{"get_time"}, req.ToolNames(), "the participant's declarations carry over")
	require.Len(t, req.Messages(), 3)

	r = e.srv.Admin(t, http.MethodGet, "/admin/v1/sessions/"+d.sid+"/lineage", nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	assert.Nil(t, r.Body["forked_from"])
	forks := r.Body["forks"].([]any)
	require.Len(t, forks, 1)
	assert.Equal(t, f.sid, forks[0].(map[string]any)["session_id"])
	r = e.srv.Admin(t, http.MethodGet, "/admin/v1/sessions/"+f.sid+"/lineage", nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	assert.Equal(t, d.sid, r.Body["forked_from"].(map[string]any)["session_id"])
	assert.Empty(t, r.Body["forks"])

	stranger, _ := e.srv.Key(t, e.pid)
	r = e.srv.Admin(t, http.MethodPost, "/admin/v1/sessions/"+d.sid+"/fork", map[string]any{"client_key_id": stranger})
	assert.Equal(t, http.StatusForbidden, r.Status, string(r.Raw))
	assert.Equal(t, "not_a_participant", r.Body["type"])
	r = e.srv.Admin(t, http.MethodGet, "/admin/v1/sessions/sess_nope/lineage", nil)
	assert.Equal(t, http.StatusNotFound, r.Status)
}
