package activities

import (
	"context"
	"encoding/json"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/internal/provider"
	"github.com/bae-go/bae-go/store"
	"github.com/bae-go/bae-go/workflows"
)

// usageCall is what a call's response says it used, priced at its
// provider entry's price table, for the turn's owner.
func (a *Activities) usageCall(in workflows.CallProviderInput, respIdem, kind string, raw json.RawMessage) store.UsageCall {
	entry, _ := a.Config.Provider(in.Provider)
	u := provider.UsageOf(kind, raw)
	return store.UsageCall{
		SessionID: in.SessionID, IdemKey: respIdem, ClientKeyID: in.ClientKeyID,
		Provider: in.Provider, Model: entry.Model,
		Input: u.Input, Output: u.Output, CacheRead: u.CacheRead, CacheWrite: u.CacheWrite,
		CostNanoUSD: entry.Price.Cost(u),
	}
}

// summarizerUsage is a summarizer call's usage, counted with its
// session.compaction event under the compaction's id. The event reports
// the input as one figure (cached input included), counted as input.
func (a *Activities) summarizerUsage(in workflows.CompactContextInput, id string, su events.SummarizerUsage) store.UsageCall {
	entry, _ := a.Config.Provider(su.Provider)
	u := provider.Usage{Input: int64(su.InputTokens), Output: int64(su.OutputTokens)}
	return store.UsageCall{
		SessionID: in.SessionID, IdemKey: id, ClientKeyID: in.ClientKeyID,
		Provider: su.Provider, Model: su.Model, Input: u.Input, Output: u.Output,
		CostNanoUSD: entry.Price.Cost(u),
	}
}

// spentBudget reads, in the attempt's transaction, the budgets its call is
// under, and names the first one spent. PostgreSQL is the source of truth
// for every replica, so a budget overshoots by at most the calls already
// on their way when it was spent. An attempt whose response is stored
// already called: it answers from that, never stopped.
func (a *Activities) spentBudget(ctx context.Context, tx *store.Tx, in workflows.CallProviderInput) (*workflows.BudgetSpent, error) {
	stored, states, err := tx.BudgetsBeforeCall(ctx, in.SessionID, in.ClientKeyID, idem(in.TurnID, attemptStep(in)+"/resp"))
	if err != nil || stored {
		return nil, err
	}
	b := store.SpentBudget(states)
	if b == nil {
		return nil, nil
	}
	return &workflows.BudgetSpent{Scope: b.Scope, Subject: b.Subject, Detail: b.Describe()}, nil
}
