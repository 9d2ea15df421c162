package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/testdb"
	"github.com/bae-go/bae-go/internal/testing/testenv"
)

// rawLines is a stream read line by line, as the bytes the server sent.
type rawLines struct {
	lines chan []byte
	resp  *http.Response
}

func openRaw(t *testing.T, ctx context.Context, srv *testenv.Server, sid, sk string, body any, header http.Header) *rawLines {
	t.Helper()
	buf, err := json.Marshal(body)
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.ClientURL+"/api/v1/sessions/"+sid+"/rpc", bytes.NewReader(buf))
	require.NoError(t, err)
	for k, vs := range header {
		req.Header[k] = vs
	}
	req.Header.Set("Authorization", "Bearer "+sk)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	r := &rawLines{lines: make(chan []byte, 4096), resp: resp}
	go func() {
		defer close(r.lines)
		rd := bufio.NewReader(resp.Body)
		for {
			line, err := rd.ReadBytes('\n')
			if len(line) > 0 {
				r.lines <- line
			}
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { resp.Body.Close() })
	return r
}

// next is the next line (decoded too), or nil after timeout or the end.
func (r *rawLines) next(timeout time.Duration) ([]byte, map[string]any) {
	select {
	case l, ok := <-r.lines:
		if !ok {
			return nil, nil
		}
		var m map[string]any
		_ = json.Unmarshal(l, &m)
		return l, m
	case <-time.After(timeout):
		return nil, nil
	}
}

func isDelta(m map[string]any) bool { return m["method"] == "session.delta" }

func isEventOf(m map[string]any, typ string) bool {
	if m["method"] != "session.event" {
		return false
	}
	p, _ := m["params"].(map[string]any)
	return p["event_type"] == typ
}

var deltasOn = http.Header{"Bae-Deltas": {"on"}}

// joinText joins the text deltas of a delta list after the last
// superseded marker, as a client renders them.
func joinText(ds []map[string]any) string {
	var b strings.Builder
	for _, m := range ds {
		p := m["params"].(map[string]any)
		switch p["type"] {
		case "superseded":
			b.Reset()
		case "text_delta":
			b.WriteString(p["text"].(string))
		}
	}
	return b.String()
}

const streamedText = "The quick brown fox jumps over the lazy dog, streamed piece by piece."

// TestDeltasOptIn: a driver and an observer that ask for deltas get the
// answer as it is written, with their turn id, attempt, block index and a
// growing per-turn sequence, before its events; an observer that does not
// ask (any BAE SDK) gets exactly the bytes the opted-in observer got
// without the deltas.
func TestDeltasOptIn(t *testing.T) {
	e := newEnv(t, envOpts{})
	d := e.open()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sub := map[string]any{"jsonrpc": "2.0", "id": 9, "method": "session.subscribe", "params": map[string]any{}}
	plain := openRaw(t, ctx, e.srv, d.sid, d.sk, sub, nil)
	opted := openRaw(t, ctx, e.srv, d.sid, d.sk, sub, deltasOn)
	// Both subscriptions are open once their 200 arrived.
	require.Equal(t, 200, plain.resp.StatusCode)
	require.Equal(t, 200, opted.resp.StatusCode)

	e.fake.Lane("primary").Enqueue(fakeprovider.Text(streamedText).Streamed(12, 0).WithToolUse("toolu_s1", "lookup", map[string]any{"q": "fox"}), fakeprovider.Text("done"))
	drv := openRaw(t, ctx, e.srv, d.sid, d.sk, d.request("tell me"), deltasOn)
	var driverLines []map[string]any
	for {
		_, m := drv.next(20 * time.Second)
		require.NotNil(t, m, "driver stream ended early: %v", driverLines)
		driverLines = append(driverLines, m)
		if m["id"] != nil {
			break
		}
	}
	var ds []map[string]any
	sawToolStart, lastSeq := false, 0.0
	for _, m := range driverLines {
		if !isDelta(m) {
			continue
		}
		p := m["params"].(map[string]any)
		assert.Regexp(t, `^trn_`, p["turn_id"])
		assert.Equal(t, 0.0, p["attempt"])
		assert.Greater(t, p["seq"].(float64), lastSeq, "the sequence grows through the turn")
		lastSeq = p["seq"].(float64)
		if p["iteration"] == 0.0 {
			ds = append(ds, m)
		}
		if p["type"] == "block_start" && p["index"] == 1.0 {
			assert.Equal(t, map[string]any{"type": "tool_use", "id": "toolu_s1", "name": "lookup"}, p["block"])
			sawToolStart = true
		}
		if p["type"] == "input_json_delta" {
			assert.Equal(t, 1.0, p["index"])
		}
	}
	assert.True(t, sawToolStart)
	assert.Equal(t, streamedText, joinText(ds), "the text deltas join into the answer's text")
	texts := 0
	for _, m := range ds {
		if m["params"].(map[string]any)["type"] == "text_delta" {
			texts++
		}
	}
	assert.Equal(t, 12, texts)
	// The first provider.response comes after every delta of iteration 0.
	firstResp := -1
	lastDelta0 := -1
	for i, m := range driverLines {
		if firstResp < 0 && isEventOf(m, "provider.response") {
			firstResp = i
		}
		if isDelta(m) && m["params"].(map[string]any)["iteration"] == 0.0 {
			lastDelta0 = i
		}
	}
	assert.Less(t, lastDelta0, firstResp, "deltas precede their iteration's events")
	assert.Equal(t, "done", firstText(message(driverLines[len(driverLines)-1])))

	// The observers: the same bytes, but for the deltas.
	collect := func(r *rawLines, want int) ([]byte, int) {
		var all bytes.Buffer
		deltas, events := 0, 0
		for events < want {
			l, m := r.next(20 * time.Second)
			require.NotNil(t, m, "observer ended early after %d events", events)
			if isDelta(m) {
				deltas++
				continue
			}
			all.Write(l)
			events++
		}
		return all.Bytes(), deltas
	}
	// The observers see every event of the turn, the driver's own
	// client.message.send too.
	turnEvents := len(resultEvents(driverLines[len(driverLines)-1]))
	plainBytes, plainDeltas := collect(plain, turnEvents)
	optedBytes, optedDeltas := collect(opted, turnEvents)
	assert.Zero(t, plainDeltas, "a stream that did not ask gets no deltas")
	assert.Greater(t, optedDeltas, 12)
	assert.Equal(t, string(plainBytes), string(optedBytes), "without its deltas, an opted-in stream is byte for byte the plain one")
}

// TestStreamedTurnStoresWhatAWholeAnswerStores: the same answers (text,
// then a tool_use with its input, then text) through a streaming provider
// and through one with stream = false leave the same events and the same
// conversation, in both wire formats.
func TestStreamedTurnStoresWhatAWholeAnswerStores(t *testing.T) {
	for _, kind := range []string{"anthropic", "openai"} {
		t.Run(kind, func(t *testing.T) {
			fake := fakeprovider.New(t)
			srv := testenv.Start(t, testenv.Options{ConfigTOML: fmt.Sprintf(`
[[providers.entries]]
name = "streamed"
provider = %[1]q
base_url = %[2]q
model = "m"
auth_token = "t"

[[providers.entries]]
name = "whole"
provider = %[1]q
base_url = %[2]q
model = "m"
auth_token = "t"
stream = false
`, kind, fake.URL())})
			run := func(prov string) []map[string]any {
				pid := srv.Profile(t, map[string]any{"name": prov, "primary_provider": prov, "allowed_tools": []string{"lookup"}})
				_, key := srv.Key(t, pid)
				sid, sk := srv.Open(t, key, map[string]any{"tools": []any{tool("lookup")}})
				srv.Call(t, sid, sk, "session.registerDriver", nil)
				fake.Enqueue(fakeprovider.Text("Let me look that up <now>.").WithToolUse("toolu_same", "lookup", map[string]any{"q": "ünïcode", "n": 2}))
				objs := srv.RPC(t, sid, sk, map[string]any{"jsonrpc": "2.0", "id": 1, "method": "session.sendMessage", "params": map[string]any{"message": map[string]any{"content": "look it up"}}})
				require.Equal(t, []any{"tool_use"}, []any{testenv.Terminal(t, objs)["result"].(map[string]any)["message"].(map[string]any)["content"].([]any)[1].(map[string]any)["type"]})
				fake.Enqueue(fakeprovider.Text("Found it."))
				srv.RPC(t, sid, sk, map[string]any{"jsonrpc": "2.0", "id": 2, "method": "session.sendMessage", "params": map[string]any{"message": map[string]any{"content": []any{
					map[string]any{"type": "tool_result", "tool_use_id": "toolu_same", "content": "42"},
				}}}})
				r := srv.Client(t, http.MethodGet, "/api/v1/sessions/"+sid+"/events?limit=200", sk, nil)
				require.Equal(t, http.StatusOK, r.Status)
				var out []map[string]any
				for _, it := range r.Body["items"].([]any) {
					ev := it.(map[string]any)
					// What differs between any two sessions: ids, times, the
					// fake's per-request numbering.
					norm := map[string]any{"type": ev["type"], "payload": ev["payload"]}
					p, _ := ev["payload"].(map[string]any)
					if body, ok := p["body"].(map[string]any); ok {
						delete(body, "id")
						delete(body, "created")
					}
					out = append(out, norm)
				}
				return out
			}
			fake.Respond(nil)
			streamed := run("streamed")
			reqs := fake.Requests()
			require.NotEmpty(t, reqs)
			assert.True(t, reqs[len(reqs)-1].Stream())
			whole := run("whole")
			reqs = fake.Requests()
			assert.False(t, reqs[len(reqs)-1].Stream())
			require.Equal(t, len(whole), len(streamed))
			for i := range whole {
				assert.Equal(t, whole[i], streamed[i], "event %d (%v)", i, whole[i]["type"])
			}
		})
	}
}

// TestDeltasAcrossReplicas: an observer on replica B gets the deltas of a
// turn whose provider call runs on replica A, and one that reconnects
// mid-turn with the last sequence it saw gets the rest of them; one that
// names a turn B kept nothing of gets a reset marker.
func TestDeltasAcrossReplicas(t *testing.T) {
	fake := fakeprovider.New(t)
	a, b := startReplicaPair(t, fake.URL(), "replica")
	pid := a.Profile(t, map[string]any{"name": "main", "primary_provider": "primary"})
	_, clientA := a.Key(t, pid)
	sid, sk := a.Open(t, clientA, nil)
	a.Call(t, sid, sk, "session.registerDriver", nil)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sub := map[string]any{"jsonrpc": "2.0", "id": 3, "method": "session.subscribe", "params": map[string]any{}}
	obs := openRaw(t, ctx, b, sid, sk, sub, deltasOn)
	require.Equal(t, 200, obs.resp.StatusCode)

	fake.Enqueue(fakeprovider.Text(streamedText).Streamed(10, 0).HangStream(4))
	drv := a.RPCStream(t, ctx, sid, sk, map[string]any{"jsonrpc": "2.0", "id": 1, "method": "session.sendMessage", "params": map[string]any{"message": map[string]any{"content": "hi"}}})
	defer drv.Close()

	// Four text deltas reach B, then the stream holds.
	var first []map[string]any
	var turnID string
	lastSeq := 0.0
	for texts := 0; texts < 4; {
		_, m := obs.next(20 * time.Second)
		require.NotNil(t, m, "deltas on B, have %v", first)
		if !isDelta(m) {
			continue
		}
		p := m["params"].(map[string]any)
		turnID, lastSeq = p["turn_id"].(string), p["seq"].(float64)
		first = append(first, m)
		if p["type"] == "text_delta" {
			texts++
		}
	}
	obs.resp.Body.Close()

	// A reconnect on B resumes after the last sequence it saw.
	resumed := openRaw(t, ctx, b, sid, sk, sub, http.Header{"Bae-Deltas": {fmt.Sprintf("after=%s:%d", turnID, int64(lastSeq))}})
	require.Equal(t, 200, resumed.resp.StatusCode)
	unknown := openRaw(t, ctx, b, sid, sk, sub, http.Header{"Bae-Deltas": {"after=trn_00000000000000000000000000000000:5"}})
	_, m := unknown.next(10 * time.Second)
	require.NotNil(t, m)
	assert.Equal(t, map[string]any{"turn_id": "trn_00000000000000000000000000000000", "type": "reset"}, m["params"], "nothing kept of that turn: rely on its events")

	fake.Release()
	rest := []map[string]any{}
	for {
		_, m := resumed.next(20 * time.Second)
		require.NotNil(t, m, "resumed stream, have %v", rest)
		if isEventOf(m, "server.message.send") {
			break
		}
		if isDelta(m) {
			p := m["params"].(map[string]any)
			assert.Greater(t, p["seq"].(float64), lastSeq, "nothing seen before is sent again")
			rest = append(rest, m)
		}
	}
	assert.Equal(t, streamedText, joinText(append(first, rest...)), "the first stream's deltas and the resumed one's make the whole answer")
	for range drv.Lines() {
	}
}

// TestSupersededAfterAFailureMidStream: an attempt whose stream breaks
// after some deltas is followed by a superseded marker, then the retry's
// deltas; the events are stored once, and a failed primary's partial
// answer is superseded by the fallback's.
func TestSupersededAfterAFailureMidStream(t *testing.T) {
	e := newEnv(t, envOpts{fallbacks: []string{"fallback"}})
	d := e.open()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	check := func(name, want string) []map[string]any {
		t.Helper()
		drv := openRaw(t, ctx, e.srv, d.sid, d.sk, d.request(name), deltasOn)
		var ds, evs []map[string]any
		for {
			_, m := drv.next(30 * time.Second)
			require.NotNil(t, m, "%s: stream ended early", name)
			if m["id"] != nil {
				assert.Equal(t, want, firstText(message(m)), name)
				evs = append(evs, resultEvents(m)...)
				break
			}
			if isDelta(m) {
				ds = append(ds, m)
			}
		}
		assert.Equal(t, want, joinText(ds), "%s: after the last superseded marker, the deltas are the answer", name)
		sup := 0
		for _, m := range ds {
			if m["params"].(map[string]any)["type"] == "superseded" {
				sup++
			}
		}
		assert.Positive(t, sup, "%s: the partial answer is superseded", name)
		return evs
	}

	// A cut stream is a transport failure, retried in place: one
	// request/response pair is logged.
	e.fake.Lane("primary").Enqueue(fakeprovider.Text("partial answer that breaks").CutStream(3, "Overloaded"), fakeprovider.Text("the retried answer").Streamed(4, 0))
	evs := check("retry", "the retried answer")
	assert.Equal(t, 1, count(types(evs), "provider.request"))
	assert.Equal(t, 1, count(types(evs), "provider.response"))
	assert.Equal(t, 1, count(types(evs), "server.message.send"))

	// Every try of the primary breaks mid-stream: the fallback answers.
	cut := fakeprovider.Text("primary breaks mid answer").CutStream(2, "")
	e.fake.Lane("primary").Enqueue(cut, cut, cut)
	e.fake.Lane("fallback").Enqueue(fakeprovider.Text("the fallback answer").Streamed(3, 0))
	evs = check("fallback", "the fallback answer")
	assert.Equal(t, 1, count(types(evs), "server.message.send"))
}

func count(xs []string, x string) int {
	n := 0
	for _, y := range xs {
		if y == x {
			n++
		}
	}
	return n
}

// TestDeltasHeaderValidated: a malformed Bae-Deltas header is -32602, and
// a sendMessage carrying one stores nothing.
func TestDeltasHeaderValidated(t *testing.T) {
	e := newEnv(t, envOpts{})
	d := e.open()
	before := len(d.allEvents())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, h := range []string{"yes", "after=trn_x", "after=nope:3", "after=trn_x:-1"} {
		for _, body := range []map[string]any{d.request("hello"), {"jsonrpc": "2.0", "id": 5, "method": "session.subscribe", "params": map[string]any{}}} {
			st := e.srv.RPCStreamHeader(t, ctx, d.sid, d.sk, body, http.Header{"Bae-Deltas": {h}})
			m := st.Next(10 * time.Second)
			require.NotNil(t, m, h)
			require.NotNil(t, m["error"], "%s: %v", h, m)
			assert.Equal(t, -32602.0, m["error"].(map[string]any)["code"], h)
			st.Close()
		}
	}
	assert.Equal(t, before, len(d.allEvents()), "nothing stored")
	orphans, err := e.srv.Parts.Store.OrphanTurns(ctx, 0, 10)
	require.NoError(t, err)
	assert.Empty(t, orphans, "no message stored to run later")
	assert.Zero(t, e.fake.RequestCount())
}

// startReplicaPair starts two servers on one database and one Temporal
// namespace, each on its own task queue (<prefix>-a, <prefix>-b), with the
// fake at fakeURL as provider "primary": each replica runs the sessions it
// starts, so a session opened and driven on A has its provider calls on A.
func startReplicaPair(t *testing.T, fakeURL, prefix string) (a, b *testenv.Server) {
	t.Helper()
	return startReplicaPairEnv(t, fakeURL, prefix, nil)
}

// startReplicaPairEnv is startReplicaPair with more server environment.
func startReplicaPairEnv(t *testing.T, fakeURL, prefix string, env map[string]string) (a, b *testenv.Server) {
	t.Helper()
	ts := testenv.Temporal(t)
	db, dir := testdb.New(t), t.TempDir()
	opts := func(queue string) testenv.Options {
		e := map[string]string{"BAE_TASK_QUEUE": queue}
		for k, v := range env {
			e[k] = v
		}
		return testenv.Options{
			DatabaseURL: db, Temporal: ts.GetDefaultClient(), DataDir: dir,
			ConfigTOML: testenv.PrimaryProviderTOML(fakeURL),
			Env:        e,
		}
	}
	return testenv.Start(t, opts(prefix+"-a")), testenv.Start(t, opts(prefix+"-b"))
}
