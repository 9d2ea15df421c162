package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/internal/compaction"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/testenv"
)

// TestConsoleCompaction: a session on a provider with a small window
// compacts; the transcript shows the boundary (the summary, the tokens
// before and after), which expands to the original events. The profile
// page edits the context policy: a value out of range is refused with the
// admin API's error naming the field, a valid one is saved.
func TestConsoleCompaction(t *testing.T) {
	fake := fakeprovider.New(t)
	lane := fake.Lane("small")
	const summary = "Summary: the user sent numbered messages about words."
	lane.Respond(func(rec fakeprovider.Recorded) fakeprovider.Reply {
		if strings.HasPrefix(rec.LastUserText(), compaction.SummaryInstruction[:40]) {
			return fakeprovider.Text(summary)
		}
		return fakeprovider.Echo()
	})
	srv := testenv.Start(t, testenv.Options{ConfigTOML: fmt.Sprintf(`
[[providers.entries]]
name = "small"
provider = "anthropic"
base_url = %q
model = "small-model"
auth_token = "literal-token"
context_window = 1024
max_tokens = 100
`, lane.URL()), Env: map[string]string{"BAE_CONSOLE_ADDR": "127.0.0.1:0", "BAE_CONSOLE_PASSWORD": consolePassword}})
	pid := srv.Profile(t, map[string]any{"name": "compacting", "primary_provider": "small", "allowed_tools": []string{},
		"context": map[string]any{"keep_turns": 1}, "sandbox": map[string]any{"memory_mib": 512}})
	_, key := srv.Key(t, pid)
	sid, sk := srv.Open(t, key, map[string]any{"client_version": "compaction/1.0"})
	require.NotNil(t, testenv.Terminal(t, srv.Call(t, sid, sk, "session.registerDriver", nil))["result"])

	// Turns of about 600 bytes until the oldest are summarized.
	ctx := context.Background()
	summarized := func() bool {
		evs, err := srv.Parts.Store.EventsAfter(ctx, sid, 0, 5000)
		require.NoError(t, err)
		for _, e := range evs {
			if e.Type == events.SessionCompaction && strings.Contains(string(e.Payload), `"layer":"summary"`) {
				return true
			}
		}
		return false
	}
	for i := 0; !summarized(); i++ {
		require.Less(t, i, 30, "no summary after 30 turns")
		text := fmt.Sprintf("message %04d: ", i) + strings.Repeat(fmt.Sprintf("word%d ", i%10), 100)[:580]
		objs := srv.RPC(t, sid, sk, send(i+1, text))
		require.NotNil(t, testenv.Terminal(t, objs)["result"], "%v", objs)
	}

	b := newBrowser(t, srv.ConsoleURL)
	b.login()
	b.do(chromedp.Navigate(b.url + "/sessions/" + sid))
	b.waitFor(`document.querySelector('#transcript details.compaction.summary') !== null`)
	head := b.text("#transcript details.compaction.summary > summary")
	assert.Contains(t, head, "earlier turns summarized")
	assert.Regexp(t, `events #1–#\d+ · \d+ → \d+ tokens \(budget \d+\)`, head)
	assert.Contains(t, b.text("#transcript article.turn:first-of-type .badge.compacted"), "summarized")
	b.do(chromedp.Click(chromedp.CSS("#transcript details.compaction.summary > summary")))
	assert.Contains(t, b.text("#transcript details.compaction.summary .summary-text"), summary)
	assert.Contains(t, b.text("#transcript details.compaction.summary .compaction-body"), "written by small")
	// Expanded, it shows the original turns the summary stands for.
	b.do(chromedp.Click(chromedp.CSS("#transcript details.compaction.summary details.originals > summary")))
	b.waitFor(`[...document.querySelectorAll('#transcript details.compaction.summary .originals-body article.turn .bubble.user')].some(n => n.innerText.includes('message 0000: word0'))`)
	b.waitFor(`[...document.querySelectorAll('#transcript details.compaction.summary .originals-body .bubble.assistant')].some(n => n.innerText.includes('echo: message 0000'))`)
	b.do(chromedp.ScrollIntoView(chromedp.CSS("#transcript details.compaction.summary")))
	b.screenshot("session-compaction")

	// The expansion is the console's, behind its login.
	resp, err := http.Get(b.url + "/sessions/" + sid + "/events?from=1&through=3")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "a redirect to the login form, followed")
	assert.Equal(t, "/login", resp.Request.URL.Path)

	// The context policy on the profile page: out of range is the admin
	// API's 422, naming the field; the form keeps what was typed.
	b.do(chromedp.Navigate(b.url+"/profiles/"+pid), chromedp.WaitVisible(chromedp.CSS("#context-policy")))
	assert.Equal(t, "1", run(b, chromedp.Evaluate[string](`document.getElementById('context-keep-turns').value`)))
	b.do(chromedp.SetValue(chromedp.CSS("#context-keep-turns"), "0"), chromedp.Click(chromedp.CSS("#profile-save")))
	b.waitFor(`document.querySelector('#profile-form') && document.querySelector('.alert.error') !== null`)
	assert.Contains(t, b.text(".alert.error"), "context.keep_turns")
	assert.Contains(t, b.text(".alert.error"), "invalid_context")
	assert.Equal(t, "true", run(b, chromedp.Evaluate[string](`document.getElementById('context-keep-turns').getAttribute('aria-invalid')`)))
	assert.Equal(t, "0", run(b, chromedp.Evaluate[string](`document.getElementById('context-keep-turns').value`)))
	b.do(chromedp.ScrollIntoView(chromedp.CSS("#context-policy")))
	b.screenshot("profile-context")
	b.do(chromedp.SetValue(chromedp.CSS("#context-trigger"), "7"), chromedp.SetValue(chromedp.CSS("#context-keep-turns"), "6"),
		chromedp.Click(chromedp.CSS("#profile-save")))
	b.waitFor(`document.querySelector('.alert.error') !== null && document.querySelector('.alert.error').innerText.includes('context.trigger')`)
	b.do(chromedp.SetValue(chromedp.CSS("#context-trigger"), "0.5"), chromedp.Click(chromedp.CSS("#context-summarize")),
		chromedp.Click(chromedp.CSS("#profile-save")))
	b.do(chromedp.WaitVisible(chromedp.CSS("#profiles-table")))
	r := srv.Admin(t, http.MethodGet, "/admin/v1/profiles/"+pid, nil)
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	var got struct {
		Context map[string]any `json:"context"`
		Sandbox map[string]any `json:"sandbox"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.Raw), &got))
	assert.Equal(t, map[string]any{"enabled": true, "keep_turns": 6.0, "clear_tool_results": true, "summarize": false, "summarizer_provider": "", "trigger": 0.5}, got.Context)
	assert.Equal(t, 512.0, got.Sandbox["memory_mib"], "the rest of the profile is kept")
}

// TestConsoleLiveAnswerAndStop: a running turn's answer is typed as the
// provider streams it, before the turn ends; a partial answer the provider
// breaks off is discarded when the retry starts; the stored answer
// replaces the live text. The Stop button of a running turn interrupts
// it through the admin route, keeping what was typed.
func TestConsoleLiveAnswerAndStop(t *testing.T) {
	e := newConsoleEnv(t, nil)
	b := newBrowser(t, e.srv.ConsoleURL)
	b.login()
	sid, sk := e.openDriver(t, "live/1.0")
	b.do(chromedp.Navigate(b.url + "/sessions/" + sid))
	b.waitFor(`!document.getElementById('live').hidden`)

	// The fake sends one word at a time and holds the stream where told
	// (until Release): the first try breaks off after four words, the retry
	// holds after four (one of them looks like markup).
	const final = "The right answer, <b>typed</b> live."
	e.fake.Lane("primary").Enqueue(
		fakeprovider.Text("Wrong partial draft that gets dropped").HangStream(2).CutStream(4, "Overloaded"),
		fakeprovider.Text(final).HangStream(4),
	)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	turn := e.srv.RPCStream(t, ctx, sid, sk, send(1, "Say something"))
	liveText := `(document.querySelector('#transcript article.turn .bubble.assistant.typing') || {innerText: ''}).innerText`
	b.waitFor(liveText + `.includes('Wrong partial')`)
	assert.Equal(t, 0, run(b, chromedp.Evaluate[int](`document.querySelectorAll('#transcript .bubble.assistant:not(.typing)').length`)), "nothing is stored yet")
	e.fake.Release()
	// The break voids the partial answer; the retry's words replace it.
	b.waitFor(liveText + `.includes('The right answer, <b>typed</b>') && !` + liveText + `.includes('Wrong')`)
	assert.NotContains(t, b.text("#transcript article.turn .bubble.assistant.typing"), "live.", "not yet the rest")
	assert.Zero(t, run(b, chromedp.Evaluate[int](`document.querySelectorAll('#transcript .bubble.assistant.typing b').length`)), "live text is never markup")
	assert.True(t, run(b, chromedp.Evaluate[bool](`document.querySelector('#transcript article.turn .badge.running') !== null`)), "the turn is still running")
	b.screenshot("session-live")
	e.fake.Release()
	for range turn.Lines() {
	}
	b.waitFor(`document.querySelector('#transcript .bubble.assistant.typing') === null && document.querySelectorAll('#transcript .bubble.assistant').length === 1`)
	assert.Equal(t, final, b.text("#transcript .bubble.assistant .text"), "the stored answer, as text")
	assert.Zero(t, run(b, chromedp.Evaluate[int](`document.querySelectorAll('#transcript .bubble.assistant b').length`)), "model output is never markup")
	assert.NotContains(t, b.text("#transcript"), "Wrong partial")

	// Stop: the provider holds the next answer after three words; the
	// operator stops the turn, which keeps them, marked interrupted.
	e.fake.Lane("primary").Enqueue(fakeprovider.Text("This answer is stopped halfway through").HangStream(3))
	turn2 := e.srv.RPCStream(t, ctx, sid, sk, send(2, "Tell me a long story"))
	b.waitFor(liveText + `.includes('This answer is')`)
	assert.Equal(t, 1, run(b, chromedp.Evaluate[int](`document.querySelectorAll('#transcript article.turn button.stop').length`)), "only the running turn has Stop")
	b.do(chromedp.Click(chromedp.CSS("#transcript article.turn:last-of-type button.stop")))
	b.waitFor(`location.pathname === '/sessions/` + sid + `' && document.querySelector('#transcript article.turn:last-of-type .bubble.assistant.interrupted') !== null`)
	last := b.text("#transcript article.turn:last-of-type")
	assert.Contains(t, last, "This answer is", "what was typed is kept")
	assert.NotContains(t, last, "halfway")
	assert.Contains(t, strings.ToLower(last), "interrupted by operator")
	assert.Equal(t, "true", run(b, chromedp.Evaluate[string](`document.querySelector('#transcript article.turn:last-of-type').getAttribute('data-done')`)))
	assert.Zero(t, run(b, chromedp.Evaluate[int](`document.querySelectorAll('#transcript button.stop, #transcript .bubble.typing, #transcript .badge.running').length`)))
	b.screenshot("session-stopped")
	for range turn2.Lines() {
	}
	evs, err := e.srv.Parts.Store.EventsAfter(context.Background(), sid, 0, 1000)
	require.NoError(t, err)
	assert.Equal(t, events.ServerMessageInterrupted, evs[len(evs)-1].Type)
	assert.Contains(t, string(evs[len(evs)-1].Payload), `"by":"operator"`)
}
