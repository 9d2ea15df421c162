package wire

// Usage and budget bodies of the admin API.

// UsageSums are summed usage figures. CostUSD is 0 for providers without a
// price table.
type UsageSums struct {
	Calls            int64   `json:"calls"`
	InputTokens      int64   `json:"input_tokens"`
	OutputTokens     int64   `json:"output_tokens"`
	CacheReadTokens  int64   `json:"cache_read_tokens"`
	CacheWriteTokens int64   `json:"cache_write_tokens"`
	TotalTokens      int64   `json:"total_tokens"`
	CostUSD          float64 `json:"cost_usd"`
}

// UsageGroup is one group of GET /admin/v1/usage: a session, client key,
// profile or provider entry id, or a UTC day (YYYY-MM-DD).
type UsageGroup struct {
	Key string `json:"key"`
	UsageSums
}

// UsagePage is GET /admin/v1/usage: a page of groups, and the sums over
// every group of the query.
type UsagePage struct {
	GroupBy    string       `json:"group_by"`
	From       string       `json:"from"`
	To         string       `json:"to"`
	Items      []UsageGroup `json:"items"`
	Totals     UsageSums    `json:"totals"`
	NextCursor *string      `json:"next_cursor"`
}

// SessionUsage is GET /admin/v1/sessions/{id}/usage: the session's whole
// life, by provider entry, and the budgets its calls are under.
type SessionUsage struct {
	SessionID  string       `json:"session_id"`
	Totals     UsageSums    `json:"totals"`
	ByProvider []UsageGroup `json:"by_provider"`
	Budgets    []Budget     `json:"budgets"`
}

// Budget is a budget as the admin API shows it. Limit, Spent and
// Remaining are in Unit: whole tokens, or USD.
type Budget struct {
	Scope     string  `json:"scope"`
	Subject   string  `json:"subject"`
	Unit      string  `json:"unit"`
	Limit     float64 `json:"limit"`
	Period    string  `json:"period"`
	Spent     float64 `json:"spent"`
	Remaining float64 `json:"remaining"`
	Exhausted bool    `json:"exhausted"`
	// PeriodStart and ResetsAt bound the current period (null for "none").
	PeriodStart *string `json:"period_start"`
	ResetsAt    *string `json:"resets_at"`
	// ResetAt is when an admin last reset it, if ever.
	ResetAt   *string `json:"reset_at"`
	CreatedAt string  `json:"created_at"`
	UpdatedAt string  `json:"updated_at"`
}

// BudgetBody is the body of PUT /admin/v1/budgets/{scope}/{subject}.
type BudgetBody struct {
	Unit   string   `json:"unit"`
	Limit  *float64 `json:"limit"`
	Period string   `json:"period"`
}

// BudgetChange is one audited budget change; Before and After are the
// budget's unit, limit (tokens, or nano-dollars), period and spent amount
// at the time, null where there was none.
type BudgetChange struct {
	ID      int64  `json:"id"`
	At      string `json:"at"`
	Actor   string `json:"actor"`
	Action  string `json:"action"`
	Scope   string `json:"scope"`
	Subject string `json:"subject"`
	Before  any    `json:"before"`
	After   any    `json:"after"`
}
