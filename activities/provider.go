package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/internal/compaction"
	"github.com/bae-go/bae-go/internal/config"
	"github.com/bae-go/bae-go/internal/provider"
	"github.com/bae-go/bae-go/internal/telemetry"
	"github.com/bae-go/bae-go/store"
	"github.com/bae-go/bae-go/workflows"
)

// attemptStep names an attempt in its events' idempotency keys.
func attemptStep(in workflows.CallProviderInput) string {
	if in.Retry > 0 {
		return fmt.Sprintf("i%d/a%d/r%d", in.Iteration, in.Attempt, in.Retry)
	}
	return fmt.Sprintf("i%d/a%d", in.Iteration, in.Attempt)
}

func attemptKind(attempt int) string {
	if attempt == 0 {
		return "primary"
	}
	return "fallback"
}

// CallProvider performs one attempt of the fallback walk: provider.request,
// the HTTP call, provider.response, and on success the assistant message with
// its tool.call events (or the final server.message.send). Transport
// failures are retried by Temporal; the failure is logged only on the last
// try, so the log shows one request/response pair per attempt.
func (a *Activities) CallProvider(ctx context.Context, in workflows.CallProviderInput) (workflows.CallProviderResult, error) {
	ctx, done := a.work.track(ctx, in.TurnID)
	defer done()
	var slot *callSlot
	if in.Stoppable {
		var release func()
		slot, release = a.calls.open(in.SessionID, in.TurnID)
		defer release()
	}
	if in.Begin != nil {
		return a.beginThenCall(ctx, in, slot)
	}
	var prep attemptPrep
	// One transaction: the stored answer of an earlier run, the tools, the
	// conversation (only what this worker has not read yet) and the
	// provider.request event.
	err := a.untilStored(ctx, "prepare provider request", func(ctx context.Context) error {
		return a.Store.Tx(ctx, func(tx *store.Tx) error {
			var err error
			prep, err = a.prepareAttempt(ctx, tx, in, nil)
			return err
		})
	})
	if err != nil {
		return workflows.CallProviderResult{}, a.superseded(ctx, in, err)
	}
	return a.callPrepared(ctx, in, prep, slot)
}

// attemptPrep is what an attempt read and stored before its HTTP call.
type attemptPrep struct {
	stored   *store.Event // the response an earlier run stored, if any
	ts       toolset
	messages json.RawMessage
	tools    json.RawMessage
	// need (compacting attempts) stops the attempt before its call.
	need *workflows.CompactionNeed
	// bytesPerToken is the session's estimate before this attempt, for
	// calibrating it with the provider's count (0 when not compacting).
	bytesPerToken float64
	compacting    bool
	// off: the profile turned compaction off; a too-long refusal then
	// fails the turn without compacting.
	off bool
	// run numbers the call's deltas when its transaction did (nil: the
	// call numbers them itself, see startDeltaRun).
	run *store.StreamRunNo
	// budget: a spent budget stops the attempt before its call.
	budget *workflows.BudgetSpent
	// settings are the entry's model settings with the profile's
	// overrides; settingsErr fails the attempt before its call.
	settings    provider.Settings
	settingsErr error
	// fence is what the attempt's request continued: its outcome is
	// stored only while the conversation is still that (nil: no request
	// was made, nothing to fence).
	fence *store.AttemptFence
}

// requestFrom fills in p what an attempt's inputs say before its request:
// the response an earlier run stored, a spent budget (neither makes a
// call, so no provider.request either), or else the toolset and settings
// of the request. It reports whether the request is to be made; an
// unconfigured provider makes none here (callPrepared fails the attempt).
func (p *attemptPrep) requestFrom(tx *store.Tx, inputs store.AttemptInputs, entry config.ProviderEntry, configured bool) (bool, error) {
	if inputs.Stored != nil {
		p.stored = inputs.Stored
		return false, nil
	}
	if p.budget = spentBudget(tx); p.budget != nil || !configured {
		return false, nil
	}
	var err error
	if p.ts, err = toolsFrom(inputs); err != nil {
		return false, err
	}
	p.tools = p.ts.json()
	p.settings, p.settingsErr = entry.EffectiveSettings(inputs.ModelSettings)
	return true, nil
}

// tailKey is the message an attempt of iteration it continues: the turn's
// own message, or the tool results of the iteration before.
func tailKey(turnID string, it int) string {
	if it == 0 {
		return idem(turnID, "user")
	}
	return idem(turnID, fmt.Sprintf("i%d/results", it-1))
}

// fenceAt fences an attempt whose request is the conversation as of
// counter at: the request is appended, and its outcome stored, only while
// the turn is still the live end of that conversation. A turn interrupted,
// taken out of the conversation or followed by a later turn meanwhile (its
// attempt ran on a worker Temporal had given up on) stores nothing more.
func fenceAt(tx *store.Tx, in workflows.CallProviderInput, at int64) *store.AttemptFence {
	f := &store.AttemptFence{SessionID: in.SessionID, TailKey: tailKey(in.TurnID, in.Iteration), At: at}
	tx.Fence(*f)
	return f
}

// prepareAttempt reads the attempt's inputs and appends its
// provider.request, in tx, after the events before (a beginning turn's).
// The append commits tx (Tx.AppendAndCommit): the caller returns right
// after it.
func (a *Activities) prepareAttempt(ctx context.Context, tx *store.Tx, in workflows.CallProviderInput, before []store.NewEvent) (attemptPrep, error) {
	if in.Budgets {
		// Read in the attempt's own round trip, below.
		tx.ReadBudgetsWithAttempt(in.ClientKeyID)
	}
	if in.Compact {
		return a.prepareView(ctx, tx, in, before)
	}
	var p attemptPrep
	step := attemptStep(in)
	entry, configured := a.Config.Provider(in.Provider)
	var (
		inputs store.AttemptInputs
		conv   json.RawMessage
		at     int64
		err    error
	)
	if a.Deltas != nil && configured && !entry.NoStream {
		// Numbered here, in the round trip the attempt makes anyway, rather
		// than while the request is on its way.
		var run store.StreamRunNo
		inputs, conv, at, run, err = tx.AttemptStreaming(ctx, in.SessionID, in.ClientKeyID, idem(in.TurnID, step+"/resp"), in.TurnID, step)
		p.run = &run
	} else {
		inputs, conv, at, err = tx.Attempt(ctx, in.SessionID, in.ClientKeyID, idem(in.TurnID, step+"/resp"))
	}
	if err != nil {
		return p, err
	}
	evs := before
	request, err := p.requestFrom(tx, inputs, entry, configured)
	if err != nil {
		return p, err
	}
	if request {
		p.messages = conv
		p.fence = fenceAt(tx, in, at)
		// The conversation is stored once, as messages; the event names it
		// by counter and is materialized whenever it is read.
		evs = append(evs, store.NewEvent{
			IdemKey: idem(in.TurnID, step+"/req"), TurnID: in.TurnID, ClientKeyID: in.ClientKeyID,
			Payload:    requestPayload(in.Attempt, entry, p.tools, p.settings),
			MessagesAt: &at,
		})
	}
	if len(evs) > 0 {
		// The transaction's last write: it commits in its round trip.
		_, err = tx.AppendAndCommit(ctx, in.SessionID, evs, store.Then{})
	}
	return p, err
}

// callPrepared makes the HTTP call of a prepared attempt and stores its
// outcome (or answers from what an earlier run stored). A stop through
// slot ends the call and the attempt (ErrAttemptStopped).
func (a *Activities) callPrepared(ctx context.Context, in workflows.CallProviderInput, prep attemptPrep, slot *callSlot) (workflows.CallProviderResult, error) {
	if prep.stored != nil {
		return a.storedAttempt(ctx, in, *prep.stored)
	}
	if prep.need != nil {
		return workflows.CallProviderResult{NeedsCompaction: prep.need}, nil
	}
	if prep.budget != nil {
		a.logger(ctx, in.TurnID).Info("provider attempt stopped by a spent budget", "budget", prep.budget.Scope+":"+prep.budget.Subject)
		return workflows.CallProviderResult{BudgetSpent: prep.budget}, nil
	}
	step := attemptStep(in)
	entry, configured := a.Config.Provider(in.Provider)
	messages, tools, ts := prep.messages, prep.tools, prep.ts
	ctx, span := a.attemptSpan(ctx, in, entry)
	defer span.End()
	if !configured {
		endAttempt(span, nil, "provider not configured")
		return a.attemptFailed(ctx, in, step, "", nil, fmt.Sprintf("provider %q is not configured", in.Provider), nil, prep.fence, 0)
	}

	if prep.settingsErr != nil {
		endAttempt(span, nil, "provider config error")
		return a.attemptFailed(ctx, in, step, entry.Kind, nil, "provider config error: "+prep.settingsErr.Error(), nil, prep.fence, 0)
	}
	lookup := a.Lookup
	if lookup == nil {
		lookup = os.LookupEnv
	}
	token, terr := config.ResolveEnvTokens(entry.AuthToken, lookup)
	// The settings' header tokens are resolved for this call only: events
	// and views keep prep.settings, tokens unresolved.
	settings, herr := config.ResolveHeaders(prep.settings, lookup)
	if terr == nil && herr != nil {
		terr = fmt.Errorf("model_settings.%w", herr)
	}
	if terr != nil {
		endAttempt(span, nil, "provider config error")
		return a.attemptFailed(ctx, in, step, entry.Kind, nil, "provider config error: "+terr.Error(), nil, prep.fence, 0)
	}
	stop := heartbeatEvery(ctx, 2*time.Second)
	started := time.Now()
	ep := provider.Endpoint{
		Kind: entry.Kind, BaseURL: entry.EffectiveBaseURL(), Model: entry.Model, MaxTokens: entry.MaxTokens, AuthToken: token,
		PromptCache: !entry.NoPromptCache, CacheKey: in.SessionID, Settings: settings,
	}
	var (
		resp *provider.Response
		err  error
		run  *deltaRun
	)
	callCtx, endCall := slot.call(ctx)
	if entry.NoStream {
		resp, err = a.Provider.Call(callCtx, ep, messages, tools)
	} else {
		run = a.startDeltaRun(ctx, in, step, prep.run)
		var got partialText
		resp, err = a.Provider.CallStreaming(callCtx, ep, messages, tools, func(d provider.Delta) {
			got.add(d)
			run.sink(d)
		})
		// A stopped call's deltas are not superseded: the interrupt keeps them.
		run.end(callCtx, err)
		if err != nil && callCtx.Err() != nil {
			// Kept for an interrupt (see InterruptTurn), here and in the
			// database for the worker that runs the turn's next task.
			content := got.content()
			a.work.keepPartial(in.TurnID, content)
			a.storePartial(ctx, in, run.runNo(), content)
		}
	}
	stopped := err != nil && stoppedCall(callCtx)
	endCall()
	stop()
	token, settings = "", provider.Settings{}
	// Every HTTP call counts, including the transport failures Temporal
	// retries: the metric is about the provider, not the attempt.
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	a.Metrics.ProviderRequest(ctx, entry.Kind, outcome, time.Since(started))
	if stopped {
		// No retry and no fallback: the Interrupt update that follows the
		// stop ends the turn (see workflows.runAttempt).
		endAttempt(span, nil, "interrupted")
		return workflows.CallProviderResult{}, temporal.NewNonRetryableApplicationError("provider call stopped by an interrupt", workflows.ErrAttemptStopped, nil)
	}
	if err != nil {
		if ctx.Err() != nil {
			// Cancelled (worker shutdown or timeout): not the provider's
			// failure. Temporal retries the attempt; nothing is logged.
			endAttempt(span, nil, "cancelled")
			return workflows.CallProviderResult{}, fmt.Errorf("provider %s: %w", in.Provider, ctx.Err())
		}
		var ce *provider.CallError
		if !errors.As(err, &ce) {
			ce = &provider.CallError{Detail: err.Error(), Retryable: true}
		}
		// Each HTTP call is its own span, a transport retry included.
		endAttempt(span, ce.Status, "provider call failed")
		if in.Compact && provider.TooLong(entry.Kind, ce) {
			return a.attemptTooLong(ctx, in, step, entry.Kind, ce, prep.off, prep.fence, run.last())
		}
		// Only transport failures are retried in place; an HTTP error from
		// the provider is its answer, logged once, and the walk moves on.
		if ce.Retryable && ce.Status == nil && activity.IsActivity(ctx) && activity.GetInfo(ctx).Attempt < workflows.ProviderAttempts {
			return workflows.CallProviderResult{}, fmt.Errorf("provider %s: %s", in.Provider, ce.Detail)
		}
		return a.attemptFailed(ctx, in, step, entry.Kind, ce.Status, ce.Detail, ce.Body, prep.fence, run.last())
	}
	status := resp.Status
	if status == 0 {
		status = 200
	}
	endAttempt(span, &status, "")
	var cal *calibration
	if prep.compacting {
		cal = &calibration{bytes: len(messages) + len(tools), prev: prep.bytesPerToken}
	}
	res, rec, err := a.attemptSucceeded(ctx, in, step, entry.Kind, resp, ts, cal, prep.fence, run.last())
	if rec != nil {
		// The turn ended with this attempt: its span ends after the
		// attempt's (a second End is ignored).
		span.End()
		telemetry.TurnEnded(a.Spans, a.Log, rec.SessionID, rec.In, rec.Started, rec.Result, nil)
	}
	return res, err
}

// beginThenCall begins the turn and makes its first attempt in one local
// activity and one transaction: the begin and the provider.request commit
// together, one handoff and one commit less on every turn's path. It keeps
// CallProviderInput.Begin's contract (a rejected or provider-less begin
// makes no attempt; the result carries the begin). The transaction waits
// out a database outage like the attempt's own steps.
func (a *Activities) beginThenCall(ctx context.Context, in workflows.CallProviderInput, slot *callSlot) (workflows.CallProviderResult, error) {
	var (
		b       workflows.BeginTurnResult
		prep    attemptPrep
		attempt bool // the turn began: its first attempt is prepared
	)
	call := in
	err := a.untilStored(ctx, "begin turn", func(ctx context.Context) error {
		return a.Store.Tx(ctx, func(tx *store.Tx) error {
			var (
				evs []store.NewEvent
				err error
			)
			if b, evs, err = a.beginInTx(ctx, tx, *in.Begin); err != nil {
				return err
			}
			if attempt = b.Outcome == "" && len(b.Providers) > 0; attempt {
				call.Begin, call.Provider = nil, b.Providers[0]
				// The turn's first events and its provider.request: one append.
				prep, err = a.prepareAttempt(ctx, tx, call, evs)
			} else if len(evs) > 0 {
				_, err = tx.AppendEvents(ctx, in.SessionID, evs...)
			}
			return err
		})
	})
	if err != nil {
		return workflows.CallProviderResult{}, a.superseded(ctx, in, err)
	}
	if !attempt {
		return workflows.CallProviderResult{Begin: &b}, nil
	}
	res, err := a.callPrepared(ctx, call, prep, slot)
	res.Begin = &b
	return res, err
}

// heartbeatEvery heartbeats every d until the returned stop is called, and
// at least three times per heartbeat timeout, so a short timeout
// (BAE_ACTIVITY_HEARTBEAT_TIMEOUT) is never missed.
func heartbeatEvery(ctx context.Context, d time.Duration) func() {
	// A local activity has no heartbeat: its workflow task's own timeout
	// stands for it.
	if !activity.IsActivity(ctx) || activity.GetInfo(ctx).IsLocalActivity {
		return func() {}
	}
	// Several beats per heartbeat timeout, or a short timeout would expire
	// between beats and start a second attempt beside a live one.
	if hb := activity.GetInfo(ctx).HeartbeatTimeout; hb > 0 && hb/3 < d {
		d = max(hb/3, 10*time.Millisecond)
	}
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				activity.RecordHeartbeat(ctx)
			}
		}
	}()
	return func() { close(done) }
}

func (a *Activities) attemptFailed(ctx context.Context, in workflows.CallProviderInput, step, kindName string, status *int, detail string, body json.RawMessage, fence *store.AttemptFence, deltaEnd int64) (workflows.CallProviderResult, error) {
	var b any
	if len(body) > 0 {
		b = body
	}
	evs := []store.NewEvent{{
		IdemKey: idem(in.TurnID, step+"/resp"), TurnID: in.TurnID, ClientKeyID: in.ClientKeyID,
		Payload: events.ProviderResponsePayload{Attempt: in.Attempt, Kind: attemptKind(in.Attempt), Provider: events.Optional(kindName), Status: status, Error: detail, Body: b},
	}}
	if in.Attempt == 0 {
		evs = append(evs, store.NewEvent{
			IdemKey: idem(in.TurnID, step+"/failed"), TurnID: in.TurnID, ClientKeyID: in.ClientKeyID,
			Payload: events.SessionErrorPayload{Reason: events.ReasonProviderCallFailed, Provider: kindName, Detail: detail},
		})
	}
	if err := a.untilStored(ctx, "store provider failure", func(ctx context.Context) error {
		return a.appendFenced(ctx, in.SessionID, fence, deltaEndOf(in.TurnID, evs[0].IdemKey, deltaEnd), evs...)
	}); err != nil {
		return a.fenced(ctx, in, step, err)
	}
	a.logger(ctx, in.TurnID).Warn("provider attempt failed", "provider", in.Provider, "attempt", in.Attempt, "detail", detail)
	return failedAttempt(in, attemptDetail(status, detail))
}

// failedAttempt answers a failed attempt whose events are stored: as a
// non-retryable activity failure when the workflow asks for one (the
// Temporal UI shows the attempt failed), else as OK=false.
func failedAttempt(in workflows.CallProviderInput, detail string) (workflows.CallProviderResult, error) {
	if in.FailAsError {
		return workflows.CallProviderResult{}, temporal.NewNonRetryableApplicationError(detail, workflows.ErrProviderAttemptFailed, nil)
	}
	return workflows.CallProviderResult{OK: false}, nil
}

// calibration is what a compacting attempt sent, to fold the provider's
// token count into the session's estimate.
type calibration struct {
	bytes int
	prev  float64
}

// attemptSucceeded stores a successful attempt's answer. rec is the turn's
// result when it was stored with the answer (turnRecord), for the caller
// to report the turn.
func (a *Activities) attemptSucceeded(ctx context.Context, in workflows.CallProviderInput, step, kindName string, resp *provider.Response, ts toolset, cal *calibration, fence *store.AttemptFence, deltaEnd int64) (workflows.CallProviderResult, *workflows.RecordTurnResultInput, error) {
	content := resp.Canonical.Content
	if len(content) == 0 || string(content) == "null" {
		content = json.RawMessage(`[]`)
	}
	res, evs := classifyAssistant(in, content, ts)
	status := resp.Status
	if status == 0 {
		status = 200
	}
	call := a.usageCall(in, idem(in.TurnID, step+"/resp"), kindName, resp.Raw)
	var rec *workflows.RecordTurnResultInput
	// The answer is kept while the database is away: it is stored when the
	// database is back, never fetched again from the provider.
	err := a.untilStored(ctx, "store provider response", func(ctx context.Context) error {
		rec = nil
		return a.Store.Tx(ctx, func(tx *store.Tx) error {
			if fence != nil {
				// Ahead of the message, which moves the conversation on.
				tx.Fence(*fence)
			}
			// Made first, the message rides with the append's first round trip.
			tx.AppendMessage(in.SessionID, idem(in.TurnID, fmt.Sprintf("i%d/asst", in.Iteration)), "assistant", content)
			if cal != nil {
				if n := provider.InputTokens(kindName, resp.Raw); n > 0 {
					tx.Calibrate(in.SessionID, compaction.Calibrate(cal.prev, cal.bytes, n))
				}
			}
			all := append([]store.NewEvent{{
				IdemKey: idem(in.TurnID, step+"/resp"), TurnID: in.TurnID, ClientKeyID: in.ClientKeyID,
				Payload: events.ProviderResponsePayload{Attempt: in.Attempt, Kind: attemptKind(in.Attempt), Provider: &kindName, OK: true, Status: &status, Body: resp.Raw},
			}}, evs...)
			// Counted with the response it is read from, under the
			// response's key: once, whatever retries the attempt.
			then := store.Then{Usage: &call}
			then.DeltaEnd = deltaEndOf(in.TurnID, all[0].IdemKey, deltaEnd)
			if rec = turnRecord(in, res); rec != nil {
				// The turn's result, its LastSeq the answer's last event's.
				then.TurnID, then.Result = in.TurnID, func(seq int64) any {
					r := rec.Result
					r.LastSeq = seq
					return r
				}
			}
			// The message, the events, the usage, the result and the
			// COMMIT: one round trip.
			stored, err := tx.AppendAndCommit(ctx, in.SessionID, all, then)
			if err != nil {
				return err
			}
			res.LastSeq = lastSeq(stored)
			if rec != nil {
				rec.Result.LastSeq = res.LastSeq
			}
			return nil
		})
	})
	if err != nil {
		res, err := a.fenced(ctx, in, step, err)
		return res, nil, err
	}
	res.Recorded = rec != nil
	// Counted once, after the commit: a retry finds the stored response and
	// returns through storedAttempt instead.
	a.Metrics.ProviderUsage(ctx, call.Provider, call.Input, call.Output, call.CacheRead, call.CacheWrite, call.CostNanoUSD)
	for _, c := range res.ToolCalls {
		a.Metrics.ToolCall(ctx, c.Dispatch)
	}
	a.clientDispatchSpans(ctx, in.Span, content, res.ToolCalls)
	return res, rec, nil
}

// turnRecord is the result of the turn whose final answer the attempt
// stores, when the workflow asked for it to be stored with the answer
// (CallProviderInput.Record): the one the workflow would record.
func turnRecord(in workflows.CallProviderInput, res workflows.CallProviderResult) *workflows.RecordTurnResultInput {
	if in.Record == nil || !res.Final {
		return nil
	}
	rec := *in.Record
	rec.Result.Outcome, rec.Result.LastSeq, rec.Result.Provider = workflows.OutcomeCompleted, res.LastSeq, in.Provider
	return &rec
}

// classifyAssistant turns the assistant content into the attempt result and
// the events that follow provider.response: a final server.message.send, or
// one tool.call per tool_use block.
func classifyAssistant(in workflows.CallProviderInput, content json.RawMessage, ts toolset) (workflows.CallProviderResult, []store.NewEvent) {
	arr, _ := blocksOf(content)
	res := workflows.CallProviderResult{OK: true}
	var evs []store.NewEvent
	for _, b := range arr {
		if blockType(b) != "tool_use" {
			continue
		}
		call := workflows.ToolCall{ID: strField(b, "id"), Name: strField(b, "name")}
		call.Dispatch, call.Server = ts.classify(call.Name)
		input := b["input"]
		if input == nil {
			input = map[string]any{}
		}
		evs = append(evs, store.NewEvent{
			IdemKey: idem(in.TurnID, fmt.Sprintf("i%d/tc/%d", in.Iteration, len(res.ToolCalls))), TurnID: in.TurnID, ClientKeyID: in.ClientKeyID,
			Payload: events.ToolCallPayload{ID: call.ID, Name: call.Name, Input: input, Dispatch: call.Dispatch, ServerName: events.Optional(call.Server)},
		})
		res.ToolCalls = append(res.ToolCalls, call)
	}
	if len(res.ToolCalls) == 0 {
		res.Final = true
		evs = append(evs, store.NewEvent{
			IdemKey: idem(in.TurnID, fmt.Sprintf("i%d/sms", in.Iteration)), TurnID: in.TurnID, ClientKeyID: in.ClientKeyID,
			Payload: events.ServerMessage{Content: content},
		})
	}
	return res, evs
}

// storedAttempt rebuilds an attempt's result from what a previous run of
// this activity stored, so a retry never calls the provider twice for one
// logged response.
func (a *Activities) storedAttempt(ctx context.Context, in workflows.CallProviderInput, resp store.Event) (workflows.CallProviderResult, error) {
	var p struct {
		OK       bool            `json:"ok"`
		Status   *int            `json:"status"`
		Error    string          `json:"error"`
		Provider string          `json:"provider"`
		Body     json.RawMessage `json:"body"`
	}
	if err := json.Unmarshal(resp.Payload, &p); err != nil {
		return workflows.CallProviderResult{}, fmt.Errorf("decode stored response: %w", err)
	}
	if !p.OK && in.Compact && provider.TooLong(p.Provider, &provider.CallError{Status: p.Status, Body: p.Body}) {
		return tooLongResult(in), nil
	}
	if !p.OK {
		return failedAttempt(in, attemptDetail(p.Status, p.Error))
	}
	var res workflows.CallProviderResult
	err := a.untilStored(ctx, "load stored provider answer", func(ctx context.Context) error {
		msg, err := a.Store.MessageByIdem(ctx, in.SessionID, idem(in.TurnID, fmt.Sprintf("i%d/asst", in.Iteration)))
		if err != nil {
			return fmt.Errorf("load stored assistant message: %w", err)
		}
		ts, err := a.toolsFor(ctx, in.SessionID, in.ClientKeyID)
		if err != nil {
			return err
		}
		res, _ = classifyAssistant(in, msg.Content, ts)
		return nil
	})
	return res, err
}

// lastSeq is the highest sequence among events.
func lastSeq(evs []store.Event) int64 {
	var last int64
	for _, e := range evs {
		last = max(last, e.Seq)
	}
	return last
}

// requestPayload is the provider.request event of an attempt, naming the
// provider's URL without user info or query (config.RedactURL); the
// messages are added by the caller.
func requestPayload(attempt int, entry config.ProviderEntry, tools json.RawMessage, settings provider.Settings) events.ProviderRequestPayload {
	p := events.ProviderRequestPayload{
		Attempt: attempt, Kind: attemptKind(attempt), Provider: entry.Kind, BaseURL: entry.DisplayBaseURL(),
		Model: entry.Model, MaxTokens: entry.MaxTokens, Tools: tools,
	}
	if !settings.IsZero() {
		p.ModelSettings = settings.Shown()
	}
	return p
}

// appendFenced appends an attempt's outcome events, in one transaction
// with its fence when it has one, and the last live delta of the run that
// stored them when it sent any (end), queued after the append: a second
// run storing the same outcome waits for the first's commit and keeps its
// end.
func (a *Activities) appendFenced(ctx context.Context, sessionID string, fence *store.AttemptFence, end *store.DeltaEnd, evs ...store.NewEvent) error {
	if fence == nil && end == nil {
		_, err := a.Store.AppendEvents(ctx, sessionID, evs...)
		return err
	}
	return a.Store.Tx(ctx, func(tx *store.Tx) error {
		if fence != nil {
			tx.Fence(*fence)
		}
		_, err := tx.AppendEvents(ctx, sessionID, evs...)
		if err == nil && end != nil {
			tx.RecordDeltaEnd(*end)
		}
		return err
	})
}

// deltaEndOf is the delta end to record with the response respIdem, nil
// when its run sent no delta (seq 0).
func deltaEndOf(turnID, respIdem string, seq int64) *store.DeltaEnd {
	if seq <= 0 {
		return nil
	}
	return &store.DeltaEnd{TurnID: turnID, RespIdem: respIdem, Seq: seq}
}

// fenced answers an attempt whose outcome could not be stored. A fence
// that did not hold because another run of this very attempt stored its
// outcome first (the workflow task moved to another worker while this one
// still ran it) is answered from what that run stored; any other turn's
// progress made this attempt stale (superseded).
func (a *Activities) fenced(ctx context.Context, in workflows.CallProviderInput, step string, err error) (workflows.CallProviderResult, error) {
	if !errors.Is(err, store.ErrTurnSuperseded) {
		return workflows.CallProviderResult{}, err
	}
	ev, serr := a.Store.EventByIdem(ctx, in.SessionID, idem(in.TurnID, step+"/resp"))
	switch {
	case serr == nil:
		return a.storedAttempt(ctx, in, ev)
	case !errors.Is(serr, store.ErrNotFound):
		return workflows.CallProviderResult{}, serr
	}
	return workflows.CallProviderResult{}, a.superseded(ctx, in, err)
}

// superseded turns a fence that did not hold into the attempt's final,
// non-retryable failure (workflows.ErrTurnSuperseded): nothing was stored,
// and no retry could store anything either.
func (a *Activities) superseded(ctx context.Context, in workflows.CallProviderInput, err error) error {
	return a.turnSuperseded(ctx, in.TurnID, "provider attempt", err, "iteration", in.Iteration, "attempt", in.Attempt, "retry", in.Retry)
}
