package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/provider"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
)

// thinkingEntry is a provider entry named "thinker" on the fake's lane
// "think" with thinking (anthropic: adaptive, effort high) or reasoning
// (openai: reasoning_effort medium) on; stream false asks for whole
// answers.
func thinkingEntry(kind string, lane fakeprovider.Lane, stream bool, extra string) string {
	model, settings := "claude-sonnet-4-6", `thinking = { type = "adaptive", display = "summarized" }
effort = "high"`
	if kind == "openai" {
		model, settings = "gpt-5", `reasoning_effort = "medium"`
	}
	return fmt.Sprintf(`
[[providers.entries]]
name = "thinker"
provider = %q
base_url = %q
model = %q
auth_token = "literal-token"
max_tokens = 2000
stream = %t
%s
[providers.entries.model_settings]
%s
`, kind, lane.URL(), model, stream, extra, settings)
}

// cycleSteps is how many assistant messages the cycle in progress has
// (the ones after the last user message that is not a tool result).
func cycleSteps(rec fakeprovider.Recorded) int {
	msgs := rec.Messages()
	n := 0
	for i := len(msgs) - 1; i >= 0; i-- {
		m := msgs[i]
		if m["role"] == "assistant" {
			n++
			continue
		}
		if m["role"] == "tool" {
			continue
		}
		blocks, _ := m["content"].([]any)
		isResult := false
		for _, b := range blocks {
			if bm, ok := b.(map[string]any); ok && bm["type"] == "tool_result" {
				isResult = true
			}
		}
		if !isResult {
			break
		}
	}
	return n
}

// thinkingLoop answers with thinking and a tool call for the first three
// steps of a cycle (the second with a redacted block too), then with
// thinking and a text answer.
func thinkingLoop(tool string) func(fakeprovider.Recorded) fakeprovider.Reply {
	return func(rec fakeprovider.Recorded) fakeprovider.Reply {
		if summarizing(rec) {
			return fakeprovider.Text("The user had files read while the model thought.")
		}
		step := cycleSteps(rec)
		r := fakeprovider.Reply{}.WithThinking(fmt.Sprintf("Step %d of request %d: I should reason about %s before answering. ", step, rec.Seq, tool) + strings.Repeat("Hmm. ", 20))
		if step == 1 {
			r = r.WithRedactedThinking()
		}
		if step < 3 {
			return r.WithToolUse(fmt.Sprintf("tu_%d", rec.Seq), tool, map[string]any{"step": step})
		}
		return r.WithText(fmt.Sprintf("done after %d steps", step))
	}
}

// runCycle sends text and answers each tool call with result until the
// turn ends with a text answer; it returns that answer's terminal.
func runCycle(t *testing.T, d *driver, text string, result func(step int) string) map[string]any {
	t.Helper()
	_, term := d.send(text)
	for step := 0; ; step++ {
		require.Nil(t, term["error"], "step %d: %v", step, term["error"])
		var use map[string]any
		for _, b := range message(term)["content"].([]any) {
			if bm := b.(map[string]any); bm["type"] == "tool_use" {
				use = bm
			}
		}
		if use == nil {
			return term
		}
		require.Less(t, step, 10, "the loop ends")
		_, term = d.send([]any{map[string]any{"type": "tool_result", "tool_use_id": use["id"], "content": result(step)}})
	}
}

// TestThinkingThroughAToolLoop: with thinking on (anthropic adaptive
// thinking, openai reasoning_effort), a three-step tool loop is accepted at
// every step by the strict fake, which refuses a request whose cycle lacks
// a thinking block it sent, in order, unaltered: streamed and whole. The
// blocks reach provider.response and the conversation as sent; usage
// counts the thinking tokens as output (the usage tables equal the fake's
// billing); and the prompt cache is still read with thinking on. Red when
// the assembler drops the signature (streamed) or the thinking is dropped
// from the stored answer.
func TestThinkingThroughAToolLoop(t *testing.T) {
	for _, kind := range []string{"anthropic", "openai"} {
		for _, stream := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/stream=%t", kind, stream), func(t *testing.T) {
				fake := fakeprovider.New(t)
				fake.Strict(true)
				fake.Caching(true)
				lane := fake.Lane("think")
				lane.Respond(thinkingLoop("lookup"))
				e := newEnvOnFake(t, fake, thinkingEntry(kind, lane, stream, ""))
				pid := e.srv.Profile(t, map[string]any{"name": "thinking", "primary_provider": "thinker", "allowed_tools": []string{"lookup"}})
				d := e.openOn(pid, map[string]any{"tools": []any{tool("lookup")}})
				d.register()
				for turn := range 2 {
					term := runCycle(t, d, userText(turn), func(step int) string {
						return strings.Repeat(fmt.Sprintf("result %d ", step), 300)
					})
					assert.Equal(t, "done after 3 steps", firstText(message(term)), "turn %d", turn)
				}
				assert.Zero(t, fake.StrictRefusals(), "every request kept its thinking")
				reqs := fake.Requests()
				require.Len(t, reqs, 8)
				var billedOut, thinkingOut int64
				for _, r := range reqs {
					if kind == "anthropic" {
						assert.Equal(t, map[string]any{"type": "adaptive", "display": "summarized"}, r.Body["thinking"])
						assert.Equal(t, map[string]any{"effort": "high"}, r.Body["output_config"])
					} else {
						assert.Equal(t, "medium", r.Body["reasoning_effort"])
						assert.NotContains(t, r.Body, "max_tokens")
						assert.EqualValues(t, 2000, r.Body["max_completion_tokens"])
					}
				}
				if kind == "anthropic" {
					// The last request carries each assistant message's
					// thinking in front of its tool_use, as sent.
					last := reqs[len(reqs)-1].Messages()
					var withThinking int
					for _, m := range last {
						blocks, _ := m["content"].([]any)
						if m["role"] == "assistant" && len(blocks) > 0 && blocks[0].(map[string]any)["type"] == "thinking" {
							withThinking++
						}
					}
					assert.Equal(t, 7, withThinking, "every answer of both turns keeps its thinking")
				}
				evs := d.allEvents()
				for _, ev := range evs {
					if ev["event_type"] != "provider.response" {
						continue
					}
					body, _ := json.Marshal(payload(ev)["body"])
					u := provider.UsageOf(kind, body)
					billedOut += u.Output
					if kind == "anthropic" {
						assert.Contains(t, string(body), `"type":"thinking"`, "provider.response carries the thinking")
						assert.Contains(t, string(body), `"signature":"EqQB`)
					} else {
						assert.Contains(t, string(body), `"reasoning_tokens"`)
						var b struct {
							Usage struct {
								Details struct {
									Reasoning int64 `json:"reasoning_tokens"`
								} `json:"completion_tokens_details"`
							} `json:"usage"`
						}
						require.NoError(t, json.Unmarshal(body, &b))
						thinkingOut += b.Usage.Details.Reasoning
					}
				}
				if kind == "openai" {
					assert.Positive(t, thinkingOut)
					assert.Greater(t, billedOut, thinkingOut, "completion tokens include the reasoning tokens")
				}
				// Thinking is billed as output: the session's usage is the
				// provider's own figures, thinking included.
				calls, want := loggedUsage(t, evs)
				view := e.srv.Admin(t, http.MethodGet, "/admin/v1/sessions/"+d.sid+"/usage", nil)
				require.Equal(t, http.StatusOK, view.Status, string(view.Raw))
				n, got := sums(t, view.Body["totals"])
				assert.Equal(t, calls, n)
				assert.Equal(t, want, got)
				assert.Equal(t, billedOut, got.Output)
				assert.Greater(t, got.Output, int64(8*20), "the thinking's tokens are in the output")
				// The prompt cache is read with thinking on.
				var reads int
				for _, r := range reqs[1:] {
					require.NotNil(t, r.Cache)
					reads += r.Cache.Read
				}
				assert.Positive(t, reads, "later requests read the cached prefix")
			})
		}
	}
}

// TestThinkingSurvivesCompaction: a long thinking session whose tool
// results overflow the window is cleared and summarized in the middle of
// its tool loops (a compaction at a request that carries the cycle in
// progress); the strict fake accepts every request, so no thinking block
// of a cycle in progress was cut, altered or parted from its tool_use, and
// no request was too long. Both wire formats, streamed and whole.
func TestThinkingSurvivesCompaction(t *testing.T) {
	for _, c := range []struct {
		kind   string
		stream bool
	}{{"anthropic", true}, {"anthropic", false}, {"openai", true}, {"openai", false}} {
		t.Run(fmt.Sprintf("%s/stream=%t", c.kind, c.stream), func(t *testing.T) {
			fake := fakeprovider.New(t)
			fake.Strict(true)
			lane := fake.Lane("think")
			lane.ContextWindow(windowTokens)
			lane.Respond(thinkingLoop("get_file"))
			e := newEnvOnFake(t, fake, thinkingEntry(c.kind, lane, c.stream, fmt.Sprintf("context_window = %d", windowTokens)))
			pid := e.srv.Profile(t, map[string]any{"name": "thinking", "primary_provider": "thinker", "allowed_tools": []string{"get_file"}, "context": map[string]any{"keep_turns": 1}})
			d := e.openOn(pid, map[string]any{"tools": []any{tool("get_file")}})
			d.register()
			const turns = 12
			for turn := range turns {
				term := runCycle(t, d, userText(turn), func(step int) string {
					return strings.Repeat(fmt.Sprintf("line %d.%d of the file\n", turn, step), 60)
				})
				assert.Equal(t, "done after 3 steps", firstText(message(term)), "turn %d", turn)
			}
			assert.Zero(t, fake.StrictRefusals(), "every request kept its cycle's thinking")
			assert.Zero(t, lane.Refusals(), "no request was too long")
			layers := map[string]int{}
			midCycle := 0
			evs := d.allEvents()
			for i, ev := range evs {
				if ev["event_type"] != "session.compaction" {
					continue
				}
				layers[payload(ev)["layer"].(string)]++
				// The message that asked for this request was a tool result.
				for j := i - 1; j >= 0; j-- {
					if evs[j]["event_type"] == "client.message.send" {
						if strings.Contains(fmt.Sprint(payload(evs[j])), "tool_result") {
							midCycle++
						}
						break
					}
				}
			}
			t.Logf("compactions: %v, %d in the middle of a tool loop", layers, midCycle)
			assert.Positive(t, layers["clear_tool_results"], "tool results were cleared")
			assert.Positive(t, layers["summary"], "older turns were summarized")
			assert.Positive(t, midCycle, "a compaction came in the middle of a tool loop")
		})
	}
}

// TestInterruptedThinkingLeavesAValidConversation: a turn interrupted
// while the model streams its thinking (in the second step of a tool loop,
// after a thinking+tool_use answer) keeps no partial thinking block (it has
// no signature yet); the next turn's request is accepted by the strict
// fake and carries the first step's thinking unaltered.
func TestInterruptedThinkingLeavesAValidConversation(t *testing.T) {
	fake := fakeprovider.New(t)
	fake.Strict(true)
	lane := fake.Lane("think")
	e := newEnvOnFake(t, fake, thinkingEntry("anthropic", lane, true, ""))
	pid := e.srv.Profile(t, map[string]any{"name": "thinking", "primary_provider": "thinker", "allowed_tools": []string{"lookup"}})
	d := e.openOn(pid, map[string]any{"tools": []any{tool("lookup")}})
	d.register()

	lane.Enqueue(
		fakeprovider.ToolUse("tu_1", "lookup", map[string]any{}).WithThinking("First I look it up."),
		fakeprovider.Text("never sent").WithThinking("Now I think about the result at length: "+strings.Repeat("deep ", 40)).Streamed(20, 0).HangStream(3),
		fakeprovider.Text("fresh answer").WithThinking("A new turn."),
	)
	_, term := d.send("look it up")
	require.Nil(t, term["error"])
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	send := openRaw(t, ctx, e.srv, d.sid, d.sk, d.request([]any{map[string]any{"type": "tool_result", "tool_use_id": "tu_1", "content": "42"}}), http.Header{"Bae-Deltas": {"on, thinking"}})
	// The thinking is being written: three of its pieces arrived.
	var thought strings.Builder
	for got := 0; got < 3; {
		line, m := send.next(time.Minute)
		require.NotNil(t, line, "the stream ended before the thinking deltas")
		if isDelta(m) && m["params"].(map[string]any)["type"] == "thinking_delta" {
			thought.WriteString(m["params"].(map[string]any)["thinking"].(string))
			got++
		}
	}
	assert.True(t, strings.HasPrefix(thought.String(), "Now I think"), thought.String())
	res := result(t, d.call("session.interrupt", map[string]any{}))
	assert.Equal(t, true, res["interrupted"])
	_, term = untilTerminal(t, send)
	assert.Equal(t, true, term["result"].(map[string]any)["interrupted"])
	for _, b := range term["result"].(map[string]any)["message"].(map[string]any)["content"].([]any) {
		assert.NotEqual(t, "thinking", b.(map[string]any)["type"], "a partial thinking block is not kept")
	}

	_, term = d.send("start again")
	require.Nil(t, term["error"], "%v", term["error"])
	assert.Equal(t, "fresh answer", firstText(message(term)))
	assert.Zero(t, fake.StrictRefusals())
	last := fake.Requests()[fake.RequestCount()-1]
	assert.Contains(t, string(last.RawBody), `"thinking":"First I look it up."`, "the finished step keeps its thinking")
	assert.NotContains(t, string(last.RawBody), "deep deep", "the cut thinking is not sent")
}

// TestModelSettingsOnProfiles: a profile's model_settings override the
// entry's for its sessions (reaching the request body, and shown on the
// profile and in provider.request), and are refused at save with the
// documented errors: 400 for an unknown key or a wrong type, 422
// invalid_model_settings (naming the field) for a provider entry not in
// the registry or a setting the entry's model refuses once laid over the
// entry's own. A profile without them sends what it always sent.
func TestModelSettingsOnProfiles(t *testing.T) {
	fake := fakeprovider.New(t)
	fake.Strict(true)
	lane := fake.Lane("think")
	e := newEnvOnFake(t, fake, thinkingEntry("anthropic", lane, false, "")+fmt.Sprintf(`
[[providers.entries]]
name = "old"
provider = "anthropic"
base_url = %q
model = "claude-sonnet-4-5"
auth_token = "literal-token"
max_tokens = 4000

[[providers.entries]]
name = "newest"
provider = "anthropic"
base_url = %q
model = "claude-opus-4-7"
auth_token = "literal-token"
`, lane.URL(), lane.URL()))
	post := func(settings any) (int, map[string]any) {
		r := e.srv.Admin(t, http.MethodPost, "/admin/v1/profiles", map[string]any{"name": fmt.Sprintf("p-%d", profileSeq.Add(1)), "primary_provider": "old", "model_settings": settings})
		return r.Status, r.Body
	}
	for _, c := range []struct {
		settings any
		status   int
		detail   string
	}{
		{map[string]any{"old": map[string]any{"temprature": 0.5}}, 400, `unknown field "temprature"`},
		{map[string]any{"old": map[string]any{"temperature": "hot"}}, 400, "model_settings.old"},
		{[]any{1}, 400, "model_settings"},
		{map[string]any{"nobody": map[string]any{"temperature": 0.5}}, 422, `model_settings.nobody: "nobody" is not in the provider registry`},
		{map[string]any{"newest": map[string]any{"thinking": map[string]any{"type": "enabled", "budget_tokens": 2048}}}, 422, "model_settings.newest.thinking.type"},
		{map[string]any{"old": map[string]any{"thinking": map[string]any{"type": "enabled", "budget_tokens": 512}}}, 422, "model_settings.old.thinking.budget_tokens: must be at least 1024"},
		{map[string]any{"old": map[string]any{"thinking": map[string]any{"type": "enabled", "budget_tokens": 4000}}}, 422, "below max_tokens (4000)"},
		{map[string]any{"thinker": map[string]any{"temperature": 0.3}}, 422, "model_settings.thinker.temperature: must be 1 (or unset) with thinking on"},
		{map[string]any{"thinker": map[string]any{"tool_choice": "any"}}, 422, "model_settings.thinker.tool_choice"},
		{map[string]any{"old": map[string]any{"reasoning_effort": "high"}}, 422, "is an openai setting"},
		{map[string]any{"old": map[string]any{"headers": map[string]any{"x-gateway-key": "Bearer ${BAE_TEST_DEFINITELY_UNSET}"}}}, 422, `model_settings.old.headers: header "X-Gateway-Key": environment variable "BAE_TEST_DEFINITELY_UNSET" is not set`},
	} {
		status, body := post(c.settings)
		assert.Equal(t, c.status, status, "%v: %v", c.settings, body)
		if c.status == 422 {
			assert.Equal(t, "invalid_model_settings", body["type"].(string)[strings.LastIndex(body["type"].(string), "/")+1:], "%v", body)
		}
		assert.Contains(t, body["detail"], c.detail, "%v", c.settings)
	}

	// A valid override reaches the body of the profile's requests only; a
	// header's ${VAR} token is stored as written and resolved at the call.
	over := map[string]any{"old": map[string]any{"thinking": map[string]any{"type": "enabled", "budget_tokens": 2048}, "stop": []any{"STOP"}, "headers": map[string]any{"x-gateway-key": "Bearer ${BAE_FAKE_TOKEN}"}}}
	r := e.srv.Admin(t, http.MethodPost, "/admin/v1/profiles", map[string]any{"name": "tuned", "primary_provider": "old", "model_settings": over})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Raw))
	assert.NotContains(t, string(r.Raw), "sk-fake-secret")
	shown := e.srv.Admin(t, http.MethodGet, "/admin/v1/profiles/"+r.Body["id"].(string), nil)
	assert.Equal(t, map[string]any{"old": map[string]any{"thinking": map[string]any{"type": "enabled", "budget_tokens": 2048.0}, "stop": []any{"STOP"}, "headers": map[string]any{"x-gateway-key": "Bearer ${BAE_FAKE_TOKEN}"}}}, shown.Body["model_settings"])
	plain := e.srv.Profile(t, map[string]any{"name": "plain", "primary_provider": "old"})
	got := e.srv.Admin(t, http.MethodGet, "/admin/v1/profiles/"+plain, nil)
	assert.NotContains(t, got.Body, "model_settings", "a profile without settings shows none")

	lane.Respond(func(fakeprovider.Recorded) fakeprovider.Reply { return fakeprovider.Text("ok").WithThinking("thought") })
	d := e.openOn(r.Body["id"].(string), nil)
	d.register()
	_, term := d.send("hi")
	require.Nil(t, term["error"], "%v", term["error"])
	req := fake.Requests()[fake.RequestCount()-1]
	assert.Equal(t, map[string]any{"type": "enabled", "budget_tokens": 2048.0}, req.Body["thinking"])
	assert.Equal(t, []any{"STOP"}, req.Body["stop_sequences"])
	assert.Equal(t, "Bearer sk-fake-secret", req.Header.Get("X-Gateway-Key"), "the token is resolved for the call")
	for _, ev := range resultEvents(term) {
		if ev["event_type"] == "provider.request" {
			assert.Equal(t, map[string]any{"thinking": map[string]any{"type": "enabled", "budget_tokens": 2048.0}, "stop": []any{"STOP"}, "headers": map[string]any{"X-Gateway-Key": "••••••••"}}, payload(ev)["model_settings"])
		}
	}
	assert.NotContains(t, fmt.Sprint(d.allEvents()), "sk-fake-secret", "the resolved value is in no event")

	p := e.openOn(plain, nil)
	p.register()
	_, term = p.send("hi")
	require.Nil(t, term["error"], "%v", term["error"])
	req = fake.Requests()[fake.RequestCount()-1]
	assert.Equal(t, []string{"max_tokens", "messages", "model", "stream"}, keysOf(req.Body), "a profile without settings sends only what it always sent")
	for _, ev := range resultEvents(term) {
		if ev["event_type"] == "provider.request" {
			assert.NotContains(t, payload(ev), "model_settings")
		}
	}
	assert.Zero(t, fake.StrictRefusals())
}

func keysOf(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// TestThinkingDeltasNeedTheirOwnOptIn: a stream with "Bae-Deltas: on"
// gets the answer's text deltas but nothing of its thinking (no
// thinking_delta, no thinking block_start); one with "on, thinking" gets
// the thinking as it is written, which joins to the stored block's text.
// Red when the stream's filter is dropped.
func TestThinkingDeltasNeedTheirOwnOptIn(t *testing.T) {
	fake := fakeprovider.New(t)
	fake.Strict(true)
	lane := fake.Lane("think")
	e := newEnvOnFake(t, fake, thinkingEntry("anthropic", lane, true, ""))
	pid := e.srv.Profile(t, map[string]any{"name": "thinking", "primary_provider": "thinker"})
	d := e.openOn(pid, nil)
	d.register()
	const thought = "Let me think this through carefully."
	for _, opt := range []string{"on", "on, thinking"} {
		lane.Enqueue(fakeprovider.Text("the answer").WithThinking(thought))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		send := openRaw(t, ctx, e.srv, d.sid, d.sk, d.request("think"), http.Header{"Bae-Deltas": {opt}})
		deltas, term := untilTerminal(t, send)
		cancel()
		require.Nil(t, term["error"])
		var text, thinking strings.Builder
		starts := []string{}
		for _, m := range deltas {
			p := m["params"].(map[string]any)
			switch p["type"] {
			case "text_delta":
				text.WriteString(p["text"].(string))
			case "thinking_delta":
				thinking.WriteString(p["thinking"].(string))
			case "block_start":
				starts = append(starts, p["block"].(map[string]any)["type"].(string))
			}
		}
		assert.Equal(t, "the answer", text.String(), opt)
		if opt == "on" {
			assert.Empty(t, thinking.String(), "no thinking without its opt-in")
			assert.Equal(t, []string{"text"}, starts)
		} else {
			assert.Equal(t, thought, thinking.String())
			assert.Equal(t, []string{"thinking", "text"}, starts)
		}
		blocks := message(term)["content"].([]any)
		assert.Equal(t, thought, blocks[0].(map[string]any)["thinking"], "the stored answer keeps its thinking")
	}
}
