package activities

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/internal/config"
	"github.com/bae-go/bae-go/internal/sandbox"
	"github.com/bae-go/bae-go/internal/telemetry"
	"github.com/bae-go/bae-go/workflows"
)

// The activities' spans are children of the turn's bae.turn span, named by
// the ref the turn carries (TurnRef.Span); the turn span itself is emitted
// when the SendMessage update completes (telemetry.TurnInterceptor). Span
// descriptions are fixed strings: error texts from providers, MCP servers
// and sandboxes may echo payloads and never enter a span.

// attemptSpan starts one bae.provider.attempt.
func (a *Activities) attemptSpan(ctx context.Context, in workflows.CallProviderInput, entry config.ProviderEntry) (context.Context, trace.Span) {
	return a.Spans.StartUnder(ctx, in.Span, telemetry.SpanProviderAttempt, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String(telemetry.AttrProviderName, in.Provider),
		attribute.String(telemetry.AttrProviderKind, entry.Kind),
		attribute.String(telemetry.AttrProviderModel, entry.Model),
		attribute.Int(telemetry.AttrProviderAttempt, in.Attempt),
		attribute.String(telemetry.AttrProviderAttemptKind, attemptKind(in.Attempt)),
	))
}

// endAttempt records the attempt's HTTP status and, when it failed, its
// ERROR status.
func endAttempt(span trace.Span, status *int, failure string) {
	if status != nil {
		span.SetAttributes(attribute.Int(telemetry.AttrHTTPStatus, *status))
	}
	if failure != "" {
		telemetry.Fail(span, failure)
	}
}

// attemptDetail is a failed attempt's short, payload-free description, for
// the activity failure, the update result and the memo.
func attemptDetail(status *int, detail string) string {
	if status != nil {
		return fmt.Sprintf("HTTP %d", *status)
	}
	const maxDetail = 200
	if len(detail) > maxDetail {
		detail = detail[:maxDetail] + "…"
	}
	return detail
}

// dispatchSpan starts one bae.tool.dispatch.
func (a *Activities) dispatchSpan(ctx context.Context, ref string, call workflows.ToolCall, inputBytes int) (context.Context, trace.Span) {
	return a.Spans.StartUnder(ctx, ref, telemetry.SpanToolDispatch, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(
		attribute.String(telemetry.AttrToolName, call.Name),
		attribute.String(telemetry.AttrToolDispatch, string(call.Dispatch)),
		attribute.Int(telemetry.AttrToolInputBytes, inputBytes),
	))
}

// endDispatch records a server-side tool's result shape on its dispatch
// span: sizes only, never the content.
func endDispatch(span trace.Span, isErr bool, content json.RawMessage) {
	span.SetAttributes(attribute.Bool(telemetry.AttrToolIsError, isErr), attribute.Int(telemetry.AttrToolOutputBytes, len(content)))
	if isErr {
		telemetry.Fail(span, "tool result is_error")
	}
}

// clientDispatchSpans records the dispatch of an answer's client tools: the
// server only hands them to the caller, so each span is an instant.
func (a *Activities) clientDispatchSpans(ctx context.Context, ref string, content json.RawMessage, calls []workflows.ToolCall) {
	if !a.Spans.Enabled() || ref == "" {
		return
	}
	inputs := map[string]int{}
	arr, _ := blocksOf(content)
	for _, b := range arr {
		if blockType(b) == "tool_use" {
			input := b["input"]
			if input == nil {
				input = map[string]any{}
			}
			raw, _ := json.Marshal(input)
			inputs[strField(b, "id")] = len(raw)
		}
	}
	for _, c := range calls {
		if c.Dispatch != events.DispatchClient {
			continue
		}
		_, span := a.dispatchSpan(ctx, ref, c, inputs[c.ID])
		span.End()
	}
}

// endSessionSpan emits an ended session's bae.session span, once: the
// replica that takes the ref from the sessions row emits it.
func (a *Activities) endSessionSpan(ctx context.Context, in workflows.CleanupInput) {
	if !a.Spans.Enabled() {
		return
	}
	sp, ok, err := a.Store.TakeSessionSpan(ctx, in.SessionID)
	if err != nil {
		a.logger(ctx, "").Debug("session span not emitted", "err", err)
		return
	}
	if !ok {
		return
	}
	r := telemetry.Record{
		Name: telemetry.SpanSession, Kind: trace.SpanKindInternal, Start: sp.CreatedAt, End: time.Now(),
		Attrs: []attribute.KeyValue{
			attribute.String(telemetry.AttrSessionID, in.SessionID),
			attribute.String(telemetry.AttrProfileID, sp.ProfileID),
			attribute.String(telemetry.AttrClientKeyID, sp.ClientKeyID),
		},
	}
	if sp.ForkedFrom != "" {
		r.Attrs = append(r.Attrs, attribute.String(telemetry.AttrForkedFrom, sp.ForkedFrom),
			attribute.Int64(telemetry.AttrForkedEventSeq, sp.ForkedEventSeq))
	}
	if sp.State == "error" {
		r.Error = "session error"
	}
	a.Spans.Emit(sp.Ref, r)
}

// endMCPCall ends a bae.mcp.call: ERROR when the call failed or the tool
// reported isError.
func endMCPCall(span trace.Span, result json.RawMessage, err error) {
	defer span.End()
	if err != nil {
		telemetry.Fail(span, "MCP call failed")
		return
	}
	var r struct {
		IsError bool `json:"isError"`
	}
	if json.Unmarshal(result, &r) == nil && r.IsError {
		telemetry.Fail(span, "MCP tool returned isError")
	}
}

// endSandboxExec ends a bae.sandbox.exec with the command's exit code.
func endSandboxExec(span trace.Span, r sandbox.ExecResult, err error) {
	defer span.End()
	if err != nil {
		telemetry.Fail(span, "sandbox exec failed")
		return
	}
	span.SetAttributes(attribute.Int(telemetry.AttrSandboxExitCode, r.ExitCode))
	if r.ExitCode != 0 {
		telemetry.Fail(span, "non-zero exit code")
	}
}

// subagentSpan starts a remote subagent's bae.subagent span: a trace of its
// own (it outlives the turn that launched it), linked to the launching
// dispatch.
func (a *Activities) subagentSpan(ctx context.Context, in workflows.RunSubagentInput) trace.Span {
	opts := []trace.SpanStartOption{trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(
		attribute.String(telemetry.AttrSessionID, in.SessionID),
		attribute.String(telemetry.AttrSubagentID, in.SubagentID),
	)}
	if l, ok := telemetry.Link(in.Link, telemetry.LinkSubagent); ok {
		opts = append(opts, trace.WithLinks(l))
	}
	if !a.Spans.Enabled() {
		return trace.SpanFromContext(context.Background())
	}
	_, span := a.Spans.Start(ctx, telemetry.SpanSubagent, opts...)
	return span
}

func endSubagentSpan(span trace.Span, outcome string) {
	span.SetAttributes(attribute.String(telemetry.AttrSubagentOutcome, outcome))
	if outcome == telemetry.SubagentFailed {
		telemetry.Fail(span, "subagent failed")
	}
	span.End()
}
