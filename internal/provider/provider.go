// Package provider performs one outbound LLM call.
//
// Callers always speak the canonical shape (Anthropic Messages API: content
// arrays of text/tool_use/tool_result blocks, tools as {name, description,
// input_schema}). This package is the only place that knows a second wire
// format exists: for OpenAI-kind endpoints it translates the request to Chat
// Completions and the response back to canonical blocks. The untranslated
// wire response is returned alongside, because provider.response events log
// what the provider actually said.
package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// Provider kinds: a wire format and auth header convention, not a vendor.
const (
	KindAnthropic = "anthropic"
	KindOpenAI    = "openai"
)

// AnthropicVersion is the anthropic-version header sent on every
// Anthropic-kind request.
const AnthropicVersion = "2023-06-01"

// DefaultMaxTokens is used when an Endpoint leaves MaxTokens unset; the
// Messages API rejects requests without max_tokens.
const DefaultMaxTokens = 4096

// maxResponseBytes bounds how much of a response body is read, so a
// misbehaving endpoint cannot exhaust worker memory.
const maxResponseBytes = 64 << 20

// DefaultBaseURL is the kind's own SaaS endpoint (bare host; Call appends the
// versioned path), or "" for an unknown kind: the one list of kinds, which
// the config file is validated against.
func DefaultBaseURL(kind string) string {
	switch kind {
	case KindAnthropic:
		return "https://api.anthropic.com"
	case KindOpenAI:
		return "https://api.openai.com"
	}
	return ""
}

// Endpoint is one resolved provider entry, ready to call.
type Endpoint struct {
	// Kind is KindAnthropic or KindOpenAI.
	Kind string
	// BaseURL is the effective base URL; empty means DefaultBaseURL(Kind).
	BaseURL   string
	Model     string
	MaxTokens int
	// AuthToken is the already-resolved secret. It is only ever placed in
	// a request header, never in an error or a log line.
	AuthToken string
	// PromptCache asks for provider-side prompt caching (see cache.go):
	// cache_control breakpoints (anthropic) or prompt_cache_key (openai).
	PromptCache bool
	// CacheKey is the openai prompt_cache_key sent with PromptCache: the
	// session, so its requests share a cache. "" sends none.
	CacheKey string
	// Settings are the model settings (already validated); the zero value
	// sends nothing.
	Settings Settings
}

// Canonical is the provider's answer in the canonical shape.
type Canonical struct {
	// Content is a JSON array of canonical blocks (never null).
	Content json.RawMessage
	// StopReason is canonical: "end_turn", "tool_use", or whatever else
	// the provider reported.
	StopReason string
}

// Response is one successful call.
type Response struct {
	// Raw is the untranslated wire body, byte for byte.
	Raw       json.RawMessage
	Canonical Canonical
	Status    int
}

// CallError is a failed call, carrying what a provider.response failure
// event records and what the fallback walk needs to decide on retries.
type CallError struct {
	// Status is the HTTP status, or nil when no response was received.
	Status *int
	// Detail is a human-readable, secret-free reason.
	Detail string
	// Body is the raw error body when it was JSON, else nil.
	Body json.RawMessage
	// Retryable is true only for transport failures, timeouts, 429 and 5xx.
	Retryable bool
	// Err is the underlying cause, if any (e.g. context.DeadlineExceeded).
	Err error
}

func (e *CallError) Error() string {
	if e.Status != nil {
		return fmt.Sprintf("provider call failed (HTTP %d): %s", *e.Status, e.Detail)
	}
	return "provider call failed: " + e.Detail
}

func (e *CallError) Unwrap() error { return e.Err }

// idleConnsPerHost is how many idle connections to one provider host
// NewHTTPClient keeps: concurrent turns call the same host, and
// http.DefaultTransport keeps two, closing the others after each call (over
// HTTP/1.1 the next calls then open new ones; HTTP/2 shares one anyway).
const idleConnsPerHost = 64

// NewHTTPClient is the HTTP client for provider calls: the default
// transport, keeping idleConnsPerHost idle connections per host.
func NewHTTPClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = idleConnsPerHost
	return &http.Client{Transport: tr}
}

// Client performs provider calls. The zero value uses http.DefaultClient.
type Client struct {
	HTTP *http.Client
	// Log receives debug lines about calls (never the token); nil discards.
	Log *slog.Logger
}

// wire is one provider wire format.
type wire interface {
	path() string
	body(ep Endpoint, messages []any, tools []map[string]any) any
	authorize(h http.Header, token string)
	canonical(raw []byte, log *slog.Logger) (Canonical, error)
}

// Call sends canonical messages and tools to ep and returns the raw and
// canonical response. Every failure is a *CallError.
func (c *Client) Call(ctx context.Context, ep Endpoint, messages json.RawMessage, tools json.RawMessage) (*Response, error) {
	return c.call(ctx, ep, messages, tools, nil)
}

// CallStreaming is Call with the provider's streaming mode: the answer
// arrives as a stream, each piece goes to sink as it is read, and the
// stream is assembled into the Response a non-streaming Call returns (Raw
// is the non-streaming body the stream stands for). A nil sink still
// streams.
func (c *Client) CallStreaming(ctx context.Context, ep Endpoint, messages json.RawMessage, tools json.RawMessage, sink func(Delta)) (*Response, error) {
	if sink == nil {
		sink = func(Delta) {}
	}
	return c.call(ctx, ep, messages, tools, sink)
}

func (c *Client) call(ctx context.Context, ep Endpoint, messages json.RawMessage, tools json.RawMessage, sink func(Delta)) (*Response, error) {
	var w wire
	switch ep.Kind {
	case KindAnthropic:
		w = anthropicWire{}
	case KindOpenAI:
		w = openAIWire{}
	default:
		return nil, &CallError{Detail: fmt.Sprintf("unsupported provider kind %q", ep.Kind)}
	}
	ts, err := parseTools(tools)
	if err != nil {
		return nil, &CallError{Detail: "invalid canonical tools: " + err.Error(), Err: err}
	}
	if ep.MaxTokens <= 0 {
		ep.MaxTokens = DefaultMaxTokens
	}
	anthropicCache := ep.PromptCache && ep.Kind == KindAnthropic
	if anthropicCache {
		markTools(ts)
	}
	var payload []byte
	if raw, ok := cacheable(anthropicCache, messages); ok {
		payload, err = anthropicBody(ep, cacheRaw(raw), ts)
	} else if raw, ok := passThrough(ep.Kind, messages); ok {
		payload, err = anthropicBody(ep, raw, ts)
	} else {
		var msgs []any
		if msgs, err = parseMessages(messages); err != nil {
			return nil, &CallError{Detail: "invalid canonical messages: " + err.Error(), Err: err}
		}
		if anthropicCache {
			cacheDecoded(msgs)
		}
		payload, err = marshalJSON(w.body(ep, msgs, ts))
	}
	if err == nil {
		payload, err = withSettings(ep.Kind, ep.Settings, len(ts) > 0, payload)
	}
	if err != nil {
		return nil, &CallError{Detail: "encode request: " + err.Error(), Err: err}
	}
	if sink != nil {
		payload = streamingBody(ep.Kind, payload)
	}
	base := ep.BaseURL
	if base == "" {
		base = DefaultBaseURL(ep.Kind)
	}
	// stop ends the request early: a stream's end that does not come (see
	// readStream) must not hold the call.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(base, "/")+w.path(), bytes.NewReader(payload))
	if err != nil {
		// url.Parse errors quote the URL, which never holds the token.
		return nil, &CallError{Detail: "build request: " + err.Error(), Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if sink != nil {
		req.Header.Set("Accept", "text/event-stream, application/json")
	}
	for k, v := range ep.Settings.Headers {
		req.Header.Set(k, v)
	}
	w.authorize(req.Header, ep.AuthToken)

	log := c.logger()
	start := time.Now()
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return nil, transportError(ctx, err)
	}
	defer resp.Body.Close()
	if sink != nil && isEventStream(resp) && resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		return c.readStream(ctx, ep, resp, sink, start, stop)
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return nil, transportError(ctx, err)
	}
	status := resp.StatusCode
	log.DebugContext(ctx, "provider call", "kind", ep.Kind, "model", ep.Model, "status", status, "bytes", len(raw), "elapsed", time.Since(start))
	if len(raw) > maxResponseBytes {
		return nil, &CallError{Status: &status, Detail: fmt.Sprintf("provider response exceeds %d bytes", maxResponseBytes)}
	}
	if status < 200 || status > 299 {
		return nil, statusError(status, raw)
	}
	if !json.Valid(raw) {
		return nil, &CallError{Status: &status, Detail: "provider returned a non-JSON body"}
	}
	canon, err := w.canonical(raw, log)
	if err != nil {
		return nil, &CallError{Status: &status, Detail: err.Error(), Body: json.RawMessage(raw), Err: err}
	}
	return &Response{Raw: json.RawMessage(raw), Canonical: canon, Status: status}, nil
}

// httpClient is c.HTTP (or the default client) that never follows a
// redirect: Go drops only Authorization and Cookie when a redirect leaves the
// host, so the x-api-key header would go along to whatever host a provider
// endpoint (or anyone who can answer for it) names. A 3xx is returned as the
// response and fails the call like any other non-2xx status.
func (c *Client) httpClient() *http.Client {
	hc := http.Client{}
	if c.HTTP != nil {
		hc = *c.HTTP
	}
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &hc
}

func (c *Client) logger() *slog.Logger {
	if c.Log != nil {
		return c.Log
	}
	return slog.New(slog.DiscardHandler)
}

// transportError describes a failure with no HTTP status. The request URL is
// left out of Detail: it is not secret, but keeping persisted strings free of
// request details is the simplest guarantee nothing sensitive rides along.
func transportError(ctx context.Context, err error) *CallError {
	cause := err
	var ue *url.Error
	if errors.As(err, &ue) {
		cause = ue.Err
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return &CallError{Detail: "provider request aborted: " + ctxErr.Error(), Retryable: true, Err: fmt.Errorf("%w: %w", ctxErr, err)}
	}
	detail := "provider request failed: " + describeNetError(cause)
	var ne interface{ Timeout() bool }
	if errors.As(err, &ne) && ne.Timeout() {
		detail = "provider request timed out: " + describeNetError(cause)
	}
	return &CallError{Detail: detail, Retryable: true, Err: err}
}

// describeNetError says what went wrong without the addresses net errors
// carry (the resolver's, the local and remote sockets'): the detail reaches
// every session participant, and those addresses map the internal network.
func describeNetError(err error) string {
	var dns *net.DNSError
	if errors.As(err, &dns) {
		switch {
		case dns.IsNotFound:
			return "could not resolve the provider's host: no such host"
		case dns.IsTimeout:
			return "could not resolve the provider's host: lookup timed out"
		default:
			return "could not resolve the provider's host"
		}
	}
	var op *net.OpError
	if errors.As(err, &op) {
		var sys *os.SyscallError
		inner := op.Err
		if errors.As(inner, &sys) {
			inner = sys.Err
		}
		what := "connection failed"
		if op.Op == "dial" {
			what = "could not connect to the provider"
		}
		if inner == nil {
			return what
		}
		return what + ": " + inner.Error()
	}
	return err.Error()
}

// statusError builds the failure for a non-2xx response, preferring the
// provider's own error message as the detail.
func statusError(status int, raw []byte) *CallError {
	ce := &CallError{Status: &status, Retryable: status == http.StatusTooManyRequests || status >= 500}
	if json.Valid(raw) {
		ce.Body = json.RawMessage(raw)
		ce.Detail = errorMessage(raw)
	}
	if ce.Detail == "" {
		ce.Detail = fmt.Sprintf("provider returned HTTP %d %s", status, http.StatusText(status))
	}
	if status >= 300 && status < 400 {
		// The Location is left out: it may name an internal host.
		ce.Detail = fmt.Sprintf("provider answered with a redirect (HTTP %d %s), which provider calls do not follow: point base_url at the final address", status, http.StatusText(status))
	}
	return ce
}

// errorMessage finds the human message in the common error body shapes:
// {"error":{"message":…}} (Anthropic and OpenAI), {"error":"…"} and
// {"message":"…"}.
func errorMessage(raw []byte) string {
	var body struct {
		Error   json.RawMessage `json:"error"`
		Message any             `json:"message"`
	}
	if json.Unmarshal(raw, &body) != nil {
		return ""
	}
	var nested struct {
		Message any `json:"message"`
	}
	var s string
	switch {
	case json.Unmarshal(body.Error, &nested) == nil && isNonEmptyString(nested.Message):
		return nested.Message.(string)
	case json.Unmarshal(body.Error, &s) == nil && s != "":
		return s
	case isNonEmptyString(body.Message):
		return body.Message.(string)
	}
	return ""
}

func isNonEmptyString(v any) bool {
	s, ok := v.(string)
	return ok && s != ""
}
