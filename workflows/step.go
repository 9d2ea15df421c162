package workflows

import (
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/bae-go/bae-go/events"
)

// versionTurnStep: the running turn's current step (what it waits on,
// since when, which attempt) is in the memo, upserted at each step change,
// and in the workflow's current details. The memo is what the Temporal UI
// shows while a provider call runs: the call is a local activity inside
// the workflow task, so the workflow answers no query (current details
// included) until the call ends, but the task's heartbeat sends the
// upsert. Histories recorded before it upsert no step.
const (
	changeTurnStep  = "turn-step-memo"
	versionTurnStep = 1
)

// versionTurnStepLazy: a step reaches the memo only once it outlasts the
// workflow task it began in. Each upsert is a history event and a
// visibility write on the Temporal side, which a text turn paid twice
// (its provider call, then idle) for a step nobody could see: a provider
// call that ends inside its workflow task is never shown. A provider
// call (a local activity) is kept as pending; when the task heartbeats
// while it runs, the heartbeat starts a new workflow task, and its start
// (a new history length) upserts the step, sent with the next heartbeat
// or the call's end. Every other step (a tool activity, a compaction, an
// approval, a pause, idle) waits outside a workflow task, where the
// workflow answers queries: it is the current details only, unless the
// memo already shows a step of the turn, which must not stay. The turn's
// end removes the step it showed. Histories recorded before it upsert
// every step (versionTurnStep).
const (
	changeTurnStepLazy  = "turn-step-lazy"
	versionTurnStepLazy = 1
)

// stepper reports a run's steps; nil until a turn of a run that records
// versionTurnStep ran, and then reports nothing.
type stepper struct {
	s *session
	// text is the step last put in the memo (an unchanged step costs no
	// upsert); details the current details last set.
	text, details string
	// providers and models are the last begin's provider walk: a turn's
	// first attempt is made before the workflow knows its own walk.
	providers, models []string

	// lazy (versionTurnStepLazy): text is "" unless the memo shows a
	// step; now is the current step (the current details); pending is a
	// provider call's step not in the memo yet, begun at history length
	// pendingAt.
	lazy      bool
	now       string
	pending   string
	pendingAt int
	// localCalls: provider calls run as local activities in this run
	// (versionLocalProvider), so they hold the workflow task.
	localCalls bool
}

// newStepper makes a run's stepper; ctx must outlive the run's turns (a
// lazy stepper's watcher runs under it).
func newStepper(ctx workflow.Context, s *session) *stepper {
	st := &stepper{s: s}
	if workflow.GetVersion(ctx, changeTurnStepLazy, workflow.DefaultVersion, versionTurnStepLazy) < versionTurnStepLazy {
		return st
	}
	st.lazy = true
	// One coroutine per run: it wakes at every workflow task of the run
	// (Await re-checks on each), and upserts a pending step once a task
	// started after it began, the heartbeat's task during a long call.
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			if err := workflow.Await(ctx, func() bool {
				return st.pending != "" && workflow.GetInfo(ctx).GetCurrentHistoryLength() != st.pendingAt
			}); err != nil {
				return
			}
			text := st.pending
			st.pending = ""
			st.upsert(ctx, map[string]any{MemoCurrentStep: text}, text)
		}
	})
	return st
}

// stepTime is how a step's start is written: UTC to the second.
func stepTime(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// set makes what the current step, since now, of the turn turnID ("" for
// a session-level state). An upsert is one command and one history event
// (WorkflowPropertiesModified), sent with the workflow task's next
// completion or heartbeat.
func (st *stepper) set(ctx workflow.Context, turnID, what string) {
	if st == nil {
		return
	}
	text := stepText(ctx, turnID, what)
	if st.lazy && turnID != "" {
		st.change(ctx, text, false)
		return
	}
	st.put(ctx, text, nil)
}

// stepText is what's step as shown: since now, of the turn turnID.
func stepText(ctx workflow.Context, turnID, what string) string {
	text := what + " · since " + stepTime(workflow.Now(ctx))
	if turnID != "" {
		text += " · turn " + turnID
	}
	return text
}

// change makes text the current step of a lazy stepper; local says the
// step holds the workflow task (a provider call as a local activity).
func (st *stepper) change(ctx workflow.Context, text string, local bool) {
	if text == st.now {
		return
	}
	st.now, st.pending = text, ""
	switch {
	case st.s.closed:
		// The memo says the session ended; the steps after that (a turn
		// winding down) stay in the details.
	case st.text != "":
		st.upsert(ctx, map[string]any{MemoCurrentStep: text}, text)
	case local:
		st.pending, st.pendingAt = text, workflow.GetInfo(ctx).GetCurrentHistoryLength()
	}
	st.describe(ctx)
}

// endTurn is a lazy stepper's end of a turn: now is the step it ends in
// (for the current details), extra the turn's own memo fields; the step
// the memo showed, if any, is removed in the same upsert.
func (st *stepper) endTurn(ctx workflow.Context, now string, extra map[string]any) {
	st.now, st.pending = now, ""
	if st.text != "" && !st.s.closed {
		extra[MemoCurrentStep] = nil // a nil value removes the field
	}
	if len(extra) > 0 {
		st.upsert(ctx, extra, "")
	}
	st.describe(ctx)
}

// forget drops a pending step: the turn ended without endTurn (its run
// failed in the workflow), so no later task may show it.
func (st *stepper) forget() {
	if st != nil {
		st.pending = ""
	}
}

// upsert writes memo and records text as the step the memo shows.
func (st *stepper) upsert(ctx workflow.Context, memo map[string]any, text string) {
	if err := workflow.UpsertMemo(ctx, memo); err != nil {
		workflow.GetLogger(ctx).Warn("upsert memo", "error", err)
		return
	}
	st.text = text
}

// put upserts text (with extra memo fields, merged into the same upsert)
// and refreshes the current details.
func (st *stepper) put(ctx workflow.Context, text string, extra map[string]any) {
	if text == st.text && len(extra) == 0 {
		return
	}
	memo := map[string]any{MemoCurrentStep: text}
	// Copied into another map, so the order does not matter.
	//workflowcheck:ignore
	for k, v := range extra {
		memo[k] = v
	}
	if err := workflow.UpsertMemo(ctx, memo); err != nil {
		workflow.GetLogger(ctx).Warn("upsert memo", "error", err)
		return
	}
	st.text, st.now = text, text
	st.describe(ctx)
}

// describe sets the current details: the step and the queue behind it.
// Details are answered by a query and enter no history, so the queue may
// change them freely.
func (st *stepper) describe(ctx workflow.Context) {
	if st == nil {
		return
	}
	d := st.text
	if st.lazy {
		d = st.now
	}
	if q := st.s.queue; len(q) > 0 {
		ids := make([]string, 0, len(q))
		for _, t := range q {
			ids = append(ids, t.in.TurnID)
		}
		d += fmt.Sprintf("\nqueued: %d (%s)", len(q), strings.Join(ids, ", "))
	}
	if d == st.details {
		return
	}
	st.details = d
	workflow.SetCurrentDetails(ctx, d)
}

// learnWalk keeps a begin's provider walk, for naming the provider of the
// next turn's first attempt.
func (st *stepper) learnWalk(b BeginTurnResult) {
	if st == nil || len(b.Providers) == 0 {
		return
	}
	st.providers, st.models = b.Providers, b.Models
}

// provider names the provider at position i of the walk: its registry
// name and model.
func (st *stepper) provider(providers, models []string, i int) string {
	if i >= len(providers) {
		return "the profile's primary provider"
	}
	name := providers[i]
	if i < len(models) && models[i] != "" {
		name += " (" + models[i] + ")"
	}
	return name
}

// providerCall is the step of one provider attempt. A turn's first attempt
// (begin) is made before its walk is known: it names the last turn's
// primary, the profile's primary unless the profile changed since.
func (st *stepper) providerCall(ctx workflow.Context, turnID string, providers, models []string, it, attempt, retry int) {
	if st == nil {
		return
	}
	if providers == nil {
		providers, models = st.providers, st.models
	}
	what := fmt.Sprintf("provider call to %s: iteration %d, attempt %d", st.provider(providers, models, attempt), it+1, attempt+1)
	if len(providers) > 1 {
		what += fmt.Sprintf(" of %d", len(providers))
	}
	if retry > 0 {
		what += fmt.Sprintf(", retry %d after compaction", retry)
	}
	if st.lazy {
		st.change(ctx, stepText(ctx, turnID, what), st.localCalls)
		return
	}
	st.set(ctx, turnID, what)
}

// toolCall is the step of a server-side tool call.
func (st *stepper) toolCall(ctx workflow.Context, turnID string, it int, call ToolCall) {
	if st == nil {
		return
	}
	kind := map[events.Dispatch]string{events.DispatchMCP: "MCP tool", events.DispatchSandbox: "sandbox exec", events.DispatchSubagent: "subagent tool"}[call.Dispatch]
	name := call.Name
	if call.Server != "" {
		name = call.Server + "/" + name
	}
	st.set(ctx, turnID, fmt.Sprintf("%s %s (%s): iteration %d", kind, name, call.ID, it+1))
}

// ended is the memo's step once a turn ended: idle, paused for the
// client's tool results until deadline, or the session's end (the text
// markClosed puts, so its upsert is the turn's).
func (st *stepper) ended(ctx workflow.Context, turnID string, res turnResult, paused *PausedTurn) string {
	now := stepTime(workflow.Now(ctx))
	if res.sessionEnded {
		return "session error · since " + now
	}
	if paused != nil {
		return fmt.Sprintf("paused: waiting for client tool results from key %s until %s · since %s · turn %s", paused.Owner, stepTime(paused.Deadline), now, turnID)
	}
	return fmt.Sprintf("idle · since %s · last turn %s: %s", now, turnID, res.Outcome)
}
