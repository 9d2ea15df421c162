package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/compaction"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/workflows"
)

// windowTokens is the fake provider's context window in the compaction
// tests: 40,000 bytes of request as the fake counts them.
const windowTokens = 10_000

func summarizing(rec fakeprovider.Recorded) bool {
	return strings.HasPrefix(rec.LastUserText(), compaction.SummaryInstruction[:40])
}

// answerWithSummaries answers summarizer requests with a short summary and
// echoes everything else.
func answerWithSummaries(lane fakeprovider.Lane) {
	lane.Respond(func(rec fakeprovider.Recorded) fakeprovider.Reply {
		if summarizing(rec) {
			return fakeprovider.Text(fmt.Sprintf("The user sent numbered messages; this summary replaced %d bytes.", len(rec.RawBody)))
		}
		return fakeprovider.Echo()
	})
}

// newCompactionEnv is one server whose "small" provider entry has a window
// of windowTokens, served by the fake's "small" lane with fakeWindow.
func newCompactionEnv(t *testing.T, kind string, fakeWindow int, profile map[string]any) (*env, fakeprovider.Lane, string) {
	t.Helper()
	return newCompactionEnvWith(t, kind, fakeWindow, profile, "")
}

// newCompactionEnvWith is newCompactionEnv with more configuration.
func newCompactionEnvWith(t *testing.T, kind string, fakeWindow int, profile map[string]any, extraTOML string) (*env, fakeprovider.Lane, string) {
	t.Helper()
	fake := fakeprovider.New(t)
	lane := fake.Lane("small")
	lane.ContextWindow(fakeWindow)
	answerWithSummaries(lane)
	e := newEnvOnFake(t, fake, fmt.Sprintf(`
[[providers.entries]]
name = "small"
provider = %q
base_url = %q
model = "small-model"
auth_token = "literal-token"
context_window = %d
max_tokens = 1000
`, kind, lane.URL(), windowTokens)+extraTOML)
	profile["name"] = "compacting"
	profile["primary_provider"] = "small"
	if _, ok := profile["allowed_tools"]; !ok {
		profile["allowed_tools"] = []string{"get_file"}
	}
	pid := e.srv.Profile(t, profile)
	return e, lane, pid
}

// userText is the i-th message of a long session: about 600 bytes.
func userText(i int) string {
	return fmt.Sprintf("message %04d: ", i) + strings.Repeat(fmt.Sprintf("word%d ", i%10), 100)[:580]
}

// openFileReader answers on lane as a model that reads a file every turn
// (a get_file call, then "read it" once given its result; "The user had
// files read." when asked to summarize) and opens a driver declaring
// get_file on profile pid.
func openFileReader(e *env, lane fakeprovider.Lane, pid string) *driver {
	e.t.Helper()
	lane.Respond(func(rec fakeprovider.Recorded) fakeprovider.Reply {
		switch {
		case summarizing(rec):
			return fakeprovider.Text("The user had files read.")
		case rec.HasToolResult():
			return fakeprovider.Text("read it")
		}
		return fakeprovider.ToolUse(fmt.Sprintf("tu_%d", rec.Seq), "get_file", map[string]any{"path": "/f"})
	})
	d := e.openOn(pid, map[string]any{"tools": []any{tool("get_file")}})
	d.register()
	return d
}

// readFileTurn sends turn i's text on d, answers the get_file call it
// pauses for with a result of about 3 KB, and returns the resumed turn's
// terminal.
func readFileTurn(t *testing.T, d *driver, i int) map[string]any {
	t.Helper()
	_, term := d.send(userText(i))
	require.Nil(t, term["error"], "turn %d", i)
	var use map[string]any
	for _, b := range message(term)["content"].([]any) {
		if bm := b.(map[string]any); bm["type"] == "tool_use" {
			use = bm
		}
	}
	require.NotNil(t, use, "turn %d pauses for its tool", i)
	result := strings.Repeat(fmt.Sprintf("line %d of the file\n", i), 150)
	_, term = d.send([]any{map[string]any{"type": "tool_result", "tool_use_id": use["id"], "content": result}})
	require.Nil(t, term["error"], "turn %d resumed", i)
	return term
}

// requireNoSplitPairs checks every request the lane answered: each
// tool_result answers a tool_use of the assistant message just before it,
// and each tool_use is answered in the next message (or is the last one).
func requireNoSplitPairs(t *testing.T, lane fakeprovider.Lane, reqs []fakeprovider.Recorded) {
	t.Helper()
	checked := 0
	for _, rec := range reqs {
		if rec.Lane != "small" || summarizing(rec) {
			continue
		}
		msgs := rec.Messages()
		for i, m := range msgs {
			blocks, _ := m["content"].([]any)
			ids := func(typ, field string, bl []any) map[string]bool {
				out := map[string]bool{}
				for _, b := range bl {
					if bm, ok := b.(map[string]any); ok && bm["type"] == typ {
						out[bm[field].(string)] = true
					}
				}
				return out
			}
			if results := ids("tool_result", "tool_use_id", blocks); len(results) > 0 {
				require.Greater(t, i, 0, "a tool_result opens request %d", rec.Seq)
				prev, _ := msgs[i-1]["content"].([]any)
				assert.Equal(t, ids("tool_use", "id", prev), results, "request %d message %d: results without their tool_use", rec.Seq, i)
			}
			if uses := ids("tool_use", "id", blocks); len(uses) > 0 && i < len(msgs)-1 {
				next, _ := msgs[i+1]["content"].([]any)
				assert.Equal(t, uses, ids("tool_result", "tool_use_id", next), "request %d message %d: a tool_use without its results", rec.Seq, i)
			}
		}
		checked++
	}
	require.NotZero(t, checked)
}

// TestLongSessionCompacts: 150 turns of about 600 bytes, about 4.5 times
// the provider's window, in both wire formats. Every turn is answered, the
// provider never refuses a request as too long, the session stays open,
// every user message is still in the log (REST and subscribe replay) and
// session.compaction events say what was summarized.
func TestLongSessionCompacts(t *testing.T) {
	for _, kind := range []string{"anthropic", "openai"} {
		t.Run(kind, func(t *testing.T) {
			const turns = 150
			e, lane, pid := newCompactionEnv(t, kind, windowTokens, map[string]any{})
			d := e.openOn(pid, nil)
			d.register()
			for i := range turns {
				_, term := d.send(userText(i))
				if term["error"] != nil {
					for _, rec := range e.fake.Requests() {
						if summarizing(rec) {
							t.Logf("summarizer request %d: %d bytes", rec.Seq, len(rec.RawBody))
						}
					}
					for _, ev := range d.allEvents() {
						if ev["event_type"] == "session.compaction" || ev["event_type"] == "provider.response" && payload(ev)["ok"] != true || ev["event_type"] == "session.error" {
							b, _ := json.Marshal(ev["payload"])
							t.Logf("%v %s: %.600s", ev["seq"], ev["event_type"], b)
						}
					}
				}
				require.Nil(t, term["error"], "turn %d: %v", i, term["error"])
				require.Equal(t, "echo: "+userText(i), firstText(message(term)), "turn %d", i)
			}
			assert.Zero(t, lane.Refusals(), "no request was refused as too long")
			total := 0
			for _, rec := range e.fake.Requests() {
				if rec.Lane == "small" {
					assert.LessOrEqual(t, fakeprovider.InputTokens(rec.RawBody), windowTokens)
					total++
				}
			}

			evs := d.allEvents()
			var users []string
			var summaries, clears int
			for _, ev := range evs {
				switch ev["event_type"] {
				case "client.message.send":
					users = append(users, payload(ev)["content"].(string))
				case "session.compaction":
					p := payload(ev)
					switch p["layer"] {
					case "summary":
						summaries++
						assert.NotEmpty(t, p["summary"])
						assert.NotNil(t, p["summarizer"])
						assert.Less(t, p["tokens_after"].(float64), p["tokens_before"].(float64))
						rng := p["events"].(map[string]any)
						assert.Greater(t, rng["through_seq"].(float64), rng["from_seq"].(float64))
					case "clear_tool_results":
						clears++
					}
				case "session.error":
					t.Fatalf("session.error: %v", payload(ev))
				}
			}
			require.Len(t, users, turns, "every user message is in the log")
			for i, u := range users {
				assert.Equal(t, userText(i), u)
			}
			assert.Greater(t, summaries, 2, "the session was summarized, more than once")

			// The session is open: one more turn is answered.
			_, term := d.send("still there?")
			require.Nil(t, term["error"])
			sess, err := e.srv.Parts.Store.GetSession(context.Background(), d.sid)
			require.NoError(t, err)
			assert.Equal(t, "open", sess.State)

			// A subscriber replaying from the first event sees every user
			// message too.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			obs := e.srv.RPCStream(t, ctx, d.sid, d.sk, map[string]any{"jsonrpc": "2.0", "id": 77, "method": "session.subscribe",
				"params": map[string]any{"since_event_id": evs[0]["id"]}})
			defer obs.Close()
			seen, compactions := 0, 0
			for seen < turns+1 {
				m := obs.Next(30 * time.Second)
				require.NotNil(t, m, "replay stopped after %d user messages", seen)
				if m["method"] != "session.event" {
					continue
				}
				switch m["params"].(map[string]any)["event_type"] {
				case "client.message.send":
					seen++
				case "session.compaction":
					compactions++
				}
			}
			assert.Equal(t, summaries+clears, compactions, "replay carries the compaction events")
			t.Logf("%s: %d turns, %d provider requests, %d summaries, %d clearings", kind, turns+1, total, summaries, clears)
		})
	}
}

// TestToolHeavySessionCompacts: every turn pauses for a client tool whose
// result is about 3 KB, resumed by the driver; 40 turns are about 3 times
// the window. Compaction clears and summarizes without ever separating a
// tool_use from its tool_result, and every paused turn survives the
// compactions made while it was paused.
func TestToolHeavySessionCompacts(t *testing.T) {
	e, lane, pid := newCompactionEnv(t, "anthropic", windowTokens, map[string]any{"context": map[string]any{"keep_turns": 2}})
	d := openFileReader(e, lane, pid)
	const turns = 40
	for i := range turns {
		require.Equal(t, "read it", firstText(message(readFileTurn(t, d, i))), "turn %d", i)
	}
	assert.Zero(t, lane.Refusals())
	requireNoSplitPairs(t, lane, e.fake.Requests())
	layers := map[string]int{}
	// steps: the requests that compacted (compaction events with no
	// client message between them belong to one request).
	steps, fresh := 0, true
	for _, ev := range d.allEvents() {
		if ev["event_type"] == "client.message.send" {
			fresh = true
		}
		if ev["event_type"] == "session.compaction" {
			p := payload(ev)
			layers[p["layer"].(string)]++
			if fresh {
				steps, fresh = steps+1, false
			}
			if p["layer"] == "clear_tool_results" {
				assert.NotEmpty(t, p["cleared_tool_results"])
			}
		}
		require.NotEqual(t, "session.error", ev["event_type"], "%v", ev["payload"])
	}
	assert.Positive(t, layers["clear_tool_results"], "tool results were cleared")
	assert.Positive(t, layers["summary"], "and the oldest turns summarized")
	// Each compaction rewrites the prefix a provider caches: they come in
	// big steps (down to half the budget), not a little every turn.
	t.Logf("%d compaction steps in %d turns: %v", steps, turns, layers)
	assert.LessOrEqual(t, steps, turns/3, "compaction is rare")
}

// TestMCPHeavySessionCompacts: every turn calls a stdio MCP tool whose
// result is about 3 KB, run by the server inside the turn; 40 turns are
// about 3 times the window. Compaction clears and summarizes server-made
// pairs without separating a tool_use from its tool_result, and every
// turn is answered.
func TestMCPHeavySessionCompacts(t *testing.T) {
	profile := map[string]any{"context": map[string]any{"keep_turns": 2}, "mcp_servers": []string{"fs"}, "allowed_tools": []string{}}
	e, lane, pid := newCompactionEnvWith(t, "anthropic", windowTokens, profile, fsStdioTOML(t, "fs"))
	lane.Respond(func(rec fakeprovider.Recorded) fakeprovider.Reply {
		switch {
		case summarizing(rec):
			return fakeprovider.Text("The user had large files read.")
		case rec.HasToolResult():
			return fakeprovider.Text("read it")
		}
		return fakeprovider.ToolUse(fmt.Sprintf("tu_%d", rec.Seq), "read_big", map[string]any{"path": fmt.Sprintf("/f%d", rec.Seq)})
	})
	d := e.openOn(pid, nil)
	d.register()
	const turns = 40
	for i := range turns {
		_, term := d.send(userText(i))
		require.Nil(t, term["error"], "turn %d: %v", i, term["error"])
		require.Equal(t, "read it", firstText(message(term)), "turn %d", i)
	}
	assert.Zero(t, lane.Refusals())
	requireNoSplitPairs(t, lane, e.fake.Requests())
	layers := map[string]int{}
	results := 0
	for _, ev := range d.allEvents() {
		switch ev["event_type"] {
		case "session.compaction":
			layers[payload(ev)["layer"].(string)]++
		case "session.error":
			t.Fatalf("session error: %v", ev["payload"])
		case "mcp.response":
			results++
		}
	}
	assert.Positive(t, layers["clear_tool_results"], "MCP results were cleared")
	assert.Positive(t, layers["summary"], "and the oldest turns summarized")
	assert.Equal(t, turns, results, "every MCP result is still in the log")
}

// TestTooLongRefusalCompactsHarder: the provider's real window is smaller
// than its entry says, so requests the estimate lets through are refused
// as too long. Each refusal compacts harder and retries the attempt; every
// turn is answered and the session stays open.
func TestTooLongRefusalCompactsHarder(t *testing.T) {
	for _, kind := range []string{"anthropic", "openai"} {
		t.Run(kind, func(t *testing.T) {
			e, lane, pid := newCompactionEnv(t, kind, windowTokens/2, map[string]any{})
			d := e.openOn(pid, nil)
			d.register()
			for i := range 40 {
				_, term := d.send(userText(i))
				require.Nil(t, term["error"], "turn %d", i)
			}
			require.Positive(t, lane.Refusals(), "the provider refused some requests as too long")
			tooLong := 0
			for _, ev := range d.allEvents() {
				if ev["event_type"] == "session.compaction" && payload(ev)["trigger"] == "too_long" {
					tooLong++
				}
				require.NotEqual(t, "session.error", ev["event_type"], "%v", ev["payload"])
			}
			assert.Positive(t, tooLong, "the refusals were compacted")
		})
	}
}

// TestTurnThatFitsNoWindowFailsAlone: a single message larger than the
// window cannot be compacted to fit: that turn ends turn_failed, leaves the
// conversation, and the session answers the next message.
func TestTurnThatFitsNoWindowFailsAlone(t *testing.T) {
	e, lane, pid := newCompactionEnv(t, "anthropic", windowTokens, map[string]any{})
	d := e.openOn(pid, nil)
	d.register()
	_, term := d.send("hello")
	require.Nil(t, term["error"])
	_, term = d.send(strings.Repeat("too big ", 10_000))
	require.NotNil(t, term["error"])
	assert.Contains(t, term["error"].(map[string]any)["message"], "context_window")
	_, term = d.send("and now?")
	require.Nil(t, term["error"], "the session is still open")
	assert.True(t, strings.HasSuffix(firstText(message(term)), "and now?"), "answered: %s", firstText(message(term)))
	assert.Zero(t, lane.Refusals(), "the message that fits nothing was never sent")
}

// toolLoopWithFailingSummarizer opens a session whose model calls a tool
// on every message and answers every tool result, while the summarizer
// always fails with status and text.
func toolLoopWithFailingSummarizer(t *testing.T, status int, text string) *driver {
	e, lane, pid := newCompactionEnv(t, "anthropic", windowTokens, map[string]any{})
	lane.Respond(func(rec fakeprovider.Recorded) fakeprovider.Reply {
		switch {
		case summarizing(rec):
			return fakeprovider.Error(status, text)
		case rec.HasToolResult():
			return fakeprovider.Text("read it")
		}
		return fakeprovider.ToolUse(fmt.Sprintf("tu_%d", rec.Seq), "get_file", nil)
	})
	d := e.openOn(pid, map[string]any{"tools": []any{tool("get_file")}})
	d.register()
	return d
}

// TestFailingSummarizerFallsBackToClearing: a summarizer that always fails
// makes compaction clear tool results instead; turns go on.
func TestFailingSummarizerFallsBackToClearing(t *testing.T) {
	d := toolLoopWithFailingSummarizer(t, 400, "summaries are not allowed here")
	for i := range 16 {
		_, term := d.send("read it please")
		require.Nil(t, term["error"], "turn %d", i)
		use := message(term)["content"].([]any)[0].(map[string]any)
		_, term = d.send([]any{map[string]any{"type": "tool_result", "tool_use_id": use["id"], "content": strings.Repeat("x", 6000)}})
		require.Nil(t, term["error"], "turn %d resumed", i)
	}
	fallbacks := 0
	for _, ev := range d.allEvents() {
		if ev["event_type"] == "session.compaction" {
			p := payload(ev)
			assert.Equal(t, "clear_tool_results", p["layer"], "no summary was written")
			if p["fallback"] != nil {
				fallbacks++
				assert.Contains(t, p["fallback"], "summaries are not allowed here")
			}
		}
	}
	assert.Positive(t, fallbacks, "the summarizer's failure is on record")
}

// TestRetriedSummarizerFallsBackOnItsLastAttempt: a summarizer that keeps
// failing with a retryable error is tried CompactAttempts times, and the
// last attempt clears instead: the workflow's retry policy for
// CompactContext and the activity's count of its attempts must agree.
func TestRetriedSummarizerFallsBackOnItsLastAttempt(t *testing.T) {
	d := toolLoopWithFailingSummarizer(t, 503, "summarizer overloaded")
	fallbacks := 0
	for i := 0; i < 16 && fallbacks == 0; i++ {
		_, term := d.send("read it please")
		require.Nil(t, term["error"], "turn %d", i)
		use := message(term)["content"].([]any)[0].(map[string]any)
		_, term = d.send([]any{map[string]any{"type": "tool_result", "tool_use_id": use["id"], "content": strings.Repeat("x", 6000)}})
		require.Nil(t, term["error"], "turn %d resumed", i)
		for _, ev := range d.allEvents() {
			if ev["event_type"] == "session.compaction" && payload(ev)["fallback"] != nil {
				fallbacks++
				assert.Contains(t, payload(ev)["fallback"], "summarizer overloaded")
			}
		}
	}
	assert.Positive(t, fallbacks, "the last attempt fell back to clearing")
}

// TestSummaryStoredOnceAcrossCrashes: CompactContext cut off after its
// summarizer answered (the worker dies before storing), then retried, then
// retried again after it stored, and raced by a second worker: one summary
// and one session.compaction event.
func TestSummaryStoredOnceAcrossCrashes(t *testing.T) {
	e, lane, pid := newCompactionEnv(t, "anthropic", windowTokens, map[string]any{})
	d := e.openOn(pid, nil)
	d.register()
	for i := range 3 {
		_, term := d.send(userText(i))
		require.Nil(t, term["error"])
	}
	// A compaction is fenced by its turn: it runs for a live one, whose
	// provider call hangs meanwhile.
	const marker = "what did I say?"
	live := make(chan struct{}, 1)
	e.fake.OnRequest(func(rec fakeprovider.Recorded) {
		if !summarizing(rec) && strings.Contains(rec.LastUserText(), marker) {
			select {
			case live <- struct{}{}:
			default:
			}
		}
	})
	lane.Enqueue(fakeprovider.Text("held answer").UntilReleased())
	sctx, scancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer scancel()
	st := d.stream(sctx, marker)
	defer st.Close()
	waitFor(t, live, "the live turn's provider call")
	e.fake.OnRequest(nil)
	ids := turnIDs(t, e, d.sid)
	in := workflows.CompactContextInput{
		TurnRef:  workflows.TurnRef{SessionID: d.sid, TurnID: ids[len(ids)-1], ClientKeyID: d.keyID},
		Provider: "small", Providers: []string{"small"}, Harder: true,
	}
	acts := e.srv.Parts.Activities

	// The first try dies while the summarizer answers.
	ctx, cancel := context.WithCancel(context.Background())
	e.fake.OnRequest(func(rec fakeprovider.Recorded) {
		if summarizing(rec) {
			cancel()
		}
	})
	require.Error(t, acts.CompactContext(ctx, in))
	e.fake.OnRequest(nil)
	n, err := e.srv.Parts.Store.CountSummaries(context.Background(), d.sid)
	require.NoError(t, err)
	require.Zero(t, n, "nothing stored by the try that died")

	// The retry and a second worker racing it: both have their summary
	// before either stores it. Then a retry after both stored.
	both := make(chan struct{})
	var arrived atomic.Int32
	e.fake.OnRequest(func(rec fakeprovider.Recorded) {
		if !summarizing(rec) {
			return
		}
		if arrived.Add(1) == 2 {
			close(both)
		}
		select {
		case <-both:
		case <-time.After(30 * time.Second):
		}
	})
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- acts.CompactContext(context.Background(), in) }()
	}
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)
	e.fake.OnRequest(nil)
	require.EqualValues(t, 2, arrived.Load(), "both workers summarized")
	require.NoError(t, acts.CompactContext(context.Background(), in))

	n, err = e.srv.Parts.Store.CountSummaries(context.Background(), d.sid)
	require.NoError(t, err)
	assert.Equal(t, 1, n, "one summary")
	compactions := 0
	for _, ev := range d.allEvents() {
		if ev["event_type"] == "session.compaction" {
			compactions++
		}
	}
	assert.Equal(t, 1, compactions, "one session.compaction event")
	summarizerCalls := 0
	for _, rec := range e.fake.Requests() {
		if summarizing(rec) {
			summarizerCalls++
		}
	}
	assert.GreaterOrEqual(t, summarizerCalls, 2, "the retry asked again")

	// The live turn ends, and the next turn sees the summary.
	e.fake.Release()
	require.Nil(t, terminal(t, st)["error"])
	_, term := d.send("and now?")
	require.Nil(t, term["error"])
	assert.Zero(t, lane.Refusals())
}

// TestCompactionOff: a profile with compaction off sends the whole
// conversation; a too-long refusal fails that turn alone (no compaction,
// no retry) and the session stays open.
func TestCompactionOff(t *testing.T) {
	e, lane, pid := newCompactionEnv(t, "anthropic", 2000, map[string]any{"context": map[string]any{"enabled": false}})
	d := e.openOn(pid, nil)
	d.register()
	failed := 0
	for i := range 16 {
		_, term := d.send(userText(i))
		if term["error"] != nil {
			failed++
		}
	}
	assert.Positive(t, failed, "turns past the window fail")
	assert.Equal(t, failed, lane.Refusals(), "each failed turn was refused once, never retried")
	for _, ev := range d.allEvents() {
		require.NotEqual(t, "session.compaction", ev["event_type"])
	}
	sess, err := e.srv.Parts.Store.GetSession(context.Background(), d.sid)
	require.NoError(t, err)
	assert.Equal(t, "open", sess.State)
}
