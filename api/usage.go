package api

import (
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/bae-go/bae-go/api/wire"
	"github.com/bae-go/bae-go/store"
)

// maxUsageDays bounds a usage query's range.
const maxUsageDays = 3660

func usageSums(u store.UsageSums) wire.UsageSums {
	return wire.UsageSums{Calls: u.Calls, InputTokens: u.Input, OutputTokens: u.Output, CacheReadTokens: u.CacheRead,
		CacheWriteTokens: u.CacheWrite, TotalTokens: u.Tokens(), CostUSD: usd(u.CostNanoUSD)}
}

func usd(nano int64) float64 { return float64(nano) / 1e9 }

// usage is GET /admin/v1/usage?group_by=&from=&to=: usage summed per
// session, client key, profile, provider entry or UTC day over a range of
// days (both included; the last 30 days by default), filtered by
// session_id, client_key_id, profile_id and provider, ordered by key or
// (order=tokens|cost) largest first.
func (a *adminAPI) usage(w http.ResponseWriter, r *http.Request) *Problem {
	q := r.URL.Query()
	group := q.Get("group_by")
	if group == "" {
		group = store.GroupDay
	}
	switch group {
	case store.GroupSession, store.GroupKey, store.GroupProfile, store.GroupProvider, store.GroupDay:
	default:
		return badRequest("group_by must be one of session, key, profile, provider, day")
	}
	uq := store.UsageQuery{GroupBy: group, SessionID: q.Get("session_id"), ClientKeyID: q.Get("client_key_id"), ProfileID: q.Get("profile_id"), Provider: q.Get("provider")}
	for _, f := range []struct{ name, v string }{{"session_id", uq.SessionID}, {"client_key_id", uq.ClientKeyID}, {"profile_id", uq.ProfileID}, {"provider", uq.Provider}} {
		if p := boundedText(f.name, f.v, wire.MaxNameBytes); p != nil {
			return p
		}
	}
	switch q.Get("order") {
	case "", "key":
	case "tokens":
		uq.ByTokens = true
	case "cost":
		uq.ByCost = true
	default:
		return badRequest("order must be one of key, tokens, cost")
	}
	today := time.Now().UTC().Truncate(24 * time.Hour)
	uq.To, uq.From = today, today.AddDate(0, 0, -29)
	var p *Problem
	if uq.From, p = dayParam(q.Get("from"), "from", uq.From); p != nil {
		return p
	}
	if uq.To, p = dayParam(q.Get("to"), "to", uq.To); p != nil {
		return p
	}
	if uq.To.Before(uq.From) {
		return badRequest("to must not be before from")
	}
	if uq.To.Sub(uq.From) > maxUsageDays*24*time.Hour {
		return badRequest("the range spans more than 3660 days")
	}
	after, limit, p := pageParams(r)
	if p != nil {
		return p
	}
	page, tot, err := a.Store.Usage(r.Context(), uq, after, limit)
	if err != nil {
		return internalError(a.Log, err)
	}
	items := make([]wire.UsageGroup, 0, len(page.Items))
	for _, g := range page.Items {
		items = append(items, wire.UsageGroup{Key: g.Key, UsageSums: usageSums(g.UsageSums)})
	}
	writeJSON(w, http.StatusOK, wire.UsagePage{GroupBy: group, From: uq.From.Format(time.DateOnly), To: uq.To.Format(time.DateOnly),
		Items: items, Totals: usageSums(tot), NextCursor: page.NextCursor})
	return nil
}

// dayParam reads a YYYY-MM-DD day (or an RFC 3339 time, whose UTC day
// counts); "" is def.
func dayParam(v, name string, def time.Time) (time.Time, *Problem) {
	if v == "" {
		return def, nil
	}
	if d, err := time.Parse(time.DateOnly, v); err == nil {
		return d, nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t.UTC().Truncate(24 * time.Hour), nil
	}
	return time.Time{}, badRequest(name + " must be a day (YYYY-MM-DD) or an RFC 3339 time")
}

// sessionUsage is GET /admin/v1/sessions/{id}/usage.
func (a *adminAPI) sessionUsage(w http.ResponseWriter, r *http.Request) *Problem {
	id := chi.URLParam(r, "id")
	sess, err := a.Store.GetSession(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		return notFound("no session " + id)
	} else if err != nil {
		return internalError(a.Log, err)
	}
	tot, err := a.Store.SessionUsage(r.Context(), id)
	if err != nil {
		return internalError(a.Log, err)
	}
	// Every day the session lived (days are UTC).
	from := sess.CreatedAt.UTC().Truncate(24 * time.Hour)
	page, _, err := a.Store.Usage(r.Context(), store.UsageQuery{GroupBy: store.GroupProvider, SessionID: id, From: from, To: time.Now().UTC().AddDate(0, 0, 1)}, 0, 1000)
	if err != nil {
		return internalError(a.Log, err)
	}
	states, err := a.Store.BudgetsFor(r.Context(), id, sess.ClientKeyID)
	if err != nil {
		return internalError(a.Log, err)
	}
	out := wire.SessionUsage{SessionID: id, Totals: usageSums(tot), ByProvider: []wire.UsageGroup{}, Budgets: []wire.Budget{}}
	for _, g := range page.Items {
		out.ByProvider = append(out.ByProvider, wire.UsageGroup{Key: g.Key, UsageSums: usageSums(g.UsageSums)})
	}
	for _, b := range states {
		out.Budgets = append(out.Budgets, budgetView(b))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func budgetView(b store.BudgetState) wire.Budget {
	amount := func(v int64) float64 {
		if b.Unit == store.UnitUSD {
			return usd(v)
		}
		return float64(v)
	}
	opt := func(t *time.Time) *string {
		if t == nil {
			return nil
		}
		s := store.FormatTime(*t)
		return &s
	}
	return wire.Budget{Scope: b.Scope, Subject: b.Subject, Unit: b.Unit, Limit: amount(b.Limit), Period: b.Period,
		Spent: amount(b.Spent), Remaining: amount(max(b.Limit-b.Spent, 0)), Exhausted: b.Exhausted(),
		PeriodStart: opt(b.PeriodStart), ResetsAt: opt(b.ResetsAt), ResetAt: opt(b.ResetAt),
		CreatedAt: store.FormatTime(b.CreatedAt), UpdatedAt: store.FormatTime(b.UpdatedAt)}
}

// maxBudgetUSD bounds a USD budget so its nano-dollars fit their column.
const maxBudgetUSD = 1e9

// budgetScope reads the {scope} and {subject} of a budget route.
func budgetScope(r *http.Request) (string, string, *Problem) {
	scope, subject := chi.URLParam(r, "scope"), chi.URLParam(r, "subject")
	switch scope {
	case store.BudgetKey, store.BudgetProfile, store.BudgetSession:
	default:
		return "", "", notFound("budget scope must be one of key, profile, session")
	}
	if p := boundedText("subject", subject, wire.MaxNameBytes); p != nil {
		return "", "", p
	}
	return scope, subject, nil
}

// actor names who made an admin change, for the audit: the console (its
// logged-in operator), or an admin-API client by address.
func actor(r *http.Request) string {
	if r.RemoteAddr == "console" {
		return "console"
	}
	host := r.RemoteAddr
	if i := strings.LastIndex(host, ":"); i > 0 {
		host = host[:i]
	}
	return "admin-api " + host
}

func (a *adminAPI) listBudgets(w http.ResponseWriter, r *http.Request) *Problem {
	after, limit, p := pageParams(r)
	if p != nil {
		return p
	}
	page, err := a.Store.ListBudgets(r.Context(), after, limit)
	if err != nil {
		return internalError(a.Log, err)
	}
	items := make([]wire.Budget, 0, len(page.Items))
	for _, b := range page.Items {
		items = append(items, budgetView(b))
	}
	writeJSON(w, http.StatusOK, pageBody[wire.Budget]{Items: items, NextCursor: page.NextCursor})
	return nil
}

func (a *adminAPI) getBudget(w http.ResponseWriter, r *http.Request) *Problem {
	scope, subject, p := budgetScope(r)
	if p != nil {
		return p
	}
	b, err := a.Store.GetBudget(r.Context(), scope, subject)
	if errors.Is(err, store.ErrNotFound) {
		return notFound("no " + scope + " budget for " + subject)
	} else if err != nil {
		return internalError(a.Log, err)
	}
	writeJSON(w, http.StatusOK, budgetView(b))
	return nil
}

// putBudget sets (creates, raises, lowers) a budget.
func (a *adminAPI) putBudget(w http.ResponseWriter, r *http.Request) *Problem {
	scope, subject, p := budgetScope(r)
	if p != nil {
		return p
	}
	var body wire.BudgetBody
	c := &clientAPI{Deps: a.Deps}
	if p := c.decodeBody(w, r, &body); p != nil {
		return p
	}
	b := store.Budget{Scope: scope, Subject: subject, Unit: body.Unit, Period: body.Period}
	if b.Period == "" {
		b.Period = store.PeriodNone
	}
	switch b.Period {
	case store.PeriodDay, store.PeriodWeek, store.PeriodMonth, store.PeriodNone:
	default:
		return badRequest("period must be one of day, week, month, none")
	}
	if scope == store.BudgetSession && b.Period != store.PeriodNone {
		return badRequest("a session budget is a lifetime cap: its period is none")
	}
	if body.Limit == nil || math.IsNaN(*body.Limit) || *body.Limit < 0 {
		return badRequest("limit must be a number, 0 or more")
	}
	switch b.Unit {
	case store.UnitTokens:
		if *body.Limit != math.Trunc(*body.Limit) || *body.Limit > 1e15 {
			return badRequest("a token limit must be a whole number of tokens, at most 1e15")
		}
		b.Limit = int64(*body.Limit)
	case store.UnitUSD:
		if *body.Limit > maxBudgetUSD {
			return badRequest("a USD limit must be at most 1e9")
		}
		b.Limit = int64(math.Round(*body.Limit * 1e9))
	default:
		return badRequest("unit must be tokens or usd")
	}
	ok, err := a.Store.BudgetSubjectExists(r.Context(), scope, subject)
	if err != nil {
		return internalError(a.Log, err)
	}
	if !ok {
		return notFound("no " + map[string]string{store.BudgetKey: "client key", store.BudgetProfile: "profile", store.BudgetSession: "session"}[scope] + " " + subject)
	}
	st, err := a.Store.SetBudget(r.Context(), actor(r), b)
	if err != nil {
		return internalError(a.Log, err)
	}
	a.Log.Info("budget set", "scope", scope, "subject", subject, "unit", b.Unit, "limit", b.Limit, "period", b.Period, "actor", actor(r))
	writeJSON(w, http.StatusOK, budgetView(st))
	return nil
}

// resetBudget starts a budget's count afresh in its current period.
func (a *adminAPI) resetBudget(w http.ResponseWriter, r *http.Request) *Problem {
	scope, subject, p := budgetScope(r)
	if p != nil {
		return p
	}
	st, err := a.Store.ResetBudget(r.Context(), actor(r), scope, subject)
	if errors.Is(err, store.ErrNotFound) {
		return notFound("no " + scope + " budget for " + subject)
	} else if err != nil {
		return internalError(a.Log, err)
	}
	a.Log.Info("budget reset", "scope", scope, "subject", subject, "actor", actor(r))
	writeJSON(w, http.StatusOK, budgetView(st))
	return nil
}

func (a *adminAPI) deleteBudget(w http.ResponseWriter, r *http.Request) *Problem {
	scope, subject, p := budgetScope(r)
	if p != nil {
		return p
	}
	err := a.Store.DeleteBudget(r.Context(), actor(r), scope, subject)
	if errors.Is(err, store.ErrNotFound) {
		return notFound("no " + scope + " budget for " + subject)
	} else if err != nil {
		return internalError(a.Log, err)
	}
	a.Log.Info("budget removed", "scope", scope, "subject", subject, "actor", actor(r))
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// budgetChanges is GET /admin/v1/budgets/changes[?scope=&subject=]: the
// audit of budget changes, newest first.
func (a *adminAPI) budgetChanges(w http.ResponseWriter, r *http.Request) *Problem {
	q := r.URL.Query()
	scope, subject := q.Get("scope"), q.Get("subject")
	if p := boundedText("subject", subject, wire.MaxNameBytes); p != nil {
		return p
	}
	switch scope {
	case "", store.BudgetKey, store.BudgetProfile, store.BudgetSession:
	default:
		return badRequest("scope must be one of key, profile, session")
	}
	after, limit, p := pageParams(r)
	if p != nil {
		return p
	}
	page, err := a.Store.BudgetChanges(r.Context(), scope, subject, after, limit)
	if err != nil {
		return internalError(a.Log, err)
	}
	items := make([]wire.BudgetChange, 0, len(page.Items))
	for _, c := range page.Items {
		var before, after any
		_ = json.Unmarshal(c.Before, &before)
		_ = json.Unmarshal(c.After, &after)
		items = append(items, wire.BudgetChange{ID: c.ID, At: store.FormatTime(c.At), Actor: c.Actor, Action: c.Action, Scope: c.Scope, Subject: c.Subject, Before: before, After: after})
	}
	writeJSON(w, http.StatusOK, pageBody[wire.BudgetChange]{Items: items, NextCursor: page.NextCursor})
	return nil
}
