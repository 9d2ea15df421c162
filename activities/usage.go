package activities

import (
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

// spentBudget names the first spent budget among those the attempt's
// read found (store.Tx.ReadBudgetsWithAttempt), nil when none is or none
// were read. PostgreSQL is the source of truth for every replica, so a
// budget overshoots by at most the calls already on their way when it was
// spent. An attempt whose response is stored already called: its caller
// answers from that, never asks.
func spentBudget(tx *store.Tx) *workflows.BudgetSpent {
	b := store.SpentBudget(tx.AttemptBudgets())
	if b == nil {
		return nil
	}
	return &workflows.BudgetSpent{Scope: b.Scope, Subject: b.Subject, Detail: b.Describe()}
}
