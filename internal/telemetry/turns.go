package telemetry

import (
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/workflow"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/workflows"
)

// TurnInterceptor observes every SendMessage update a worker runs (turns
// sent by servers from before the Enqueue signal): when one completes, and
// the worker is not replaying history, it reports the turn (TurnEnded).
//
// The turn's end is seen by whichever worker completes the update: a turn
// that resumes on another worker after a crash still ends its span, and
// the spans its activities emitted before the crash stay its children.
// Nothing here touches workflow state or history, so workflow code and
// replay are unaffected.
func TurnInterceptor(spans *Spans, log *slog.Logger) interceptor.WorkerInterceptor {
	return &turnInterceptor{spans: spans, log: log}
}

type turnInterceptor struct {
	interceptor.WorkerInterceptorBase
	spans *Spans
	log   *slog.Logger
}

func (w *turnInterceptor) InterceptWorkflow(_ workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	i := &turnInbound{root: w}
	i.Next = next
	return i
}

type turnInbound struct {
	interceptor.WorkflowInboundInterceptorBase
	root *turnInterceptor
}

func (i *turnInbound) ExecuteUpdate(ctx workflow.Context, in *interceptor.UpdateInput) (any, error) {
	if in.Name != workflows.UpdateSendMessage || len(in.Args) != 1 {
		return i.Next.ExecuteUpdate(ctx, in)
	}
	msg, ok := in.Args[0].(workflows.SendMessageInput)
	// From history, so a turn finished by another worker keeps its start.
	started := workflow.Now(ctx)
	val, err := i.Next.ExecuteUpdate(ctx, in)
	if ok && !workflow.IsReplaying(ctx) {
		res, _ := val.(workflows.TurnResult)
		TurnEnded(i.root.spans, i.root.log, workflow.GetInfo(ctx).WorkflowExecution.ID, msg, started, res, err)
	}
	return val, err
}

// turnError is the bae.turn ERROR description of a result; "" when the
// turn did not fail.
func turnError(res workflows.TurnResult) string {
	switch res.Outcome {
	case workflows.OutcomeProvidersFailed:
		if res.Reason == events.ReasonLoopLimit {
			return "iteration limit reached"
		}
		return "all providers failed"
	case workflows.OutcomeFailed:
		return "turn failed"
	}
	return ""
}

// TurnEnded logs a turn's one INFO line and emits its bae.turn span (under
// the ref the API allocated, with the id its provider and tool spans
// already point to). A turn sent as an Enqueue signal ends when its result
// is recorded (activities.RecordTurnResult); one sent as an Update, when
// the update completes (TurnInterceptor).
func TurnEnded(spans *Spans, log *slog.Logger, sessionID string, in workflows.SendMessageInput, started time.Time, res workflows.TurnResult, err error) {
	now := time.Now()
	if started.After(now) {
		started = now
	}
	elapsed := now.Sub(started)
	log = log.With("session_id", sessionID, "turn_id", in.TurnID)
	if err != nil {
		log.Warn("turn ended without a result", "duration_ms", elapsed.Milliseconds(), "err", err)
	} else {
		attrs := []any{"outcome", res.Outcome, "duration_ms", elapsed.Milliseconds()}
		if res.Provider != "" {
			attrs = append(attrs, "provider", res.Provider)
		}
		if res.Reason != "" {
			attrs = append(attrs, "reason", res.Reason)
		}
		if res.FailedStep != "" {
			attrs = append(attrs, "step", res.FailedStep)
		}
		if res.Resumed {
			attrs = append(attrs, "resumed", true)
		}
		log.Info("turn finished", attrs...)
	}
	// A rejected message never ran a turn (as in BAE, where it is refused
	// before the turn starts): the request span says why.
	if err == nil && res.Outcome == workflows.OutcomeRejected {
		return
	}
	r := Record{
		Name: SpanTurn, Kind: trace.SpanKindInternal, Start: started, End: now,
		Attrs: []attribute.KeyValue{
			attribute.String(AttrSessionID, sessionID),
			attribute.String(AttrClientKeyID, in.ClientKeyID),
			attribute.Bool(AttrTurnResumed, res.Resumed),
		},
	}
	if l, ok := Link(in.SessionSpan, LinkSession); ok {
		r.Links = append(r.Links, l)
	}
	if l, ok := Link(res.ResumedSpan, LinkResume); ok && res.Resumed {
		r.Links = append(r.Links, l)
	}
	if err != nil {
		r.Error = "session loop failed"
	} else {
		r.Attrs = append(r.Attrs, attribute.String(AttrTurnOutcome, res.Outcome))
		r.Error = turnError(res)
	}
	spans.Emit(in.Span, r)
}
