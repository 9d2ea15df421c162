// Package fakeprovider is a scripted, in-process LLM provider for tests and
// benchmarks. One server answers both wire formats:
//
//	POST {URL}[/{lane}]/v1/messages          Anthropic Messages
//	POST {URL}[/{lane}]/v1/chat/completions  OpenAI Chat Completions
//
// Replies come from a FIFO queue per lane (the optional path prefix, so one
// server can play a failing primary and a working fallback); when a lane's
// queue is empty its responder runs, and without a responder the fake echoes
// "echo: <last user text>" with no latency. Every request is recorded.
package fakeprovider

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	anthropicSuffix = "/v1/messages"
	openAISuffix    = "/v1/chat/completions"
	// startedBuffer bounds the Started channel; sends never block, so a
	// test that ignores it loses nothing but notifications.
	startedBuffer = 1024
)

// Server is the fake provider. Its methods are safe for concurrent use.
type Server struct {
	ts *httptest.Server

	mu        sync.Mutex
	lanes     map[string]*laneState
	requests  []Recorded
	served    time.Duration
	release   chan struct{} // closed by Release; replaced each time
	onRequest func(Recorded)

	started   chan Recorded
	ended     chan StreamEnd
	closing   chan struct{}
	closeOnce sync.Once

	strict         bool
	strictRefusals int
	thinking       issuedThinking

	cache cacheState
}

type laneState struct {
	queue     []Reply
	responder func(Recorded) Reply
	// window, when set, is the lane's context window in tokens (as
	// InputTokens counts them); longer requests are refused as the
	// provider would.
	window   int
	refusals int
}

// NewHandler returns a Server that is not listening: serve it with any
// http.Server (URL is then ""). Close still releases hung requests.
func NewHandler() *Server {
	return &Server{
		lanes:   map[string]*laneState{},
		release: make(chan struct{}),
		started: make(chan Recorded, startedBuffer),
		ended:   make(chan StreamEnd, startedBuffer),
		closing: make(chan struct{}),
	}
}

// Start serves a new fake on a loopback port.
func Start() *Server {
	s := NewHandler()
	s.ts = httptest.NewServer(s)
	return s
}

// New starts a fake that is closed when t's test ends.
func New(t testing.TB) *Server {
	t.Helper()
	s := Start()
	t.Cleanup(s.Close)
	return s
}

// URL is the base URL to configure as a provider's base_url.
func (s *Server) URL() string {
	if s.ts == nil {
		return ""
	}
	return s.ts.URL
}

// Close releases hung requests, then stops the listener (waiting for
// in-flight handlers). Safe to call more than once.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		close(s.closing)
		if s.ts != nil {
			s.ts.Close()
		}
	})
}

// Lane is the script for one path prefix.
type Lane struct {
	s    *Server
	name string
}

// Lane returns the lane served under {URL}/{name}; "" is the base URL.
func (s *Server) Lane(name string) Lane {
	return Lane{s: s, name: strings.Trim(name, "/")}
}

// URL is the base URL that routes to this lane.
func (l Lane) URL() string {
	if l.name == "" {
		return l.s.URL()
	}
	return l.s.URL() + "/" + l.name
}

// Enqueue appends replies to the lane's FIFO queue.
func (l Lane) Enqueue(replies ...Reply) {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	st := l.s.laneLocked(l.name)
	st.queue = append(st.queue, replies...)
}

// Respond sets the function that answers when the queue is empty (nil
// restores the echo). It runs outside the server's lock and may be called
// concurrently.
func (l Lane) Respond(fn func(Recorded) Reply) {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	l.s.laneLocked(l.name).responder = fn
}

// ContextWindow makes the lane refuse requests longer than tokens (as
// InputTokens counts them; 0 lifts the limit) the way each provider does:
// Anthropic with 400 invalid_request_error "prompt is too long: N tokens >
// M maximum", OpenAI with 400 context_length_exceeded. A refused request
// is recorded but consumes no queued reply.
func (l Lane) ContextWindow(tokens int) {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	l.s.laneLocked(l.name).window = tokens
}

// Refusals is how many requests the lane refused as too long.
func (l Lane) Refusals() int {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	return l.s.laneLocked(l.name).refusals
}

// Pending is the number of queued replies not yet served.
func (l Lane) Pending() int {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	return len(l.s.laneLocked(l.name).queue)
}

// Enqueue appends replies to the base lane's queue.
func (s *Server) Enqueue(replies ...Reply) { s.Lane("").Enqueue(replies...) }

// Respond sets the base lane's responder.
func (s *Server) Respond(fn func(Recorded) Reply) { s.Lane("").Respond(fn) }

// Pending is the base lane's queue length.
func (s *Server) Pending() int { return s.Lane("").Pending() }

func (s *Server) laneLocked(name string) *laneState {
	st, ok := s.lanes[name]
	if !ok {
		st = &laneState{}
		s.lanes[name] = st
	}
	return st
}

// OnRequest sets a hook run synchronously for every request after it is
// recorded and before it is answered (nil removes it).
func (s *Server) OnRequest(fn func(Recorded)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onRequest = fn
}

// Started delivers each request once it is recorded (and, for a hanging
// reply, once Release is guaranteed to unblock it). Buffered; requests
// beyond the buffer are not delivered.
func (s *Server) Started() <-chan Recorded { return s.started }

// StreamEnds delivers how each streamed answer ended, as it ends.
// Buffered like Started.
func (s *Server) StreamEnds() <-chan StreamEnd { return s.ended }

// StreamEnd is how one streamed answer ended.
type StreamEnd struct {
	Seq int // the request's Recorded.Seq
	// Pieces is how many pieces of the answer were sent.
	Pieces int
	// Whole: the answer was sent to its end.
	Whole bool
	// ClientGone: the client closed the stream before its end.
	ClientGone bool
	// At is when the fake saw the stream end.
	At time.Time
}

// Release unblocks every request that has hung so far.
func (s *Server) Release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.release)
	s.release = make(chan struct{})
}

// Requests returns a copy of every request received, in arrival order.
func (s *Server) Requests() []Recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Recorded(nil), s.requests...)
}

// RequestCount is the number of requests received.
func (s *Server) RequestCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.requests)
}

// ServedTime is the total wall time spent inside the handler, delays and
// hangs included, so a benchmark can subtract provider time.
func (s *Server) ServedTime() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.served
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	defer func() {
		d := time.Since(start)
		s.mu.Lock()
		s.served += d
		s.mu.Unlock()
	}()

	format, lane, ok := route(r.URL.Path)
	if !ok || r.Method != http.MethodPost {
		writeJSON(w, http.StatusNotFound, map[string]any{"error": map[string]any{
			"type": "not_found_error", "message": fmt.Sprintf("fakeprovider: no route for %s %s", r.Method, r.URL.Path),
		}})
		return
	}
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		return // the client went away mid-body
	}
	rec := Recorded{Format: format, Lane: lane, Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), RawBody: raw, Received: start}
	validBody := json.Unmarshal(raw, &rec.Body) == nil && rec.Body != nil

	s.mu.Lock()
	rec.Seq = len(s.requests) + 1
	s.requests = append(s.requests, rec)
	release := s.release // taken before Started fires, so Release after Started always frees it
	hook := s.onRequest
	var reply Reply
	var responder func(Recorded) Reply
	tooLong := 0 // the window a too-long request passed
	var invalid error
	if validBody && s.strict {
		if invalid = ConversationError(rec); invalid == nil {
			invalid = s.settingsError(rec)
		}
		if invalid != nil {
			s.strictRefusals++
		}
	}
	if validBody && invalid == nil {
		st := s.laneLocked(lane)
		if st.window > 0 && InputTokens(raw) > st.window {
			tooLong = st.window
			st.refusals++
		} else if rec.Cache, invalid = s.cache.bill(rec); invalid != nil {
			// Refused for its cache markers: nothing served.
		} else if len(st.queue) > 0 {
			reply, st.queue = st.queue[0], st.queue[1:]
		} else {
			responder = st.responder
		}
	}
	if rec.Cache != nil {
		s.requests[len(s.requests)-1].Cache = rec.Cache
	}
	s.mu.Unlock()

	select {
	case s.started <- rec:
	default:
	}
	if hook != nil {
		hook(rec)
	}
	if !validBody {
		writeError(w, format, http.StatusBadRequest, "fakeprovider: request body is not a JSON object")
		return
	}
	if invalid != nil {
		writeError(w, format, http.StatusBadRequest, invalid.Error())
		return
	}
	if tooLong > 0 {
		writeTooLong(w, format, InputTokens(raw), tooLong)
		return
	}
	if responder != nil {
		reply = responder(rec)
	}
	if !s.wait(r.Context(), reply, release) {
		if r.Context().Err() == nil {
			writeError(w, format, http.StatusServiceUnavailable, "fakeprovider: server closed")
		}
		return
	}
	if rec.Stream() && reply.RawBody == nil && reply.Status < 400 {
		s.stream(r.Context(), w, rec, reply, release)
		return
	}
	s.write(w, rec, reply)
}

// wait applies Delay and Hang; false means the reply must not be sent.
func (s *Server) wait(ctx context.Context, reply Reply, release <-chan struct{}) bool {
	if reply.Delay > 0 {
		t := time.NewTimer(reply.Delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return false
		case <-s.closing:
			return false
		}
	}
	if reply.Hang {
		select {
		case <-release:
		case <-ctx.Done():
			return false
		case <-s.closing:
			return false
		}
	}
	return true
}

func route(path string) (Format, string, bool) {
	var format Format
	var prefix string
	switch {
	case strings.HasSuffix(path, anthropicSuffix):
		format, prefix = Anthropic, strings.TrimSuffix(path, anthropicSuffix)
	case strings.HasSuffix(path, openAISuffix):
		format, prefix = OpenAI, strings.TrimSuffix(path, openAISuffix)
	default:
		return "", "", false
	}
	return format, strings.Trim(prefix, "/"), true
}

func (s *Server) write(w http.ResponseWriter, rec Recorded, reply Reply) {
	switch {
	case reply.RawBody != nil:
		status := reply.Status
		if status == 0 {
			status = http.StatusOK
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write(reply.RawBody)
		return
	case reply.Status >= 400:
		writeError(w, rec.Format, reply.Status, reply.ErrorMessage)
		return
	case reply.isEcho():
		reply.Text = "echo: " + rec.LastUserText()
	}
	var body map[string]any
	var err error
	if rec.Format == OpenAI {
		body, err = openAIBody(rec, reply)
	} else {
		body, err = s.anthropicBody(rec, reply)
	}
	if err != nil {
		writeError(w, rec.Format, http.StatusInternalServerError, "fakeprovider: "+err.Error())
		return
	}
	status := reply.Status
	if status == 0 {
		status = http.StatusOK
	}
	writeJSON(w, status, body)
}

func writeJSON(w http.ResponseWriter, status int, body any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(body); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}
