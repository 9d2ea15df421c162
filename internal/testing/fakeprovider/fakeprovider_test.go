package fakeprovider_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/provider"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
)

// send posts body to url and decodes the JSON response; safe off the test
// goroutine.
func send(ctx context.Context, url, body string) (int, map[string]any, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewBufferString(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-api-key", "k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, err
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		return 0, nil, fmt.Errorf("decode %q: %w", raw, err)
	}
	return resp.StatusCode, out, nil
}

func post(t *testing.T, ctx context.Context, url, body string) (int, map[string]any) {
	t.Helper()
	status, out, err := send(ctx, url, body)
	require.NoError(t, err)
	return status, out
}

// firstText is content[0].text of an Anthropic-shaped response.
func firstText(body map[string]any) string {
	content, _ := body["content"].([]any)
	if len(content) == 0 {
		return ""
	}
	block, _ := content[0].(map[string]any)
	text, _ := block["text"].(string)
	return text
}

const userHi = `{"model":"fake-model","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`

func anthropicURL(base string) string { return base + "/v1/messages" }
func openAIURL(base string) string    { return base + "/v1/chat/completions" }

func TestAnthropicWireFormat(t *testing.T) {
	s := fakeprovider.New(t)
	s.Enqueue(fakeprovider.Text("let me look").WithToolUse("tu_1", "get_time", map[string]any{"tz": "UTC"}).WithToolUse("", "list", nil))
	status, body := post(t, context.Background(), anthropicURL(s.URL()), userHi)
	require.Equal(t, 200, status)
	assert.Equal(t, "message", body["type"])
	assert.Equal(t, "assistant", body["role"])
	assert.Equal(t, "fake-model", body["model"])
	assert.Equal(t, "tool_use", body["stop_reason"])
	content, err := json.Marshal(body["content"])
	require.NoError(t, err)
	assert.JSONEq(t, `[
	  {"type":"text","text":"let me look"},
	  {"type":"tool_use","id":"tu_1","name":"get_time","input":{"tz":"UTC"}},
	  {"type":"tool_use","id":"toolu_fake_1_2","name":"list","input":{}}
	]`, string(content))
}

func TestOpenAIWireFormat(t *testing.T) {
	s := fakeprovider.New(t)
	s.Enqueue(fakeprovider.ToolUse("call_1", "get_time", map[string]any{"tz": "UTC"}), fakeprovider.Text("done"))

	status, body := post(t, context.Background(), openAIURL(s.URL()), userHi)
	require.Equal(t, 200, status)
	assert.Equal(t, "chat.completion", body["object"])
	choice := body["choices"].([]any)[0].(map[string]any)
	assert.Equal(t, "tool_calls", choice["finish_reason"])
	msg := choice["message"].(map[string]any)
	assert.Nil(t, msg["content"])
	call := msg["tool_calls"].([]any)[0].(map[string]any)
	assert.Equal(t, "call_1", call["id"])
	assert.Equal(t, "function", call["type"])
	fn := call["function"].(map[string]any)
	assert.Equal(t, "get_time", fn["name"])
	assert.JSONEq(t, `{"tz":"UTC"}`, fn["arguments"].(string), "arguments is a JSON string")

	_, body = post(t, context.Background(), openAIURL(s.URL()), userHi)
	choice = body["choices"].([]any)[0].(map[string]any)
	assert.Equal(t, "stop", choice["finish_reason"])
	assert.Equal(t, "done", choice["message"].(map[string]any)["content"])
}

// Both kinds of the real client see the same canonical answer.
func TestRoundTripThroughProviderClient(t *testing.T) {
	s := fakeprovider.New(t)
	c := &provider.Client{}
	for _, kind := range []string{provider.KindAnthropic, provider.KindOpenAI} {
		t.Run(kind, func(t *testing.T) {
			s.Enqueue(fakeprovider.Text("checking").WithToolUse("tu_1", "get_time", map[string]any{"tz": "UTC"}))
			ep := provider.Endpoint{Kind: kind, BaseURL: s.URL(), Model: "fake-model", AuthToken: "tok"}
			resp, err := c.Call(context.Background(), ep, json.RawMessage(`[{"role":"user","content":"hi"}]`), json.RawMessage(`[{"name":"get_time"}]`))
			require.NoError(t, err)
			assert.JSONEq(t, `[{"type":"text","text":"checking"},{"type":"tool_use","id":"tu_1","name":"get_time","input":{"tz":"UTC"}}]`, string(resp.Canonical.Content))
			assert.Equal(t, "tool_use", resp.Canonical.StopReason)

			resp, err = c.Call(context.Background(), ep, json.RawMessage(`[{"role":"user","content":"ping"}]`), nil)
			require.NoError(t, err)
			assert.JSONEq(t, `[{"type":"text","text":"echo: ping"}]`, string(resp.Canonical.Content))
			assert.Equal(t, "end_turn", resp.Canonical.StopReason)

			s.Enqueue(fakeprovider.Error(429, "rate limit exceeded"))
			_, err = c.Call(context.Background(), ep, json.RawMessage(`[]`), nil)
			var ce *provider.CallError
			require.ErrorAs(t, err, &ce)
			require.NotNil(t, ce.Status)
			assert.Equal(t, 429, *ce.Status)
			assert.Equal(t, "rate limit exceeded", ce.Detail)
			assert.True(t, ce.Retryable)
		})
	}
	reqs := s.Requests()
	require.Len(t, reqs, 6)
	assert.Equal(t, fakeprovider.Anthropic, reqs[0].Format)
	assert.Equal(t, "tok", reqs[0].Header.Get("x-api-key"))
	assert.Equal(t, fakeprovider.OpenAI, reqs[3].Format)
	assert.Equal(t, "Bearer tok", reqs[3].Header.Get("Authorization"))
	assert.Equal(t, []string{"get_time"}, reqs[0].ToolNames())
	assert.Equal(t, []string{"get_time"}, reqs[3].ToolNames())
}

func TestQueueOrderThenEcho(t *testing.T) {
	s := fakeprovider.New(t)
	s.Enqueue(fakeprovider.Text("one"), fakeprovider.Text("two"))
	s.Enqueue(fakeprovider.Text("three"))
	assert.Equal(t, 3, s.Pending())

	var got []string
	for range 4 {
		_, body := post(t, context.Background(), anthropicURL(s.URL()), userHi)
		got = append(got, firstText(body))
	}
	assert.Equal(t, []string{"one", "two", "three", "echo: hi"}, got)
	assert.Equal(t, 0, s.Pending())
}

func TestEchoUsesLatestUserText(t *testing.T) {
	s := fakeprovider.New(t)
	body := `{"model":"m","messages":[
	  {"role":"user","content":"old"},
	  {"role":"user","content":[{"type":"text","text":"first"},{"type":"text","text":"second"}]},
	  {"role":"assistant","content":[{"type":"tool_use","id":"a","name":"t","input":{}}]},
	  {"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":"r"}]}
	]}`
	_, out := post(t, context.Background(), anthropicURL(s.URL()), body)
	assert.Equal(t, "echo: first\nsecond", firstText(out))
	assert.True(t, s.Requests()[0].HasToolResult())
}

func TestRecordsRequests(t *testing.T) {
	s := fakeprovider.New(t)
	hooked := make(chan int, 1)
	s.OnRequest(func(r fakeprovider.Recorded) { hooked <- r.Seq })
	post(t, context.Background(), anthropicURL(s.Lane("primary").URL()), userHi)

	rec := <-s.Started()
	assert.Equal(t, 1, rec.Seq)
	assert.Equal(t, 1, <-hooked)
	reqs := s.Requests()
	require.Len(t, reqs, 1)
	r := reqs[0]
	assert.Equal(t, "primary", r.Lane)
	assert.Equal(t, "/primary/v1/messages", r.Path)
	assert.Equal(t, http.MethodPost, r.Method)
	assert.Equal(t, "k", r.Header.Get("x-api-key"))
	assert.Equal(t, "fake-model", r.Model())
	assert.EqualValues(t, 10, r.Body["max_tokens"])
	assert.JSONEq(t, userHi, string(r.RawBody))
	assert.Equal(t, "hi", r.LastUserText())
	assert.False(t, r.HasToolResult())
	assert.Equal(t, 1, s.RequestCount())
}

func TestLanesHaveSeparateQueues(t *testing.T) {
	s := fakeprovider.New(t)
	s.Lane("primary").Enqueue(fakeprovider.Error(500, "primary down"))
	s.Lane("fallback").Enqueue(fakeprovider.Text("from fallback"))
	s.Enqueue(fakeprovider.Text("from base"))

	status, body := post(t, context.Background(), anthropicURL(s.Lane("primary").URL()), userHi)
	assert.Equal(t, 500, status)
	assert.Equal(t, "primary down", body["error"].(map[string]any)["message"])
	assert.Equal(t, "api_error", body["error"].(map[string]any)["type"])

	_, body = post(t, context.Background(), openAIURL(s.Lane("fallback").URL()), userHi)
	assert.Equal(t, "from fallback", body["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"])

	_, body = post(t, context.Background(), anthropicURL(s.URL()), userHi)
	assert.Equal(t, "from base", firstText(body))
}

func TestResponderRunsWhenQueueEmpty(t *testing.T) {
	s := fakeprovider.New(t)
	// The classic client-tool loop: call a tool until its result comes back.
	s.Respond(func(r fakeprovider.Recorded) fakeprovider.Reply {
		if r.HasToolResult() {
			return fakeprovider.Text("tool round-trip complete")
		}
		return fakeprovider.ToolUse("tu_1", "get_current_time", nil)
	})
	s.Enqueue(fakeprovider.Text("queued first"))
	c := &provider.Client{}
	ep := provider.Endpoint{Kind: provider.KindOpenAI, BaseURL: s.URL(), Model: "m"}
	texts := func(history string) string {
		resp, err := c.Call(context.Background(), ep, json.RawMessage(history), nil)
		require.NoError(t, err)
		return string(resp.Canonical.Content)
	}
	assert.JSONEq(t, `[{"type":"text","text":"queued first"}]`, texts(`[{"role":"user","content":"hi"}]`))
	assert.JSONEq(t, `[{"type":"tool_use","id":"tu_1","name":"get_current_time","input":{}}]`, texts(`[{"role":"user","content":"hi"}]`))
	assert.JSONEq(t, `[{"type":"text","text":"tool round-trip complete"}]`, texts(`[
	  {"role":"user","content":"hi"},
	  {"role":"assistant","content":[{"type":"tool_use","id":"tu_1","name":"get_current_time","input":{}}]},
	  {"role":"user","content":[{"type":"tool_result","tool_use_id":"tu_1","content":"noon"}]}
	]`))

	s.Respond(nil)
	assert.JSONEq(t, `[{"type":"text","text":"echo: hi"}]`, texts(`[{"role":"user","content":"hi"}]`))
}

func TestErrorShapes(t *testing.T) {
	s := fakeprovider.New(t)
	s.Enqueue(fakeprovider.Error(429, "slow down"), fakeprovider.Error(429, "slow down"))
	status, body := post(t, context.Background(), anthropicURL(s.URL()), userHi)
	assert.Equal(t, 429, status)
	assert.Equal(t, map[string]any{"type": "error", "error": map[string]any{"type": "rate_limit_error", "message": "slow down"}}, body)

	status, body = post(t, context.Background(), openAIURL(s.URL()), userHi)
	assert.Equal(t, 429, status)
	assert.Equal(t, "slow down", body["error"].(map[string]any)["message"])
	assert.Equal(t, "rate_limit_exceeded", body["error"].(map[string]any)["type"])
}

func TestRawReply(t *testing.T) {
	s := fakeprovider.New(t)
	s.Enqueue(fakeprovider.Raw(200, "not json"))
	resp, err := http.Post(anthropicURL(s.URL()), "application/json", bytes.NewBufferString(userHi))
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, "not json", string(raw))
}

func TestBadRequestsDoNotConsumeQueue(t *testing.T) {
	s := fakeprovider.New(t)
	s.Enqueue(fakeprovider.Text("kept"))

	resp, err := http.Post(s.URL()+"/v2/other", "application/json", bytes.NewBufferString(userHi))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)

	status, body := post(t, context.Background(), anthropicURL(s.URL()), `[not an object]`)
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Equal(t, "invalid_request_error", body["error"].(map[string]any)["type"])

	assert.Equal(t, 1, s.Pending())
	assert.Equal(t, 1, s.RequestCount(), "unrouted requests are not recorded")
}

func TestDelayAndServedTime(t *testing.T) {
	s := fakeprovider.New(t)
	s.Enqueue(fakeprovider.Delay(50*time.Millisecond), fakeprovider.Text("late").After(50*time.Millisecond))
	start := time.Now()
	_, body := post(t, context.Background(), anthropicURL(s.URL()), userHi)
	assert.Equal(t, "echo: hi", firstText(body))
	_, body = post(t, context.Background(), anthropicURL(s.URL()), userHi)
	assert.Equal(t, "late", firstText(body))
	elapsed := time.Since(start)

	served := s.ServedTime()
	assert.GreaterOrEqual(t, served, 100*time.Millisecond)
	assert.LessOrEqual(t, served, elapsed, "served time is measured inside the wall time")
}

func TestDelayAbortedByClient(t *testing.T) {
	s := fakeprovider.New(t)
	s.Enqueue(fakeprovider.Delay(time.Hour))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := (&provider.Client{}).Call(ctx, provider.Endpoint{Kind: provider.KindAnthropic, BaseURL: s.URL(), Model: "m"}, json.RawMessage(`[]`), nil)
		errc <- err
	}()
	<-s.Started()
	cancel()
	assert.ErrorIs(t, <-errc, context.Canceled)
}

func TestHangUntilRelease(t *testing.T) {
	s := fakeprovider.New(t)
	s.Enqueue(fakeprovider.Hang(), fakeprovider.Text("second").UntilReleased())
	type result struct {
		status int
		text   string
		err    error
	}
	results := make(chan result, 2)
	hit := func() {
		status, body, err := send(context.Background(), anthropicURL(s.URL()), userHi)
		results <- result{status, firstText(body), err}
	}
	go hit()
	<-s.Started()
	go hit()
	<-s.Started()

	s.Release()
	got := map[string]int{}
	for range 2 {
		r := <-results
		require.NoError(t, r.err)
		got[r.text] = r.status
	}
	assert.Equal(t, map[string]int{"echo: hi": 200, "second": 200}, got)
}

func TestReleaseDoesNotPreRelease(t *testing.T) {
	s := fakeprovider.Start()
	s.Release() // nothing is hung yet: must not affect later hangs
	s.Enqueue(fakeprovider.Hang())
	statusc := make(chan int, 1)
	go func() {
		resp, err := http.Post(anthropicURL(s.URL()), "application/json", bytes.NewBufferString(userHi))
		if err != nil {
			statusc <- -1
			return
		}
		resp.Body.Close()
		statusc <- resp.StatusCode
	}()
	<-s.Started()
	// Close frees the hung request with a 503; a request that was not
	// hanging would already have its 200.
	s.Close()
	assert.Equal(t, http.StatusServiceUnavailable, <-statusc)
	s.Close() // idempotent
}

func TestHangEndsWithRequestContext(t *testing.T) {
	s := fakeprovider.New(t)
	s.Enqueue(fakeprovider.Hang())
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := (&provider.Client{}).Call(ctx, provider.Endpoint{Kind: provider.KindOpenAI, BaseURL: s.URL(), Model: "m"}, json.RawMessage(`[]`), nil)
		errc <- err
	}()
	<-s.Started()
	cancel()
	assert.ErrorIs(t, <-errc, context.Canceled)
}

func TestNewHandlerServesWithoutListener(t *testing.T) {
	h := fakeprovider.NewHandler()
	defer h.Close()
	assert.Empty(t, h.URL())
	h.Enqueue(fakeprovider.Text("direct"))
	rr := httptest.NewRecorder()
	h.ServeHTTP(rr, httptest.NewRequest(http.MethodPost, "/v1/messages", bytes.NewBufferString(userHi)))
	assert.Equal(t, 200, rr.Code)
	assert.Contains(t, rr.Body.String(), `"text":"direct"`)
}

// A lane with a context window refuses longer requests as each provider
// does, and provider.TooLong recognises both answers.
func TestContextWindowRefusesLikeTheProvider(t *testing.T) {
	s := fakeprovider.New(t)
	lane := s.Lane("small")
	lane.ContextWindow(50)
	c := &provider.Client{}
	long, _ := json.Marshal([]map[string]any{{"role": "user", "content": string(bytes.Repeat([]byte("x"), 400))}})
	for _, kind := range []string{provider.KindAnthropic, provider.KindOpenAI} {
		t.Run(kind, func(t *testing.T) {
			ep := provider.Endpoint{Kind: kind, BaseURL: lane.URL(), Model: "fake-model", AuthToken: "tok"}
			lane.Enqueue(fakeprovider.Text("kept for the short one"))
			_, err := c.Call(context.Background(), ep, long, nil)
			var ce *provider.CallError
			require.ErrorAs(t, err, &ce)
			require.NotNil(t, ce.Status)
			assert.Equal(t, 400, *ce.Status)
			assert.False(t, ce.Retryable)
			assert.True(t, provider.TooLong(kind, ce), "%s", ce.Body)
			if kind == provider.KindAnthropic {
				assert.Regexp(t, `^prompt is too long: \d+ tokens > 50 maximum$`, ce.Detail)
			} else {
				assert.Contains(t, string(ce.Body), `"code":"context_length_exceeded"`)
			}
			resp, err := c.Call(context.Background(), ep, json.RawMessage(`[{"role":"user","content":"hi"}]`), nil)
			require.NoError(t, err, "a request within the window is answered")
			assert.Contains(t, string(resp.Canonical.Content), "kept for the short one", "the refused request consumed no reply")
		})
	}
	assert.Equal(t, 2, lane.Refusals())
}
