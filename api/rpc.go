package api

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/bae-go/bae-go/api/wire"
	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/internal/sessiontools"
	"github.com/bae-go/bae-go/internal/telemetry"
	"github.com/bae-go/bae-go/store"
)

// RPCError is a JSON-RPC error object.
type RPCError = wire.Error

// NewRPCError builds an *RPCError.
func NewRPCError(code int, format string, args ...any) *RPCError {
	return wire.Errorf(code, format, args...)
}

// ndjson writes newline-delimited JSON-RPC objects, flushing each. The 200
// status goes out with the first object or an explicit open, not before: a
// method that stores something opens the stream only once it is stored, so a
// client that sees the stream open knows its request took effect.
type ndjson struct {
	mu     sync.Mutex
	w      http.ResponseWriter
	err    error
	opened bool
}

// open sends the 200 status and headers now.
func (s *ndjson) open() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.openLocked()
}

func (s *ndjson) openLocked() {
	if s.opened {
		return
	}
	s.opened = true
	s.w.Header().Set("Content-Type", "application/x-ndjson")
	s.w.Header().Set("Cache-Control", "no-store")
	s.w.WriteHeader(http.StatusOK)
	if f, ok := s.w.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *ndjson) write(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.writeRaw(append(b, '\n'))
}

// writeParts writes one line made of parts (newline included), flushing
// only when asked: a replay flushes once per page.
func (s *ndjson) writeParts(flush bool, parts ...[]byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	s.openLocked()
	for _, p := range parts {
		if _, err := s.w.Write(p); err != nil {
			s.err = err
			return err
		}
	}
	if f, ok := s.w.(http.Flusher); ok && flush {
		f.Flush()
	}
	return nil
}

// writeLines writes already encoded lines (newlines included) and sends
// them, under one lock and with one flush.
func (s *ndjson) writeLines(lines [][]byte) error { return s.writeParts(true, lines...) }

// flush sends what was written.
func (s *ndjson) flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f, ok := s.w.(http.Flusher); ok && s.err == nil {
		f.Flush()
	}
}

// writeRaw writes one already encoded line, newline included, and sends it.
func (s *ndjson) writeRaw(b []byte) error { return s.writeParts(true, b) }

type rpcCall struct {
	id       json.RawMessage // nil for a notification
	method   string
	params   json.RawMessage
	sess     store.Session
	clientID string // the acting client key behind the session key
	keyID    string // the session key itself, re-checked by long streams
	out      *ndjson
	r        *http.Request
	log      *slog.Logger // tagged with session_id and rpc_method
	// decl and head were read with the authentication: the acting client's
	// declarations (zero when it has none) and the log's head then.
	decl store.ClientDecl
	head int64
	// approvals: the stream opted in with Bae-Approvals; without it no
	// approval event or notification is written (a BAE client sees
	// nothing new).
	approvals bool
	// sendReads were read with the authentication for a send that may be
	// refused before it is stored (nil when not).
	sendReads *store.SendReads
}

func (c *rpcCall) notify() bool { return c.id == nil }

func (c *rpcCall) result(v any) {
	if c.notify() {
		return
	}
	_ = c.out.write(map[string]any{"jsonrpc": "2.0", "id": c.id, "result": v})
}

func (c *rpcCall) fail(e *RPCError) {
	if c.notify() {
		return
	}
	_ = c.out.write(map[string]any{"jsonrpc": "2.0", "id": c.id, "error": e})
}

// event writes a session.event notification and sends it. It is encoded
// by hand: the payload is copied as stored, not decoded and encoded again.
func (c *rpcCall) event(e store.Event) error { return c.writeEvent(e, true) }

// heldEvent writes a session.event notification without sending it: the
// next flush sends it with what follows (a relay's page, a turn's last
// events with its terminal response), one write instead of one per line.
func (c *rpcCall) heldEvent(e store.Event) error { return c.writeEvent(e, false) }

func (c *rpcCall) writeEvent(e store.Event, flush bool) error {
	if isApprovalEvent(e.Type) && !c.approvals {
		return nil
	}
	b := make([]byte, 0, len(e.Payload)+256)
	b = append(b, `{"jsonrpc":"2.0","method":"session.event","params":`...)
	b = e.AppendJSON(b)
	if err := c.out.writeParts(flush, append(b, "}\n"...)); err != nil {
		return err
	}
	if note, ok := approvalNote(e); ok {
		// The opted-in stream's notification follows the event it shows.
		nb, err := json.Marshal(note)
		if err != nil {
			return err
		}
		return c.out.writeParts(flush, append(nb, '\n'))
	}
	return nil
}

var (
	eventPrefix = []byte(`{"jsonrpc":"2.0","method":"session.event","params":`)
	eventSuffix = []byte("}\n")
)

// encodedEvent writes a session.event notification from an encoded event,
// without a flush (see ndjson.writeParts).
func (c *rpcCall) encodedEvent(e store.EncodedEvent) error {
	if isApprovalEvent(e.Type) && !c.approvals {
		return nil
	}
	parts := make([][]byte, 0, len(e.Parts)+2)
	parts = append(parts, eventPrefix)
	parts = append(parts, e.Parts...)
	return c.out.writeParts(false, append(parts, eventSuffix)...)
}

// resultRaw writes the terminal response with an already encoded result.
func (c *rpcCall) resultRaw(result []byte) {
	if c.notify() {
		return
	}
	b := make([]byte, 0, len(result)+len(c.id)+40)
	b = append(b, `{"id":`...)
	b = append(b, c.id...)
	b = append(b, `,"jsonrpc":"2.0","result":`...)
	b = append(b, result...)
	_ = c.out.writeRaw(append(b, "}\n"...))
}

func envelopeError(out *ndjson, id json.RawMessage, code int, msg string) {
	if id == nil {
		id = json.RawMessage("null")
	}
	_ = out.write(map[string]any{"jsonrpc": "2.0", "id": id, "error": RPCError{Code: code, Message: msg}})
}

// rpc is POST /api/v1/sessions/{id}/rpc. Authentication is the only check
// answered as HTTP (a 401 problem); everything after it is NDJSON.
func (c *clientAPI) rpc(w http.ResponseWriter, r *http.Request) {
	// The body names the method only after the authentication, and most
	// calls are sends: every call reads a send's budgets with the
	// authentication, one round trip for both; one that may be refused as
	// busy (Bae-When-Busy: reject, a header) reads the turn gate too.
	policy, badPolicy := wire.ParseWhenBusy(r.Header.Values(wire.WhenBusyHeader))
	auth, reads, p := c.authSessionReads(r, true, badPolicy == nil && policy == wire.BusyReject)
	if p != nil {
		writeProblem(w, p)
		return
	}
	sess, key := auth.Session, auth.Key
	body, p := c.readBody(w, r)
	if p != nil {
		writeProblem(w, p)
		return
	}
	out := &ndjson{w: w}
	// A method that writes nothing (a notification) still answers 200.
	defer out.open()

	env, bad := wire.ParseEnvelope(body)
	if bad != nil {
		if !bad.Silent {
			envelopeError(out, bad.ID, bad.Code, bad.Message)
		}
		return
	}
	// Every method shares one route, so the request span names the method
	// and the session (a no-op when tracing is off).
	trace.SpanFromContext(r.Context()).SetAttributes(attribute.String("rpc.method", env.Method), attribute.String("bae.session.id", sess.ID))
	if env.Method != methodSendMessage && env.Method != methodSubscribe {
		// sendMessage opens once its message is stored (see ndjson), and
		// subscribe once its starting point is fixed; every other method's
		// stream opens at once, as clients expect.
		out.open()
	}
	call := &rpcCall{id: env.ID, method: env.Method, params: env.Params, sess: sess, clientID: key.ClientKeyID, keyID: key.ID, out: out, r: r,
		decl: auth.Decl, head: auth.Head, approvals: approvalsOn(r), sendReads: reads,
		log: c.Log.With("session_id", sess.ID, "rpc_method", env.Method)}
	c.dispatch(call)
}

// The methods that open their stream themselves.
const (
	methodSendMessage = "session.sendMessage" // once the message is stored
	methodSubscribe   = "session.subscribe"   // once its cursor is fixed
)

func (c *clientAPI) dispatch(call *rpcCall) {
	switch call.method {
	case "session.registerDriver":
		c.registerDriver(call)
	case methodSendMessage:
		c.sendMessage(call)
	case methodSubscribe:
		c.subscribe(call)
	case "session.unsubscribe":
		c.unsubscribe(call)
	case "session.reportLocalSandbox":
		c.reportLocalSandbox(call)
	case "session.reportLocalSubagent":
		c.reportLocalSubagent(call)
	case "session.updateClientTools":
		c.updateClientTools(call)
	case methodInterrupt:
		c.interrupt(call)
	case methodFork:
		c.fork(call)
	case methodRewind:
		c.rewind(call)
	case wire.DecideApprovalMethod:
		c.rpcDecideApproval(call)
	case "session.startRemoteSandbox", "session.stopRemoteSandbox", "session.execRemoteSandbox", "session.cancelSubagent":
		c.sessionTool(call)
	default:
		call.fail(NewRPCError(-32601, "Method not found: %s", call.method))
	}
}

// requireDriver is the -32001 gate, checked before anything else. The
// declarations were read with this request's authentication.
func (c *clientAPI) requireDriver(call *rpcCall) (store.ClientDecl, bool) {
	decl := call.decl
	if !decl.Registered {
		call.fail(NewRPCError(-32001, "call session.registerDriver before %s", call.method))
		return decl, false
	}
	return decl, true
}

// requireOpen is the -32000 state gate. call.sess was read by authSession
// for this very request, so it is not read again; the workflow re-checks
// the state when a turn begins.
func (c *clientAPI) requireOpen(call *rpcCall) bool {
	if call.sess.State != store.StateOpen {
		call.fail(NewRPCError(-32000, "session is %s, not open", call.sess.State))
		return false
	}
	return true
}

func (c *clientAPI) registerDriver(call *rpcCall) {
	ctx := call.r.Context()
	// Registering is the second half of connecting: it waits with the opens.
	release, waited, ok := c.opens.acquire(ctx)
	if !ok {
		call.fail(NewRPCError(-32000, "server_busy: %s", busyDetail))
		return
	}
	defer release()
	if waited {
		// The keys may have been revoked, or the profile deleted, while the
		// registration waited.
		if e := c.guard(call).revoked(ctx); e != nil {
			call.fail(e)
			return
		}
	}
	var events func() []store.NewEvent = func() []store.NewEvent {
		evs := []store.NewEvent{{ClientKeyID: call.clientID, Payload: events.DriverRegister{}}}
		if c.Tools == nil {
			return evs
		}
		profile, err := c.Store.GetProfile(ctx, call.sess.ProfileID)
		if err != nil {
			return evs // a deleted profile surfaces at sendMessage
		}
		if images := c.Tools.SandboxAvailability(ctx, profile); len(images) > 0 {
			evs = append(evs, store.NewEvent{ClientKeyID: call.clientID, Payload: events.SandboxAvailablePayload{Images: images}})
		}
		return evs
	}
	_, err := c.Store.RegisterDriver(ctx, call.sess.ID, call.clientID, events)
	var notOpen *store.NotOpenError
	switch {
	case errors.As(err, &notOpen):
		call.fail(NewRPCError(-32000, "session is %s, not open", notOpen.State))
	case err != nil:
		call.log.Error("register driver", "err", err)
		call.fail(NewRPCError(-32603, "Internal error"))
	default:
		// A driver joins the session: its request links to the session's
		// span rather than nesting under it.
		if l, ok := telemetry.Link(call.sess.Span, telemetry.LinkSession); ok {
			trace.SpanFromContext(ctx).AddLink(l)
		}
		call.result(map[string]any{"registered": true})
	}
}

func (c *clientAPI) sessionTool(call *rpcCall) {
	if _, ok := c.requireDriver(call); !ok {
		return
	}
	if c.Tools == nil {
		call.fail(NewRPCError(-32603, "Internal error: %s is not available on this server", call.method))
		return
	}
	res, err := c.Tools.Call(call.r.Context(), call.sess, call.clientID, call.method, call.params)
	var refused *sessiontools.RefusedError
	switch {
	case errors.As(err, &refused):
		call.fail(toolRefusal(refused))
	case err != nil:
		call.log.Error("session tool call", "err", err)
		call.fail(NewRPCError(-32603, "Internal error"))
	default:
		call.result(res)
	}
}
