package sdk

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Hooks are optional callbacks at each point of the Send loop. A non-nil
// error from any hook aborts Send with a *HookError. Per iteration they run
// in this order: BeforeSend, OnEvent (per live notification), AfterReceive,
// then for each of this client's tool calls BeforeToolCall, the handler,
// AfterToolCall.
type Hooks struct {
	// BeforeSend sees the outgoing user turn; changes are sent.
	BeforeSend func(ctx context.Context, m *Message) error
	// AfterReceive sees the complete assistant turn, including tool_use
	// blocks the server dispatched itself.
	AfterReceive func(ctx context.Context, m *Message) error
	// BeforeToolCall sees a tool_use this client is about to run; changes to
	// its Input reach the handler.
	BeforeToolCall func(ctx context.Context, call *ToolUse) error
	// AfterToolCall sees the result about to be sent back; changes are sent.
	AfterToolCall func(ctx context.Context, call ToolUse, result *ToolResult) error
	// OnEvent sees each live session.event notification on this Session's
	// /rpc calls (the server does not echo this client's own
	// client.message.send and client tool.result events).
	OnEvent func(ctx context.Context, e Event) error
	// OnDelta, when set, asks the server for live deltas (the Bae-Deltas
	// extension) on this Session's sends and sees each one as the answer
	// is written. Deltas are provisional: a Delta of type DeltaSuperseded
	// voids the iteration's deltas so far, and the turn's result is the
	// answer. A server without the extension sends none.
	OnDelta func(ctx context.Context, d Delta) error
}

// Tracer scope and span names shared with the other BAE SDKs.
const (
	tracerName        = "bae.client"
	spanSend          = "bae.client.send"
	spanTool          = "bae.client.tool"
	methodSendMessage = "session.sendMessage"
)

func (s *Session) tracer() trace.Tracer { return s.t.cfg.TracerProvider.Tracer(tracerName) }

// IdempotencyHeader is the request header naming a message, so a resend
// after a lost response relays the stored turn instead of storing the
// message again (a bae-go extension; other servers ignore it).
const IdempotencyHeader = "Idempotency-Key"

// Resend backoff after a lost response.
const (
	resendWait    = 250 * time.Millisecond
	maxResendWait = 4 * time.Second
)

// TurnResult is session.sendMessage's terminal result.
type TurnResult struct {
	Message Message `json:"message"`
	// Events are every event of the turn, from the log.
	Events []Event `json:"events"`
	// Attempts is how many requests the call took: 1, plus one per resend
	// after a lost response.
	Attempts int `json:"-"`
	// Interrupted is set when the turn was interrupted (Session.Interrupt):
	// Message is then what the assistant had written (a bae-go extension).
	Interrupted bool `json:"interrupted,omitempty"`
}

// SendOptions tune SendOnce.
type SendOptions struct {
	// IdempotencyKey names the message (1 to 128 characters of A-Z a-z
	// 0-9 - _ . : ~); "" draws a random one. Sending the same message again
	// under the same key, even from another process, relays the turn
	// already stored instead of starting a second one.
	IdempotencyKey string
	// WhenBusy is the call's busy policy ("" sends none: enqueue).
	WhenBusy WhenBusy
}

// SendOnce makes one session.sendMessage call, without the tool-call loop
// or the Before/After hooks (OnEvent still sees each notification once):
// the caller answers any tool_use itself. A lost response is resent under
// the same key (Config.SendRetries). When every provider failed it returns
// the result together with a *ProvidersFailedError.
func (s *Session) SendOnce(ctx context.Context, content any, o SendOptions) (*TurnResult, error) {
	msg, err := s.startSend(ctx, content)
	if err != nil {
		return nil, err
	}
	defer s.endSend()
	res, err := s.sendMessage(ctx, msg, o.IdempotencyKey, o.WhenBusy)
	if err != nil {
		return nil, ctxErr(ctx, err)
	}
	if pf := providersFailed(res); pf != nil {
		return res, pf
	}
	return res, nil
}

// startSend builds the user message from content and takes the session's
// send slot (one turn at a time); endSend gives the slot back.
func (s *Session) startSend(ctx context.Context, content any) (Message, error) {
	msg, err := userMessage(content)
	if err != nil {
		return Message{}, err
	}
	select {
	case s.sendSem <- struct{}{}:
	case <-ctx.Done():
		return Message{}, ctx.Err()
	}
	return msg, nil
}

func (s *Session) endSend() { <-s.sendSem }

// sendMessage sends msg under key (drawn when ""), resending it under the
// same key while its response is lost, up to Config.SendRetries times.
func (s *Session) sendMessage(ctx context.Context, msg Message, key string, busy WhenBusy) (*TurnResult, error) {
	if key == "" {
		key = newIdempotencyKey()
	}
	params := map[string]any{"message": wireMessage(msg)}
	header := http.Header{IdempotencyHeader: {key}}
	if s.hooks.OnDelta != nil {
		header.Set(DeltasHeader, "on")
	}
	busyHeader(header, busy)
	header = s.approvalHeader(header)
	seen := map[string]bool{}
	wait := resendWait
	for attempt := 1; ; attempt++ {
		raw, lost, err := s.rpcOnce(ctx, methodSendMessage, params, header, seen)
		if err == nil {
			res := &TurnResult{Attempts: attempt}
			if err := json.Unmarshal(raw, res); err != nil {
				return nil, fmt.Errorf("bae: %s: decode result: %w", methodSendMessage, err)
			}
			if n := len(res.Events); n > 0 {
				s.noteEvent(res.Events[n-1].ID)
			}
			return res, nil
		}
		if !lost || attempt > s.t.cfg.SendRetries {
			return nil, err
		}
		s.Logger().DebugContext(ctx, "bae: resending a message whose response was lost", "session_id", s.ID, "attempt", attempt+1, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, maxResendWait)
	}
}

// newIdempotencyKey is 128 random bits, hex.
func newIdempotencyKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func providersFailed(res *TurnResult) *ProvidersFailedError {
	for _, e := range res.Events {
		if e.reason() == ReasonAllProvidersFailed {
			return &ProvidersFailedError{Message: &res.Message, Events: res.Events}
		}
	}
	return nil
}

// Send sends a user turn — a string, a Block, a []Block or a Message — and
// runs the tool-call loop until the assistant answers without asking for
// one of this client's tools. It returns that final assistant turn.
//
// Tool calls tagged dispatch "client" (or, from servers that predate the
// tag, naming a tool this client registered) are run by their handlers;
// all others were answered by the server and are left alone. When every
// provider failed, Send returns a *ProvidersFailedError; JSON-RPC errors
// come back as *RPCError and REST-level failures as *ProblemError.
//
// If ctx is cancelled Send returns ctx.Err() promptly. A turn abandoned
// while paused for a tool stays paused server-side until BAE_TURN_TIMEOUT;
// the next Send of a plain message abandons it at once.
func (s *Session) Send(ctx context.Context, content any) (*Message, error) {
	msg, err := s.startSend(ctx, content)
	if err != nil {
		return nil, err
	}
	defer s.endSend()

	for iteration := 0; ; iteration++ {
		reply, next, err := s.sendOnce(ctx, msg, iteration)
		if err != nil {
			return nil, ctxErr(ctx, err)
		}
		if next == nil {
			return reply, nil
		}
		msg = *next
	}
}

// sendOnce is one round trip: send, read the stream, run our tools. next is
// nil when the loop is over.
func (s *Session) sendOnce(ctx context.Context, msg Message, iteration int) (reply, next *Message, err error) {
	ctx, span := s.tracer().Start(ctx, spanSend, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("bae.session.id", s.ID),
		attribute.String("bae.rpc.method", methodSendMessage),
		attribute.Int("bae.client.iteration", iteration),
	))
	defer func() {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, "send failed")
		}
		span.End()
	}()

	if h := s.hooks.BeforeSend; h != nil {
		if err := h(ctx, &msg); err != nil {
			return nil, nil, &HookError{Hook: "BeforeSend", Err: err}
		}
	}
	res, err := s.sendMessage(ctx, msg, "", s.whenBusy)
	if err != nil {
		return nil, nil, err
	}
	if pf := providersFailed(res); pf != nil {
		return nil, nil, pf
	}
	reply = &res.Message
	if h := s.hooks.AfterReceive; h != nil {
		if err := h(ctx, reply); err != nil {
			return nil, nil, &HookError{Hook: "AfterReceive", Err: err}
		}
	}
	var results []Block
	for _, use := range reply.ToolUses() {
		if !s.ours(use) {
			continue // informational: the server already answered it
		}
		r, err := s.runTool(ctx, use)
		if err != nil {
			return nil, nil, err
		}
		results = append(results, r)
	}
	if len(results) == 0 {
		return reply, nil, nil
	}
	return reply, &Message{Role: RoleUser, Content: results}, nil
}

// ours decides whether this client must execute a tool_use block.
func (s *Session) ours(use ToolUse) bool {
	if use.Dispatch != "" {
		return use.Dispatch == DispatchClient
	}
	_, ok := s.handler(use.Name)
	return ok
}

// runTool runs one of our tool calls. Handler failures become is_error
// results; only hook errors and cancellation abort the loop.
func (s *Session) runTool(ctx context.Context, use ToolUse) (_ ToolResult, err error) {
	ctx, span := s.tracer().Start(ctx, spanTool, trace.WithAttributes(
		attribute.String("bae.tool.name", use.Name),
		attribute.String("bae.tool.dispatch", string(DispatchClient)),
	))
	defer func() {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, "tool dispatch failed")
		}
		span.End()
	}()

	if h := s.hooks.BeforeToolCall; h != nil {
		if err := h(ctx, &use); err != nil {
			return ToolResult{}, &HookError{Hook: "BeforeToolCall", Err: err}
		}
	}
	result := ToolResult{ToolUseID: use.ID}
	input := use.Input
	if len(input) == 0 {
		input = json.RawMessage("{}")
	}
	var herr error
	if tool, ok := s.handler(use.Name); !ok {
		// dispatch "client" for a tool we cannot run: answer it so the
		// paused turn can resume instead of waiting for the timeout.
		herr = fmt.Errorf("no handler registered for tool %q", use.Name)
	} else {
		out, err := tool.Handler(ContextWithSession(ctx, s), input)
		if cerr := ctx.Err(); cerr != nil {
			return ToolResult{}, cerr
		}
		if err == nil {
			result.Content, err = toContent(out)
		}
		herr = err
	}
	if herr != nil {
		s.Logger().DebugContext(ctx, "bae: tool failed", "tool", use.Name, "err", herr)
		span.SetStatus(codes.Error, "tool returned an error")
		result = ToolResult{ToolUseID: use.ID, Content: []Block{Text{Text: herr.Error()}}, IsError: true}
	}
	if h := s.hooks.AfterToolCall; h != nil {
		if err := h(ctx, use, &result); err != nil {
			return ToolResult{}, &HookError{Hook: "AfterToolCall", Err: err}
		}
	}
	return result, nil
}
