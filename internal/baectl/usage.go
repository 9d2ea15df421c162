package baectl

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/spf13/pflag"

	"github.com/bae-go/bae-go/api/wire"
)

// usageCommands are the usage and budget commands.
func usageCommands() []command {
	return []command{
		{path: "get usage", setup: getUsageCmd,
			summary: "Show token usage and cost summed per --by day|session|key|profile|provider over a range of UTC days (--from, --to: YYYY-MM-DD, the last 30 days by default)."},
		{path: "list budgets", setup: listBudgetsCmd,
			summary: "List budgets with what each has spent in its current period and when it resets."},
		{path: "set budget", args: []string{"scope", "subject", "limit"}, setup: setBudgetCmd,
			summary: "Set (create, raise or lower) the budget of a key, profile or session (scope) by id (subject): limit in --unit tokens|usd per --period day|week|month|none."},
		{path: "reset budget", args: []string{"scope", "subject"}, setup: resetBudgetCmd,
			summary: "Start a budget's count afresh in its current period."},
		{path: "delete budget", args: []string{"scope", "subject"}, setup: deleteBudgetCmd,
			summary: "Remove a budget."},
		{path: "list budget-changes", setup: listBudgetChangesCmd,
			summary: "Show the audit of budget changes, newest first (--scope, --subject filter it)."},
	}
}

func getUsageCmd(fs *pflag.FlagSet) runFunc {
	var lf listFlags
	lf.register(fs)
	by := fs.String("by", "day", "group by `day`, session, key, profile or provider")
	from := fs.String("from", "", "first UTC `DAY` (YYYY-MM-DD)")
	to := fs.String("to", "", "last UTC `DAY` (YYYY-MM-DD)")
	order := fs.String("order", "", "`key` (default), tokens or cost (largest first)")
	filters := map[string]*string{
		"session_id":    fs.String("session", "", "only this session `ID`"),
		"client_key_id": fs.String("key", "", "only this client key `ID`"),
		"profile_id":    fs.String("profile", "", "only this profile `ID`"),
		"provider":      fs.String("provider", "", "only this provider entry `NAME`"),
	}
	return func(ctx context.Context, e *invocation, _ []string) error {
		q := url.Values{"group_by": {*by}}
		for k, v := range map[string]string{"from": *from, "to": *to, "order": *order} {
			if v != "" {
				q.Set(k, v)
			}
		}
		for k, v := range filters {
			if *v != "" {
				q.Set(k, *v)
			}
		}
		return runList(ctx, e, fs, &lf, "/admin/v1/usage", q, func(items []json.RawMessage) error {
			gs, err := decodeItems[wire.UsageGroup](items)
			if err != nil {
				return err
			}
			if len(gs) == 0 {
				fmt.Fprintln(e.stdout, "no usage in that range")
				return nil
			}
			rows := make([][]string, 0, len(gs)+1)
			var tot wire.UsageSums
			for _, g := range gs {
				rows = append(rows, usageRow(g.Key, g.UsageSums))
				tot.Calls += g.Calls
				tot.InputTokens += g.InputTokens
				tot.OutputTokens += g.OutputTokens
				tot.CacheReadTokens += g.CacheReadTokens
				tot.CacheWriteTokens += g.CacheWriteTokens
				tot.TotalTokens += g.TotalTokens
				tot.CostUSD += g.CostUSD
			}
			rows = append(rows, usageRow("(total)", tot))
			return table(e.stdout, []string{"KEY", "CALLS", "INPUT", "OUTPUT", "CACHE_READ", "CACHE_WRITE", "TOTAL", "COST_USD"}, rows)
		})
	}
}

func usageRow(key string, u wire.UsageSums) []string {
	n := func(v int64) string { return strconv.FormatInt(v, 10) }
	return []string{key, n(u.Calls), n(u.InputTokens), n(u.OutputTokens), n(u.CacheReadTokens), n(u.CacheWriteTokens), n(u.TotalTokens), fmt.Sprintf("%.6f", u.CostUSD)}
}

// amount shows a budget figure in its unit.
func amount(unit string, v float64) string {
	if unit == "usd" {
		return fmt.Sprintf("USD %.6f", v)
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

func budgetRow(b wire.Budget) []string {
	state := "ok"
	if b.Exhausted {
		state = "SPENT"
	}
	return []string{b.Scope, b.Subject, amount(b.Unit, b.Limit), b.Period, amount(b.Unit, b.Spent), state, strOr(b.ResetsAt, "never")}
}

var budgetHeaders = []string{"SCOPE", "SUBJECT", "LIMIT", "PERIOD", "SPENT", "STATE", "RESETS_AT"}

func listBudgetsCmd(fs *pflag.FlagSet) runFunc {
	var lf listFlags
	lf.register(fs)
	return func(ctx context.Context, e *invocation, _ []string) error {
		return runList(ctx, e, fs, &lf, "/admin/v1/budgets", nil, func(items []json.RawMessage) error {
			bs, err := decodeItems[wire.Budget](items)
			if err != nil {
				return err
			}
			if len(bs) == 0 {
				fmt.Fprintln(e.stdout, "no budgets set")
				return nil
			}
			rows := make([][]string, 0, len(bs))
			for _, b := range bs {
				rows = append(rows, budgetRow(b))
			}
			return table(e.stdout, budgetHeaders, rows)
		})
	}
}

func budgetPath(scope, subject string) string {
	return "/admin/v1/budgets/" + url.PathEscape(scope) + "/" + url.PathEscape(subject)
}

func setBudgetCmd(fs *pflag.FlagSet) runFunc {
	unit := fs.String("unit", "tokens", "`tokens` or usd")
	period := fs.String("period", "none", "`day`, week, month or none (a session budget is always none)")
	asJSON := fs.Bool("json", false, "print the raw JSON response")
	return func(ctx context.Context, e *invocation, args []string) error {
		limit, err := strconv.ParseFloat(args[2], 64)
		if err != nil {
			return usagef("set budget: limit must be a number, got %q", args[2])
		}
		c, err := e.admin()
		if err != nil {
			return err
		}
		var b wire.Budget
		raw, err := c.send(ctx, http.MethodPut, budgetPath(args[0], args[1]), wire.BudgetBody{Unit: *unit, Limit: &limit, Period: *period}, &b)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(e.stdout, raw)
		}
		return table(e.stdout, budgetHeaders, [][]string{budgetRow(b)})
	}
}

func resetBudgetCmd(fs *pflag.FlagSet) runFunc {
	asJSON := fs.Bool("json", false, "print the raw JSON response")
	return func(ctx context.Context, e *invocation, args []string) error {
		c, err := e.admin()
		if err != nil {
			return err
		}
		var b wire.Budget
		raw, err := c.send(ctx, http.MethodPost, budgetPath(args[0], args[1])+"/reset", nil, &b)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(e.stdout, raw)
		}
		return table(e.stdout, budgetHeaders, [][]string{budgetRow(b)})
	}
}

func deleteBudgetCmd(_ *pflag.FlagSet) runFunc {
	return func(ctx context.Context, e *invocation, args []string) error {
		c, err := e.admin()
		if err != nil {
			return err
		}
		if _, err := c.send(ctx, http.MethodDelete, budgetPath(args[0], args[1]), nil, nil); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "removed the %s budget of %s\n", args[0], args[1])
		return nil
	}
}

func listBudgetChangesCmd(fs *pflag.FlagSet) runFunc {
	var lf listFlags
	lf.register(fs)
	scope := fs.String("scope", "", "only budgets of this `SCOPE` (key, profile, session)")
	subject := fs.String("subject", "", "only the budget of this `ID`")
	return func(ctx context.Context, e *invocation, _ []string) error {
		q := url.Values{}
		if *scope != "" {
			q.Set("scope", *scope)
		}
		if *subject != "" {
			q.Set("subject", *subject)
		}
		return runList(ctx, e, fs, &lf, "/admin/v1/budgets/changes", q, func(items []json.RawMessage) error {
			cs, err := decodeItems[wire.BudgetChange](items)
			if err != nil {
				return err
			}
			if len(cs) == 0 {
				fmt.Fprintln(e.stdout, "no budget changes")
				return nil
			}
			rows := make([][]string, 0, len(cs))
			for _, c := range cs {
				before, _ := json.Marshal(c.Before)
				after, _ := json.Marshal(c.After)
				rows = append(rows, []string{c.At, c.Actor, c.Action, c.Scope, c.Subject, string(before), string(after)})
			}
			return table(e.stdout, []string{"AT", "ACTOR", "ACTION", "SCOPE", "SUBJECT", "BEFORE", "AFTER"}, rows)
		})
	}
}
