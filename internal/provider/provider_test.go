package provider_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/provider"
)

// captured is one request a stub server saw.
type captured struct {
	Method string
	Path   string
	Header http.Header
	Body   []byte
}

// stub serves status/body for every request and hands each request to the
// returned channel.
func stub(t *testing.T, status int, body string) (*httptest.Server, <-chan captured) {
	t.Helper()
	got := make(chan captured, 8)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- captured{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: b}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

func call(t *testing.T, ep provider.Endpoint, messages, tools string) (*provider.Response, error) {
	t.Helper()
	c := &provider.Client{HTTP: &http.Client{}}
	return c.Call(context.Background(), ep, json.RawMessage(messages), json.RawMessage(tools))
}

func callError(t *testing.T, err error) *provider.CallError {
	t.Helper()
	require.Error(t, err)
	var ce *provider.CallError
	require.ErrorAs(t, err, &ce)
	return ce
}

const historyWithTags = `[
  {"role":"user","content":"what time is it? <now>"},
  {"role":"assistant","content":[
    {"type":"text","text":"checking"},
    {"type":"tool_use","id":"tu_1","name":"get_time","input":{"tz":"UTC","n":12345678901234567890},"dispatch":"client","caller":"driver-a","cache_control":{"type":"ephemeral"}}
  ]},
  {"role":"user","content":[
    {"type":"tool_result","tool_use_id":"tu_1","content":[{"type":"text","text":"12:00"}]},
    {"type":"text","text":"thanks"}
  ]}
]`

const toolsJSON = `[
  {"name":"get_time","description":"Current time","input_schema":{"type":"object","properties":{"tz":{"type":"string"}}}},
  {"name":"no_schema","description":null},
  {"name":"empty_desc","description":"","input_schema":{"type":"object"}}
]`

func TestAnthropicRequestShape(t *testing.T) {
	respBody := `{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"hi","citations":null}],"stop_reason":"end_turn","usage":{"input_tokens":1}}`
	srv, got := stub(t, 200, respBody)
	resp, err := call(t, provider.Endpoint{Kind: provider.KindAnthropic, BaseURL: srv.URL + "/", Model: "claude-x", MaxTokens: 1024, AuthToken: "sk-secret"}, historyWithTags, toolsJSON)
	require.NoError(t, err)

	req := <-got
	assert.Equal(t, http.MethodPost, req.Method)
	assert.Equal(t, "/v1/messages", req.Path)
	assert.Equal(t, "sk-secret", req.Header.Get("x-api-key"))
	assert.Equal(t, "2023-06-01", req.Header.Get("anthropic-version"))
	assert.Equal(t, "application/json", req.Header.Get("content-type"))
	assert.Empty(t, req.Header.Get("Authorization"))

	assert.JSONEq(t, `{
	  "model":"claude-x","max_tokens":1024,
	  "messages":[
	    {"role":"user","content":"what time is it? <now>"},
	    {"role":"assistant","content":[
	      {"type":"text","text":"checking"},
	      {"type":"tool_use","id":"tu_1","name":"get_time","input":{"tz":"UTC","n":12345678901234567890},"cache_control":{"type":"ephemeral"}}
	    ]},
	    {"role":"user","content":[
	      {"type":"tool_result","tool_use_id":"tu_1","content":[{"type":"text","text":"12:00"}]},
	      {"type":"text","text":"thanks"}
	    ]}
	  ],
	  "tools":[
	    {"name":"get_time","description":"Current time","input_schema":{"type":"object","properties":{"tz":{"type":"string"}}}},
	    {"name":"no_schema","input_schema":{"type":"object"}},
	    {"name":"empty_desc","input_schema":{"type":"object"}}
	  ]
	}`, string(req.Body))
	// Numbers and HTML-significant text survive byte for byte.
	assert.Contains(t, string(req.Body), `12345678901234567890`)
	assert.Contains(t, string(req.Body), `<now>`)

	assert.Equal(t, 200, resp.Status)
	assert.Equal(t, respBody, string(resp.Raw))
	assert.JSONEq(t, `[{"type":"text","text":"hi","citations":null}]`, string(resp.Canonical.Content))
	assert.Equal(t, "end_turn", resp.Canonical.StopReason)
}

// TestAnthropicMessagesGoAsSent: messages without internal fields reach an
// Anthropic-kind endpoint byte for byte (a long conversation is copied, not
// decoded and encoded again), in the same request shape.
func TestAnthropicMessagesGoAsSent(t *testing.T) {
	msgs := `[{"role":"user","content":"caf\u00e9 <b> 12345678901234567890"},{"role":"assistant","content":[{"type":"text","text":"ok","citations":null}]},{"role":"user","content":"more"}]`
	srv, got := stub(t, 200, `{"content":[],"stop_reason":"end_turn"}`)
	_, err := call(t, provider.Endpoint{Kind: provider.KindAnthropic, BaseURL: srv.URL, Model: "m", MaxTokens: 7}, msgs, toolsJSON)
	require.NoError(t, err)
	body := (<-got).Body
	var req struct {
		Messages json.RawMessage `json:"messages"`
	}
	require.NoError(t, json.Unmarshal(body, &req))
	assert.Equal(t, msgs, string(req.Messages))
	assert.JSONEq(t, `{"model":"m","max_tokens":7,"messages":`+msgs+`,"tools":[
	    {"name":"get_time","description":"Current time","input_schema":{"type":"object","properties":{"tz":{"type":"string"}}}},
	    {"name":"no_schema","input_schema":{"type":"object"}},
	    {"name":"empty_desc","input_schema":{"type":"object"}}]}`, string(body))
}

func TestAnthropicOmitsEmptyToolsAndDefaultsMaxTokens(t *testing.T) {
	srv, got := stub(t, 200, `{"content":[],"stop_reason":"end_turn"}`)
	for _, tools := range []string{``, `null`, `[]`} {
		resp, err := call(t, provider.Endpoint{Kind: provider.KindAnthropic, BaseURL: srv.URL, Model: "m"}, `[{"role":"user","content":"hi"}]`, tools)
		require.NoError(t, err, "tools %q", tools)
		assert.JSONEq(t, `[]`, string(resp.Canonical.Content))
		var body map[string]any
		require.NoError(t, json.Unmarshal((<-got).Body, &body))
		assert.NotContains(t, body, "tools", "tools %q", tools)
		assert.EqualValues(t, provider.DefaultMaxTokens, body["max_tokens"])
	}
}

func TestAnthropicToolUseResponsePassesThrough(t *testing.T) {
	content := `[{"type":"text","text":"let me"},{"type":"tool_use","id":"toolu_9","name":"get_time","input":{"tz":"UTC"}}]`
	srv, _ := stub(t, 200, `{"role":"assistant","content":`+content+`,"stop_reason":"tool_use"}`)
	resp, err := call(t, provider.Endpoint{Kind: provider.KindAnthropic, BaseURL: srv.URL, Model: "m"}, `[{"role":"user","content":"hi"}]`, `[]`)
	require.NoError(t, err)
	assert.Equal(t, content, string(resp.Canonical.Content))
	assert.Equal(t, "tool_use", resp.Canonical.StopReason)
}

func TestOpenAIRequestTranslation(t *testing.T) {
	srv, got := stub(t, 200, `{"choices":[{"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`)
	_, err := call(t, provider.Endpoint{Kind: provider.KindOpenAI, BaseURL: srv.URL, Model: "gpt-x", MaxTokens: 512, AuthToken: "sk-oa"}, historyWithTags, toolsJSON)
	require.NoError(t, err)

	req := <-got
	assert.Equal(t, "/v1/chat/completions", req.Path)
	assert.Equal(t, "Bearer sk-oa", req.Header.Get("Authorization"))
	assert.Empty(t, req.Header.Get("x-api-key"))
	assert.Equal(t, "application/json", req.Header.Get("content-type"))

	var body struct {
		Model     string `json:"model"`
		MaxTokens int    `json:"max_tokens"`
		Messages  []struct {
			Role       string  `json:"role"`
			Content    *string `json:"content"`
			ToolCallID string  `json:"tool_call_id"`
			ToolCalls  []struct {
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"messages"`
		Tools json.RawMessage `json:"tools"`
	}
	require.NoError(t, json.Unmarshal(req.Body, &body))
	assert.Equal(t, "gpt-x", body.Model)
	assert.Equal(t, 512, body.MaxTokens)
	require.Len(t, body.Messages, 4)

	assert.Equal(t, "user", body.Messages[0].Role)
	assert.Equal(t, "what time is it? <now>", *body.Messages[0].Content)

	asst := body.Messages[1]
	assert.Equal(t, "assistant", asst.Role)
	assert.Equal(t, "checking", *asst.Content)
	require.Len(t, asst.ToolCalls, 1)
	assert.Equal(t, "tu_1", asst.ToolCalls[0].ID)
	assert.Equal(t, "function", asst.ToolCalls[0].Type)
	assert.Equal(t, "get_time", asst.ToolCalls[0].Function.Name)
	// arguments is a JSON string; internal tags never reach it or the message.
	assert.JSONEq(t, `{"tz":"UTC","n":12345678901234567890}`, asst.ToolCalls[0].Function.Arguments)
	assert.NotContains(t, string(req.Body), "dispatch")
	assert.NotContains(t, string(req.Body), "driver-a")

	// The tool result comes first, flattened to text, then the leftover text.
	assert.Equal(t, "tool", body.Messages[2].Role)
	assert.Equal(t, "tu_1", body.Messages[2].ToolCallID)
	assert.Equal(t, "12:00", *body.Messages[2].Content)
	assert.Equal(t, "user", body.Messages[3].Role)
	assert.Equal(t, "thanks", *body.Messages[3].Content)

	assert.JSONEq(t, `[
	  {"type":"function","function":{"name":"get_time","description":"Current time","parameters":{"type":"object","properties":{"tz":{"type":"string"}}}}},
	  {"type":"function","function":{"name":"no_schema","parameters":{"type":"object"}}},
	  {"type":"function","function":{"name":"empty_desc","parameters":{"type":"object"}}}
	]`, string(body.Tools))
}

func TestOpenAIAssistantContentNullOnlyWithToolCalls(t *testing.T) {
	srv, got := stub(t, 200, `{"choices":[{"message":{"content":"ok"},"finish_reason":"stop"}]}`)
	history := `[
	  {"role":"assistant","content":[{"type":"tool_use","id":"a","name":"t","input":{}}]},
	  {"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":"plain","is_error":true}]},
	  {"role":"assistant","content":[]},
	  {"role":"user","content":[{"type":"tool_result","tool_use_id":"b","content":[{"type":"image","source":{}}]}]}
	]`
	_, err := call(t, provider.Endpoint{Kind: provider.KindOpenAI, BaseURL: srv.URL, Model: "m"}, history, `[]`)
	require.NoError(t, err)
	assert.JSONEq(t, `{"model":"m","max_tokens":4096,"messages":[
	  {"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"t","arguments":"{}"}}]},
	  {"role":"tool","tool_call_id":"a","content":"plain"},
	  {"role":"assistant","content":""},
	  {"role":"tool","tool_call_id":"b","content":"[{\"source\":{},\"type\":\"image\"}]"}
	]}`, string((<-got).Body))
}

func TestOpenAIResponseTranslation(t *testing.T) {
	raw := `{"id":"chatcmpl-1","choices":[{"index":0,"message":{"role":"assistant","content":"on it",
	  "tool_calls":[
	    {"id":"call_1","type":"function","function":{"name":"get_time","arguments":"{\"tz\": \"UTC\"}"}},
	    {"id":"call_2","type":"function","function":{"name":"broken","arguments":"{ not json"}},
	    {"id":"call_3","type":"function","function":{"name":"no_args","arguments":""}}
	  ]},"finish_reason":"tool_calls"}]}`
	srv, _ := stub(t, 200, raw)
	resp, err := call(t, provider.Endpoint{Kind: provider.KindOpenAI, BaseURL: srv.URL, Model: "m"}, `[{"role":"user","content":"hi"}]`, `[]`)
	require.NoError(t, err)
	assert.Equal(t, raw, string(resp.Raw), "raw stays the untranslated wire body")
	assert.JSONEq(t, `[
	  {"type":"text","text":"on it"},
	  {"type":"tool_use","id":"call_1","name":"get_time","input":{"tz":"UTC"}},
	  {"type":"tool_use","id":"call_2","name":"broken","input":{}},
	  {"type":"tool_use","id":"call_3","name":"no_args","input":{}}
	]`, string(resp.Canonical.Content))
	assert.Equal(t, "tool_use", resp.Canonical.StopReason)
}

func TestOpenAINullContentYieldsEmptyBlocks(t *testing.T) {
	srv, _ := stub(t, 200, `{"choices":[{"message":{"role":"assistant","content":null},"finish_reason":"length"}]}`)
	resp, err := call(t, provider.Endpoint{Kind: provider.KindOpenAI, BaseURL: srv.URL, Model: "m"}, `[]`, `[]`)
	require.NoError(t, err)
	assert.JSONEq(t, `[]`, string(resp.Canonical.Content))
	assert.Equal(t, "length", resp.Canonical.StopReason)
}

func TestStopReasonFromOpenAI(t *testing.T) {
	for in, want := range map[string]string{"tool_calls": "tool_use", "stop": "end_turn", "length": "length", "content_filter": "content_filter", "": ""} {
		assert.Equal(t, want, provider.StopReasonFromOpenAI(in), in)
	}
}

func TestStatusErrors(t *testing.T) {
	cases := []struct {
		name      string
		kind      string
		status    int
		body      string
		detail    string
		jsonBody  bool
		retryable bool
	}{
		{"anthropic 429 message", provider.KindAnthropic, 429, `{"type":"error","error":{"type":"rate_limit_error","message":"rate limit exceeded"}}`, "rate limit exceeded", true, true},
		{"openai 429 message", provider.KindOpenAI, 429, `{"error":{"message":"rate limit exceeded","type":"rate_limit_exceeded"}}`, "rate limit exceeded", true, true},
		{"500 string error", provider.KindAnthropic, 500, `{"error":"boom"}`, "boom", true, true},
		{"502 html", provider.KindOpenAI, 502, `<html>bad gateway</html>`, "provider returned HTTP 502 Bad Gateway", false, true},
		{"400 not retryable", provider.KindAnthropic, 400, `{"error":{"message":"max_tokens too large"}}`, "max_tokens too large", true, false},
		{"401 no message", provider.KindOpenAI, 401, `{}`, "provider returned HTTP 401 Unauthorized", true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := stub(t, tc.status, tc.body)
			_, err := call(t, provider.Endpoint{Kind: tc.kind, BaseURL: srv.URL, Model: "m", AuthToken: "sk-secret"}, `[]`, `[]`)
			ce := callError(t, err)
			require.NotNil(t, ce.Status)
			assert.Equal(t, tc.status, *ce.Status)
			assert.Equal(t, tc.detail, ce.Detail)
			assert.Equal(t, tc.retryable, ce.Retryable)
			if tc.jsonBody {
				assert.JSONEq(t, tc.body, string(ce.Body))
			} else {
				assert.Nil(t, ce.Body)
			}
			assert.NotContains(t, err.Error(), "sk-secret")
		})
	}
}

func TestInvalidSuccessBodies(t *testing.T) {
	cases := []struct {
		name, kind, body string
		jsonBody         bool
	}{
		{"anthropic non-JSON", provider.KindAnthropic, `not json`, false},
		{"openai non-JSON", provider.KindOpenAI, `{"choices":`, false},
		{"anthropic no content", provider.KindAnthropic, `{"type":"message","role":"assistant"}`, true},
		{"anthropic null content", provider.KindAnthropic, `{"content":null}`, true},
		{"openai no choices", provider.KindOpenAI, `{"choices":[]}`, true},
		{"openai not an object", provider.KindOpenAI, `[1,2]`, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := stub(t, 200, tc.body)
			_, err := call(t, provider.Endpoint{Kind: tc.kind, BaseURL: srv.URL, Model: "m"}, `[]`, `[]`)
			ce := callError(t, err)
			require.NotNil(t, ce.Status)
			assert.Equal(t, 200, *ce.Status)
			assert.False(t, ce.Retryable)
			assert.NotEmpty(t, ce.Detail)
			if tc.jsonBody {
				assert.JSONEq(t, tc.body, string(ce.Body))
			} else {
				assert.Nil(t, ce.Body)
			}
		})
	}
}

func TestTransportFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens here any more

	_, err = call(t, provider.Endpoint{Kind: provider.KindAnthropic, BaseURL: "http://" + addr, Model: "m", AuthToken: "sk-secret"}, `[]`, `[]`)
	ce := callError(t, err)
	assert.Nil(t, ce.Status)
	assert.True(t, ce.Retryable)
	assert.Nil(t, ce.Body)
	assert.Equal(t, "provider request failed: could not connect to the provider: connection refused", ce.Detail)
	assert.NotContains(t, ce.Detail, "127.0.0.1", "addresses are kept out of persisted detail")
}

// A name that does not resolve: the detail says so without the resolver's
// address that net.DNSError carries.
func TestTransportFailureUnresolvable(t *testing.T) {
	_, err := call(t, provider.Endpoint{Kind: provider.KindOpenAI, BaseURL: "http://provider.invalid", Model: "m"}, `[]`, `[]`)
	ce := callError(t, err)
	assert.True(t, ce.Retryable)
	var dns *net.DNSError
	require.ErrorAs(t, err, &dns, "the cause stays available to the server")
	assert.Contains(t, ce.Detail, "could not resolve the provider's host")
	assert.NotContains(t, ce.Detail, ":53")
	assert.NotContains(t, ce.Detail, "provider.invalid")
}

// slowServer never answers on its own; it reports each request's arrival.
func slowServer(t *testing.T) (*httptest.Server, <-chan struct{}) {
	t.Helper()
	arrived := make(chan struct{}, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Reading the body to EOF is what lets net/http notice the client
		// hanging up and cancel r.Context().
		_, _ = io.Copy(io.Discard, r.Body)
		arrived <- struct{}{}
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	return srv, arrived
}

func TestContextDeadline(t *testing.T) {
	srv, _ := slowServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	c := &provider.Client{}
	start := time.Now()
	_, err := c.Call(ctx, provider.Endpoint{Kind: provider.KindOpenAI, BaseURL: srv.URL, Model: "m"}, json.RawMessage(`[]`), nil)
	ce := callError(t, err)
	assert.Less(t, time.Since(start), 5*time.Second)
	assert.True(t, errors.Is(err, context.DeadlineExceeded), "got %v", err)
	assert.Nil(t, ce.Status)
	assert.True(t, ce.Retryable)
}

func TestContextCancelMidRequest(t *testing.T) {
	srv, arrived := slowServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := (&provider.Client{}).Call(ctx, provider.Endpoint{Kind: provider.KindAnthropic, BaseURL: srv.URL, Model: "m"}, json.RawMessage(`[]`), nil)
		done <- err
	}()
	<-arrived
	cancel()
	err := <-done
	callError(t, err)
	assert.True(t, errors.Is(err, context.Canceled), "got %v", err)
}

func TestHTTPClientTimeoutIsRetryable(t *testing.T) {
	srv, _ := slowServer(t)
	c := &provider.Client{HTTP: &http.Client{Timeout: 100 * time.Millisecond}}
	_, err := c.Call(context.Background(), provider.Endpoint{Kind: provider.KindAnthropic, BaseURL: srv.URL, Model: "m"}, json.RawMessage(`[]`), nil)
	ce := callError(t, err)
	assert.Nil(t, ce.Status)
	assert.True(t, ce.Retryable)
	assert.Contains(t, ce.Detail, "timed out")
}

func TestRejectsBadInput(t *testing.T) {
	srv, got := stub(t, 200, `{"content":[]}`)
	cases := []struct {
		name     string
		ep       provider.Endpoint
		messages string
		tools    string
	}{
		{"unknown kind", provider.Endpoint{Kind: "gemini", BaseURL: srv.URL}, `[]`, `[]`},
		{"messages not JSON", provider.Endpoint{Kind: provider.KindAnthropic, BaseURL: srv.URL}, `[`, `[]`},
		{"messages not array", provider.Endpoint{Kind: provider.KindAnthropic, BaseURL: srv.URL}, `{}`, `[]`},
		{"tool not object", provider.Endpoint{Kind: provider.KindOpenAI, BaseURL: srv.URL}, `[]`, `["x"]`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := call(t, tc.ep, tc.messages, tc.tools)
			ce := callError(t, err)
			assert.Nil(t, ce.Status)
			assert.False(t, ce.Retryable)
		})
	}
	assert.Empty(t, got, "no request may be sent for bad input")
}

func TestDefaultBaseURL(t *testing.T) {
	assert.Equal(t, "https://api.anthropic.com", provider.DefaultBaseURL(provider.KindAnthropic))
	assert.Equal(t, "https://api.openai.com", provider.DefaultBaseURL(provider.KindOpenAI))
	assert.Empty(t, provider.DefaultBaseURL("other"))
}

// A provider endpoint that redirects to another host must not hand that host
// the API key: the call stops at the 3xx, which is a provider error.
func TestRedirectIsNotFollowed(t *testing.T) {
	for _, kind := range []string{provider.KindAnthropic, provider.KindOpenAI} {
		for _, status := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
			t.Run(kind+"/"+http.StatusText(status), func(t *testing.T) {
				// Another host: "localhost" where the redirecting server is 127.0.0.1.
				other, got := stub(t, 200, `{}`)
				target := strings.Replace(other.URL, "127.0.0.1", "localhost", 1)
				redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					http.Redirect(w, r, target+r.URL.Path, status)
				}))
				t.Cleanup(redirector.Close)

				// A caller-supplied client that would follow redirects by
				// default must not either.
				c := &provider.Client{HTTP: &http.Client{Timeout: 10 * time.Second}}
				_, err := c.Call(context.Background(), provider.Endpoint{Kind: kind, BaseURL: redirector.URL, Model: "m", AuthToken: "sk-secret"},
					json.RawMessage(`[]`), json.RawMessage(`[]`))
				ce := callError(t, err)
				require.NotNil(t, ce.Status)
				assert.Equal(t, status, *ce.Status)
				assert.False(t, ce.Retryable)
				assert.Contains(t, ce.Detail, "redirect")
				assert.NotContains(t, ce.Detail, "localhost", "the Location is not repeated")
				select {
				case req := <-got:
					t.Fatalf("the other host got a request with x-api-key %q, authorization %q", req.Header.Get("x-api-key"), req.Header.Get("Authorization"))
				default:
				}
			})
		}
	}
}

func TestTooLongPerKind(t *testing.T) {
	st := func(n int) *int { return &n }
	anth := &provider.CallError{Status: st(400), Body: json.RawMessage(`{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}`)}
	oa := &provider.CallError{Status: st(400), Body: json.RawMessage(`{"error":{"message":"This model's maximum context length is 128000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`)}
	other := &provider.CallError{Status: st(400), Body: json.RawMessage(`{"type":"error","error":{"type":"invalid_request_error","message":"messages: roles must alternate"}}`)}
	assert.True(t, provider.TooLong(provider.KindAnthropic, anth))
	assert.True(t, provider.TooLong(provider.KindOpenAI, oa))
	assert.False(t, provider.TooLong(provider.KindOpenAI, anth), "each kind's own answer")
	assert.False(t, provider.TooLong(provider.KindAnthropic, oa))
	assert.False(t, provider.TooLong(provider.KindAnthropic, other))
	assert.True(t, provider.TooLong(provider.KindAnthropic, &provider.CallError{Status: st(413)}))
	assert.False(t, provider.TooLong(provider.KindAnthropic, &provider.CallError{Detail: "transport"}))
	assert.Equal(t, 12, provider.InputTokens(provider.KindAnthropic, json.RawMessage(`{"usage":{"input_tokens":10,"cache_read_input_tokens":2}}`)))
	assert.Equal(t, 7, provider.InputTokens(provider.KindOpenAI, json.RawMessage(`{"usage":{"prompt_tokens":7}}`)))
}
