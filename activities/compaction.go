package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/internal/compaction"
	"github.com/bae-go/bae-go/internal/config"
	"github.com/bae-go/bae-go/internal/provider"
	"github.com/bae-go/bae-go/store"
	"github.com/bae-go/bae-go/workflows"
)

// prepareView is prepareAttempt for a compacting attempt: the request
// carries the view of the conversation (store/compaction), cleared further
// here when that is enough to fit the provider's budget; when only a
// summary would make it fit, the attempt stops before its
// provider.request and asks the workflow for CompactContext. Its append
// commits tx (Tx.AppendAndCommit): nothing may follow it in tx.
func (a *Activities) prepareView(ctx context.Context, tx *store.Tx, in workflows.CallProviderInput, before []store.NewEvent) (attemptPrep, error) {
	p := attemptPrep{compacting: true}
	step := attemptStep(in)
	inputs, ci, err := tx.AttemptContext(ctx, in.SessionID, in.ClientKeyID, idem(in.TurnID, step+"/resp"))
	if err != nil {
		return p, err
	}
	entry, configured := a.Config.Provider(in.Provider)
	evs := before
	// Without a request (stored response, spent budget): neither compacted
	// nor requested.
	request, err := p.requestFrom(tx, inputs, entry, configured)
	if err != nil {
		return p, err
	}
	if request {
		p.bytesPerToken = ci.State.BytesPerToken
		policy := policyOf(ci.Policy)
		p.off = !policy.Enabled
		est := compaction.Estimator{BytesPerToken: ci.State.BytesPerToken}
		budget := entry.Budget()
		st := ci.State
		view := compaction.Render(ci.Messages, st)
		tokens := est.Tokens(len(view) + len(p.tools))
		trigger, target := policy.TriggerTokens(budget), policy.TargetTokens(budget)
		final := in.Retry >= workflows.MaxCompactRetries
		if policy.Enabled && tokens > trigger {
			// Past the trigger, compaction goes down to the target in one
			// step (compaction.TargetOfTrigger): every compaction rewrites
			// the prefix a provider caches, so it must be rare.
			// Layer 1, here: clearing needs no provider; all the results
			// before the kept turns at once, at the same boundary.
			keep := compaction.KeepFrom(ci.Messages, policy.KeepTurns)
			if policy.ClearToolResults && keep > 0 {
				ev, cleared, err := a.clearThrough(ctx, tx, in.TurnRef, in.Provider, ci, st, ci.Messages[keep-1].Seq, est, len(p.tools), budget, events.TriggerBudget, "")
				if err != nil {
					return p, err
				}
				if ev != nil {
					evs = append(evs, *ev)
					st = cleared
					view = compaction.Render(ci.Messages, st)
					tokens = est.Tokens(len(view) + len(p.tools))
				}
			}
			switch {
			case tokens <= target:
			case tokens <= trigger && !policy.Summarize:
				// Clearing is all this profile does, and it fits.
			case !final && compaction.KeepFrom(ci.Messages, 1) > 0:
				// Older turns to summarize, or to clear harder.
				p.need = &workflows.CompactionNeed{}
			case tokens > budget:
				p.need = &workflows.CompactionNeed{NoFit: true}
			}
		}
		if p.need == nil {
			p.messages = view
			req := requestPayload(in.Attempt, entry, p.tools, p.settings)
			ne := store.NewEvent{IdemKey: idem(in.TurnID, step+"/req"), TurnID: in.TurnID, ClientKeyID: in.ClientKeyID}
			// Stored by reference: the view is the conversation as of the
			// counter, or what compaction makes of it (store.NewEvent.View).
			at := ci.Counter
			switch {
			case st.ThroughSeq == 0 && st.ClearedSeq == 0:
				ne.MessagesAt = &at
			case st.Summary == "" || st.SummaryID != "":
				ne.MessagesAt = &at
				ne.View = &compaction.State{ThroughSeq: st.ThroughSeq, ClearedSeq: st.ClearedSeq, Summary: st.Summary, SummaryID: st.SummaryID}
			default:
				// A summary without its id cannot be named: stored as sent.
				req.Messages = json.RawMessage(view)
			}
			ne.Payload = req
			evs = append(evs, ne)
			p.fence = fenceAt(tx, in, ci.Counter)
		} else if len(evs) > len(before) {
			// A clearing stored without a request (the attempt asks for
			// CompactContext next) is fenced as a request would be.
			fenceAt(tx, in, ci.Counter)
		}
	}
	// The append is the transaction's last write: it commits in its round
	// trip (the caller returns right after).
	switch {
	case p.messages != nil && a.Deltas != nil && !entry.NoStream:
		// The request is stored, so the call is made: its run is numbered
		// in the append's round trip, not in a transaction of its own
		// while the request is on its way.
		run := &store.NumberRun{TurnID: in.TurnID, Step: step}
		_, err = tx.AppendAndCommit(ctx, in.SessionID, evs, store.Then{Run: run})
		p.run = &run.Got
	case len(evs) > 0:
		_, err = tx.AppendAndCommit(ctx, in.SessionID, evs, store.Then{})
	}
	return p, err
}

// policyOf is a stored policy, the default when it is absent (or, never
// expected, unreadable: compaction on is the safe side).
func policyOf(raw json.RawMessage) compaction.Policy {
	p, err := compaction.ParsePolicy(raw)
	if err != nil {
		return compaction.DefaultPolicy()
	}
	return p
}

// clearThrough moves the cleared boundary to seq and returns the
// session.compaction event that says so, or nil when nothing new would be
// cleared.
func (a *Activities) clearThrough(ctx context.Context, tx *store.Tx, ref workflows.TurnRef, providerName string, ci store.ContextInputs, st compaction.State, seq int64, est compaction.Estimator, toolBytes, budget int, trigger, fallback string) (*store.NewEvent, compaction.State, error) {
	if seq <= st.ClearedSeq {
		return nil, st, nil
	}
	var covered []compaction.Message
	for _, m := range ci.Messages {
		if m.Seq > st.ClearedSeq && m.Seq <= seq {
			covered = append(covered, m)
		}
	}
	ids := compaction.ToolResultIDs(covered)
	if len(ids) == 0 {
		return nil, st, nil
	}
	before := est.Tokens(len(compaction.Render(ci.Messages, st)) + toolBytes)
	if err := tx.ClearThrough(ctx, ref.SessionID, seq); err != nil {
		return nil, st, err
	}
	next := st
	next.ClearedSeq = seq
	after := est.Tokens(len(compaction.Render(ci.Messages, next)) + toolBytes)
	evRange, err := tx.TurnsRange(ctx, ref.SessionID, covered[0].TurnID(), covered[len(covered)-1].TurnID())
	if err != nil {
		return nil, st, err
	}
	id := idem(ref.TurnID, fmt.Sprintf("clear/%d", seq))
	return &store.NewEvent{
		IdemKey: id, TurnID: ref.TurnID, ClientKeyID: ref.ClientKeyID,
		Payload: events.CompactionPayload{
			CompactionID: id, Layer: events.LayerClearToolResults, Trigger: trigger, Provider: providerName,
			Events: evRange, Messages: events.SeqRange{From: covered[0].Seq, Through: seq},
			TokensBefore: before, TokensAfter: after, Budget: budget, ClearedToolResults: ids, Fallback: fallback,
		},
	}, next, nil
}

// attemptTooLong records a too-long refusal (provider.response, without
// the provider_call_failed error: it is not the provider's failure yet)
// and asks the workflow to compact harder and retry.
func (a *Activities) attemptTooLong(ctx context.Context, in workflows.CallProviderInput, step, kindName string, ce *provider.CallError, off bool, fence *store.AttemptFence, deltaEnd int64) (workflows.CallProviderResult, error) {
	var body any
	if len(ce.Body) > 0 {
		body = ce.Body
	}
	respIdem := idem(in.TurnID, step+"/resp")
	if err := a.untilStored(ctx, "store provider refusal", func(ctx context.Context) error {
		return a.appendFenced(ctx, in.SessionID, fence, deltaEndOf(in.TurnID, respIdem, deltaEnd), store.NewEvent{
			IdemKey: respIdem, TurnID: in.TurnID, ClientKeyID: in.ClientKeyID,
			Payload: events.ProviderResponsePayload{Attempt: in.Attempt, Kind: attemptKind(in.Attempt), Provider: events.Optional(kindName), Status: ce.Status, Error: ce.Detail, Body: body},
		})
	}); err != nil {
		return a.fenced(ctx, in, step, err)
	}
	a.logger(ctx, in.TurnID).Warn("provider refused the request as too long", "provider", in.Provider, "attempt", in.Attempt, "retry", in.Retry)
	res := tooLongResult(in)
	res.NeedsCompaction.NoFit = res.NeedsCompaction.NoFit || off
	return res, nil
}

func tooLongResult(in workflows.CallProviderInput) workflows.CallProviderResult {
	return workflows.CallProviderResult{NeedsCompaction: &workflows.CompactionNeed{TooLong: true, NoFit: in.Retry >= workflows.MaxCompactRetries}}
}

// summaryPerBlock bounds each block of the transcript a summarizer reads.
const summaryPerBlock = 2000

// maxSummaryTokens bounds the summary a summarizer writes.
const maxSummaryTokens = 2048

// CompactContext summarizes the oldest turns of the conversation, keeping
// the policy's last turns verbatim (only the current one when Harder), and
// stores the summary once: its id is derived from the attempt, so a retry
// after a crash finds what the first try stored. A summarizer that fails
// (every provider of the chain, or past the activity's retries) falls back
// to clearing every tool result before the current turn.
func (a *Activities) CompactContext(ctx context.Context, in workflows.CompactContextInput) error {
	ctx, done := a.work.track(ctx, in.TurnID)
	defer done()
	id := idem(in.TurnID, fmt.Sprintf("i%d/a%d/r%d/compact", in.Iteration, in.Attempt, in.Retry))
	if _, err := a.Store.EventByIdem(ctx, in.SessionID, id); err == nil {
		return nil // done by an earlier try
	} else if !errors.Is(err, store.ErrNotFound) {
		return err
	}
	ci, err := a.Store.ContextOf(ctx, in.SessionID)
	if err != nil {
		return err
	}
	entry, ok := a.Config.Provider(in.Provider)
	if !ok {
		return nil // the attempt reports the missing provider
	}
	policy := policyOf(ci.Policy)
	if !policy.Enabled {
		return nil // turned off meanwhile: the retry fails as it did
	}
	keepTurns := policy.KeepTurns
	if in.Harder {
		keepTurns = 1
	}
	keep := compaction.KeepFrom(ci.Messages, keepTurns)
	current := compaction.KeepFrom(ci.Messages, 1)
	if current == 0 {
		return nil // only the current turn: nothing to compact
	}
	if keep == 0 {
		keep = current
	}
	est := compaction.Estimator{BytesPerToken: ci.State.BytesPerToken}
	budget := entry.Budget()
	if !in.Harder {
		// The kept turns take at most half the target, so the summarized
		// view lands well under it and the next turns append for long.
		keep = compaction.KeepWithin(ci.Messages, keep, current, ci.State.ClearedSeq, est, policy.TargetTokens(budget)/2)
	}
	trigger := events.TriggerBudget
	if in.Harder {
		trigger = events.TriggerTooLong
	}
	// Fenced by the attempt's conversation: a run of a superseded turn
	// calls no summarizer, and stores no summary or boundary (a later
	// turn's conversation is not this run's to compact).
	fence := tailFence(in.SessionID, tailKey(in.TurnID, in.Iteration))
	if err := a.checkFence(ctx, fence); err != nil {
		return a.compactFenced(ctx, in, id, err)
	}
	var fallback string
	if policy.Summarize {
		sum, usage, err := a.summarize(ctx, policy, in, ci.State.Summary, ci.Messages[:keep], budget, est)
		if err == nil {
			return a.compactFenced(ctx, in, id, a.storeSummary(ctx, in, fence, id, ci, keep, sum, usage, est, budget, trigger))
		}
		last := !activity.IsActivity(ctx) || activity.GetInfo(ctx).Attempt >= workflows.CompactAttempts
		var ce *provider.CallError
		if !last && (!errors.As(err, &ce) || ce.Retryable) && ctx.Err() == nil {
			return err // Temporal tries again
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		fallback = "summarizer failed: " + err.Error()
		a.logger(ctx, in.TurnID).Warn("summarizer failed; clearing tool results instead", "error", err)
	} else {
		fallback = "summaries are off for this profile"
	}
	// Clearing harder: every tool result before the current turn.
	return a.compactFenced(ctx, in, id, a.Store.Tx(ctx, func(tx *store.Tx) error {
		tx.Fence(fence)
		ev, _, err := a.clearThrough(ctx, tx, in.TurnRef, in.Provider, ci, ci.State, ci.Messages[current-1].Seq, est, 0, budget, trigger, fallback)
		if err != nil || ev == nil {
			return err
		}
		ev.IdemKey = id
		p := ev.Payload.(events.CompactionPayload)
		p.CompactionID = id
		ev.Payload = p
		_, err = tx.AppendEvents(ctx, in.SessionID, *ev)
		return err
	}))
}

// compactFenced answers a compaction whose fence did not hold (err): done
// when another run of it stored its compaction first, superseded
// otherwise. Any other error is returned as it is.
func (a *Activities) compactFenced(ctx context.Context, in workflows.CompactContextInput, id string, err error) error {
	if !errors.Is(err, store.ErrTurnSuperseded) {
		return err
	}
	if _, serr := a.Store.EventByIdem(ctx, in.SessionID, id); !errors.Is(serr, store.ErrNotFound) {
		return serr
	}
	return a.turnSuperseded(ctx, in.TurnID, "compaction", err, "iteration", in.Iteration, "attempt", in.Attempt, "retry", in.Retry)
}

// storeSummary stores the summary and its session.compaction event in one
// transaction, fenced by the attempt's conversation.
func (a *Activities) storeSummary(ctx context.Context, in workflows.CompactContextInput, fence store.AttemptFence, id string, ci store.ContextInputs, keep int, sum string, usage *events.SummarizerUsage, est compaction.Estimator, budget int, trigger string) error {
	covered := ci.Messages[:keep]
	through := covered[len(covered)-1].Seq
	before := est.Tokens(len(compaction.Render(ci.Messages, ci.State)))
	return a.untilStored(ctx, "store summary", func(ctx context.Context) error {
		return a.Store.Tx(ctx, func(tx *store.Tx) error {
			tx.Fence(fence)
			stored, err := tx.StoreSummary(ctx, in.SessionID, store.Summary{ID: id, ThroughSeq: through, Text: sum}, ci.State.ClearedSeq)
			if err != nil {
				return err
			}
			next := ci.State
			next.ThroughSeq, next.Summary = stored.ThroughSeq, stored.Text
			next.ClearedSeq = max(next.ClearedSeq, stored.ThroughSeq)
			after := est.Tokens(len(compaction.Render(ci.Messages[keep:], next)))
			from := covered[0]
			evRange, err := tx.TurnsRange(ctx, in.SessionID, from.TurnID(), covered[len(covered)-1].TurnID())
			if err != nil {
				return err
			}
			if ci.State.ThroughSeq == 0 {
				evRange.From = 1 // the summary covers the session from its start
			}
			_, err = tx.AppendEvents(ctx, in.SessionID, store.NewEvent{
				IdemKey: id, TurnID: in.TurnID, ClientKeyID: in.ClientKeyID,
				Payload: events.CompactionPayload{
					CompactionID: id, Layer: events.LayerSummary, Trigger: trigger, Provider: in.Provider,
					Events: evRange, Messages: events.SeqRange{From: from.Seq, Through: through},
					TokensBefore: before, TokensAfter: after, Budget: budget, Summary: stored.Text, Summarizer: usage,
				},
			})
			if err == nil && usage != nil {
				tx.RecordUsage(a.summarizerUsage(in, id, *usage))
			}
			return err
		})
	})
}

// summarize asks the summarizer (the policy's, else the session's chain in
// order) for a summary of msgs after prev.
func (a *Activities) summarize(ctx context.Context, policy compaction.Policy, in workflows.CompactContextInput, prev string, msgs []compaction.Message, budget int, est compaction.Estimator) (string, *events.SummarizerUsage, error) {
	chain := in.Providers
	if policy.SummarizerProvider != "" {
		chain = []string{policy.SummarizerProvider}
	}
	lookup := a.Lookup
	if lookup == nil {
		lookup = os.LookupEnv
	}
	stop := heartbeatEvery(ctx, 2*time.Second)
	defer stop()
	var errs []error
	for _, name := range chain {
		entry, ok := a.Config.Provider(name)
		if !ok {
			errs = append(errs, fmt.Errorf("summarizer %q is not configured", name))
			continue
		}
		token, err := config.ResolveEnvTokens(entry.AuthToken, lookup)
		if err != nil {
			errs = append(errs, fmt.Errorf("summarizer %q: %w", name, err))
			continue
		}
		outTokens := min(entry.MaxTokens, maxSummaryTokens)
		if outTokens <= 0 {
			outTokens = maxSummaryTokens
		}
		// The transcript fits the summarizer's own budget, with room for
		// the instruction and the answer.
		sumBudget := min(entry.Budget(), budget)
		bpt := est.BytesPerToken
		if bpt <= 0 {
			bpt = compaction.DefaultBytesPerToken
		}
		maxBytes := max(int(float64(sumBudget-outTokens)*bpt*0.7), 1024)
		var resp *provider.Response
		for {
			text := compaction.SummaryInstruction + compaction.Transcript(prev, msgs, summaryPerBlock, maxBytes)
			body, _ := json.Marshal([]map[string]any{{"role": "user", "content": text}})
			resp, err = a.Provider.Call(ctx, provider.Endpoint{Kind: entry.Kind, BaseURL: entry.EffectiveBaseURL(), Model: entry.Model, MaxTokens: outTokens, AuthToken: token}, body, nil)
			var ce *provider.CallError
			// The summarizer's own window may be smaller than its entry
			// says: a shorter transcript, down to a floor.
			if err != nil && errors.As(err, &ce) && provider.TooLong(entry.Kind, ce) && maxBytes > 2048 {
				maxBytes /= 2
				continue
			}
			break
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("summarizer %q: %w", name, err))
			continue
		}
		var content any
		_ = json.Unmarshal(resp.Canonical.Content, &content)
		sum := provider.Text(content)
		if sum == "" {
			errs = append(errs, fmt.Errorf("summarizer %q wrote no text", name))
			continue
		}
		// A summary is bounded whatever the summarizer wrote.
		if limit := int(float64(outTokens) * bpt); len(sum) > limit {
			sum = sum[:limit]
		}
		return sum, &events.SummarizerUsage{
			Provider: name, Model: entry.Model,
			InputTokens: provider.InputTokens(entry.Kind, resp.Raw), OutputTokens: provider.OutputTokens(entry.Kind, resp.Raw),
		}, nil
	}
	if len(errs) == 0 {
		return "", nil, errors.New("no summarizer provider")
	}
	// The last error decides whether a retry may help.
	return "", nil, errors.Join(errs...)
}
