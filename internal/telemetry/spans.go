package telemetry

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// Span names, attribute keys and link kinds of BAE's telemetry contract.
const (
	SpanSession         = "bae.session"
	SpanTurn            = "bae.turn"
	SpanProviderAttempt = "bae.provider.attempt"
	SpanToolDispatch    = "bae.tool.dispatch"
	SpanMCPCall         = "bae.mcp.call"
	SpanSandboxExec     = "bae.sandbox.exec"
	SpanSubagent        = "bae.subagent"
	// SpanApprovalWait spans a held tool call's wait, request to decision.
	SpanApprovalWait = "bae.approval.wait"

	AttrSessionID           = "bae.session.id"
	AttrProfileID           = "bae.profile.id"
	AttrClientKeyID         = "bae.client_key.id"
	AttrTurnOutcome         = "bae.turn.outcome"
	AttrTurnResumed         = "bae.turn.resumed"
	AttrProviderName        = "bae.provider.name"
	AttrProviderKind        = "bae.provider.kind"
	AttrProviderModel       = "bae.provider.model"
	AttrProviderAttempt     = "bae.provider.attempt"
	AttrProviderAttemptKind = "bae.provider.attempt_kind"
	AttrToolName            = "bae.tool.name"
	AttrToolDispatch        = "bae.tool.dispatch"
	AttrToolIsError         = "bae.tool.is_error"
	AttrToolInputBytes      = "bae.tool.input.bytes"
	AttrToolOutputBytes     = "bae.tool.output.bytes"
	AttrMCPServer           = "bae.mcp.server"
	AttrSandboxExitCode     = "bae.sandbox.exit_code"
	AttrSubagentID          = "bae.subagent.id"
	AttrSubagentOutcome     = "bae.subagent.outcome"
	AttrApprovalDecision    = "bae.approval.decision"
	AttrHTTPMethod          = "http.request.method"
	AttrHTTPRoute           = "http.route"
	AttrURLPath             = "url.path"
	AttrHTTPStatus          = "http.response.status_code"

	SubagentCompleted = "completed"
	SubagentFailed    = "failed"
	SubagentCancelled = "cancelled"

	AttrLinkKind = "bae.link.kind"
	LinkSession  = "session"
	LinkResume   = "resume"
	LinkSubagent = "subagent"
)

// A span ref names a span as data, so that one process can start children
// of a span another process (or a later restart) ends: the span's own W3C
// traceparent, then "/" and its parent's span id. bae.session and bae.turn
// are carried this way (in the sessions row and the workflow's inputs) and
// emitted once, when they end, with the id their children already point to.
//
//	00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01/00f067aa0ba902b7

// parseRef reads a ref; ok is false for "" or anything malformed.
func parseRef(ref string) (self trace.SpanContext, parent trace.SpanID, ok bool) {
	tp, par, _ := strings.Cut(ref, "/")
	parts := strings.Split(tp, "-")
	if len(parts) != 4 || parts[0] != "00" || len(parts[3]) != 2 {
		return trace.SpanContext{}, trace.SpanID{}, false
	}
	tid, err := trace.TraceIDFromHex(parts[1])
	if err != nil {
		return trace.SpanContext{}, trace.SpanID{}, false
	}
	sid, err := trace.SpanIDFromHex(parts[2])
	if err != nil {
		return trace.SpanContext{}, trace.SpanID{}, false
	}
	flags, err := hex.DecodeString(parts[3])
	if err != nil {
		return trace.SpanContext{}, trace.SpanID{}, false
	}
	if par != "" {
		if parent, err = trace.SpanIDFromHex(par); err != nil {
			return trace.SpanContext{}, trace.SpanID{}, false
		}
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.TraceFlags(flags[0]), Remote: true})
	return sc, parent, sc.IsValid()
}

func formatRef(sc trace.SpanContext, parent trace.SpanID) string {
	s := fmt.Sprintf("00-%s-%s-%s", sc.TraceID(), sc.SpanID(), sc.TraceFlags())
	if parent.IsValid() {
		s += "/" + parent.String()
	}
	return s
}

// RefOf is the ref of a live span (no parent part), for links; "" when the
// span is not recording or has no valid context.
func RefOf(span trace.Span) string {
	sc := span.SpanContext()
	if !sc.IsValid() || !span.IsRecording() {
		return ""
	}
	return formatRef(sc, trace.SpanID{})
}

// presetKey carries the span id IDGenerator hands out next.
type presetKey struct{}

// idGenerator is the SDK's random id generation, except that a span started
// with a preset id in its context gets that id.
type idGenerator struct{}

// IDGenerator returns the generator the server's tracer provider uses. A
// provider handed to FromProviders needs it too
// (sdktrace.WithIDGenerator(telemetry.IDGenerator())), or bae.session and
// bae.turn get fresh ids and their children point at spans that never
// arrive.
func IDGenerator() sdktrace.IDGenerator { return idGenerator{} }

func (idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	var tid trace.TraceID
	for !tid.IsValid() {
		_, _ = rand.Read(tid[:])
	}
	return tid, idGenerator{}.NewSpanID(ctx, tid)
}

func (idGenerator) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	if id, ok := ctx.Value(presetKey{}).(trace.SpanID); ok && id.IsValid() {
		return id
	}
	var sid trace.SpanID
	for !sid.IsValid() {
		_, _ = rand.Read(sid[:])
	}
	return sid
}

func newSpanID() trace.SpanID { return idGenerator{}.NewSpanID(context.Background(), trace.TraceID{}) }

// Spans starts and emits the bae.* spans on the server's tracer (scope
// baesrv). The zero value and a nil *Spans record nothing, so callers
// never check whether tracing is on.
type Spans struct {
	tracer trace.Tracer
}

// NewSpans builds the span helper over tp (nil: nothing is recorded).
func NewSpans(tp trace.TracerProvider) *Spans {
	if tp == nil {
		return &Spans{}
	}
	return &Spans{tracer: tp.Tracer(ScopeName)}
}

func (s *Spans) on() bool { return s != nil && s.tracer != nil }

func (s *Spans) t() trace.Tracer {
	if s.on() {
		return s.tracer
	}
	return tracenoop.NewTracerProvider().Tracer(ScopeName)
}

// ChildRef allocates the identity of a span that will be a child of ctx's
// current span and will be emitted later (Emit). "" when ctx carries no
// span (tracing off, or an untraced request): nothing will be emitted.
func (s *Spans) ChildRef(ctx context.Context) string {
	parent := trace.SpanContextFromContext(ctx)
	if !s.on() || !parent.IsValid() {
		return ""
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: parent.TraceID(), SpanID: newSpanID(), TraceFlags: parent.TraceFlags()})
	return formatRef(sc, parent.SpanID())
}

// Record describes a span emitted after the fact.
type Record struct {
	Name       string
	Kind       trace.SpanKind
	Start, End time.Time
	Attrs      []attribute.KeyValue
	Links      []trace.Link
	// Error, when set, is the span's ERROR status description.
	Error string
}

// Emit records the span ref names (a ChildRef), under its parent and with
// the id its children were given. A malformed or empty ref emits nothing.
func (s *Spans) Emit(ref string, r Record) {
	self, parent, ok := parseRef(ref)
	if !s.on() || !ok || !parent.IsValid() {
		return
	}
	ctx := context.WithValue(context.Background(), presetKey{}, self.SpanID())
	ctx = trace.ContextWithRemoteSpanContext(ctx, self.WithSpanID(parent))
	_, span := s.tracer.Start(ctx, r.Name, trace.WithTimestamp(r.Start), trace.WithSpanKind(r.Kind), trace.WithAttributes(r.Attrs...), trace.WithLinks(r.Links...))
	if r.Error != "" {
		span.SetStatus(codes.Error, r.Error)
	}
	span.End(trace.WithTimestamp(r.End))
}

// Under returns ctx with the span ref names as the current (remote) span,
// so spans started from it are its children. An empty or malformed ref
// leaves ctx as it is.
func Under(ctx context.Context, ref string) context.Context {
	self, _, ok := parseRef(ref)
	if !ok {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, self)
}

// StartUnder starts a child of the span ref names. With an empty ref (a
// turn that carries no trace) the span records nothing.
func (s *Spans) StartUnder(ctx context.Context, ref, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if _, _, ok := parseRef(ref); !ok || !s.on() {
		return ctx, trace.SpanFromContext(context.Background())
	}
	return s.tracer.Start(Under(ctx, ref), name, opts...)
}

// Start starts a span under ctx's current span (a no-op span when ctx has
// none recording and tracing is off).
func (s *Spans) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	return s.t().Start(ctx, name, opts...)
}

// Link is a link to the span ref names with the contract's one link
// attribute; ok is false when ref names none.
func Link(ref, kind string) (trace.Link, bool) {
	self, _, ok := parseRef(ref)
	if !ok {
		return trace.Link{}, false
	}
	return trace.Link{SpanContext: self, Attributes: []attribute.KeyValue{attribute.String(AttrLinkKind, kind)}}, true
}

// Fail sets span's status to ERROR with a fixed, payload-free description.
func Fail(span trace.Span, desc string) { span.SetStatus(codes.Error, desc) }

// Enabled reports whether spans are recorded at all.
func (s *Spans) Enabled() bool { return s.on() }
