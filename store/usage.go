package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// UsageCall is one provider call's usage, recorded with its
// provider.response event.
type UsageCall struct {
	SessionID string
	// IdemKey is the provider.response event's idempotency key: the call
	// is counted once whatever retries its attempt.
	IdemKey     string
	ClientKeyID string
	// Provider is the provider entry's registry name.
	Provider   string
	Model      string
	Input      int64
	Output     int64
	CacheRead  int64
	CacheWrite int64
	// CostNanoUSD is the call's cost at the entry's price (0 without one).
	CostNanoUSD int64
}

// RecordUsage counts a call's usage in the caller's transaction, which
// stores its provider.response: the call, its session's daily totals and
// its key's and profile's. A call whose key is already recorded (a retry
// whose first try committed) changes nothing. The write rides with the
// transaction's next round trip (usually its COMMIT), so the rows it
// locks (a key's and a profile's day) are held only while it commits.
func (t *Tx) RecordUsage(c UsageCall) {
	t.db.queue(queuedWrite{what: "record usage", sql: recordUsageSQL, rows: -1, args: []any{
		c.SessionID, c.IdemKey, c.ClientKeyID, c.Provider, c.Model, c.Input, c.Output, c.CacheRead, c.CacheWrite, c.CostNanoUSD,
	}})
}

const tokenSum = `input_tokens + output_tokens + cache_read_tokens + cache_write_tokens`

// usageShardSQL is the usage_subjects row of a key's or profile's day
// that the session call.session_id adds to (migration 0031): one of 16, so
// answers of different sessions under one key or profile seldom wait for
// each other's COMMIT on the row, and a budget sums at most 16 a day.
const usageShardSQL = `(hashtext(session_id) & 15)::smallint`

// recordUsageSQL stores a provider call's usage once per idempotency key,
// and adds it to the session's, the key's and the profile's sums.
const recordUsageSQL = `WITH call AS (
	INSERT INTO usage_calls (session_id, idem_key, client_key_id, profile_id, provider, model,
		input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_nanousd)
	SELECT $1, $2, $3, s.profile_id, $4, $5, $6, $7, $8, $9, $10 FROM sessions s WHERE s.id = $1
	ON CONFLICT (session_id, idem_key) DO NOTHING
	RETURNING *, (at AT TIME ZONE 'UTC')::date AS day
), totals AS (
	INSERT INTO usage_totals AS t (session_id, day, client_key_id, provider, profile_id, calls,
		input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_nanousd)
	SELECT session_id, day, client_key_id, provider, profile_id, 1,
		input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_nanousd FROM call
	ON CONFLICT (session_id, day, client_key_id, provider) DO UPDATE SET
		calls = t.calls + 1,
		input_tokens = t.input_tokens + excluded.input_tokens,
		output_tokens = t.output_tokens + excluded.output_tokens,
		cache_read_tokens = t.cache_read_tokens + excluded.cache_read_tokens,
		cache_write_tokens = t.cache_write_tokens + excluded.cache_write_tokens,
		cost_nanousd = t.cost_nanousd + excluded.cost_nanousd
)
INSERT INTO usage_subjects AS u (scope, subject, day, shard, tokens, cost_nanousd)
SELECT 'key', client_key_id, day, ` + usageShardSQL + `, ` + tokenSum + `, cost_nanousd FROM call
UNION ALL
SELECT 'profile', profile_id, day, ` + usageShardSQL + `, ` + tokenSum + `, cost_nanousd FROM call
ON CONFLICT (scope, subject, day, shard) DO UPDATE SET
	tokens = u.tokens + excluded.tokens,
	cost_nanousd = u.cost_nanousd + excluded.cost_nanousd`

// Budget scopes, units and periods.
const (
	BudgetKey     = "key"
	BudgetProfile = "profile"
	BudgetSession = "session"

	UnitTokens = "tokens"
	UnitUSD    = "usd"

	PeriodDay   = "day"
	PeriodWeek  = "week"
	PeriodMonth = "month"
	PeriodNone  = "none"
)

// Budget is a cap on what one client key, profile or session may spend.
type Budget struct {
	Scope   string `json:"scope"`
	Subject string `json:"subject"`
	Unit    string `json:"unit"`
	// Limit is in tokens, or in nano-dollars for UnitUSD.
	Limit  int64  `json:"limit"`
	Period string `json:"period"`
}

// BudgetState is a budget with what its current period has spent.
type BudgetState struct {
	Budget
	// Spent is in Limit's unit, since the period began (or the budget was
	// reset within it).
	Spent int64
	// PeriodStart is when the current period began (nil for PeriodNone).
	PeriodStart *time.Time
	// ResetsAt is when the current period ends (nil for PeriodNone).
	ResetsAt  *time.Time
	ResetAt   *time.Time
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Exhausted reports a budget with nothing left.
func (b BudgetState) Exhausted() bool { return b.Spent >= b.Limit }

// budgetStateSQL reads budgets (the rows of the CTE "sel", which the
// caller defines) with what each has spent in its current period, the
// periods taken on the database's clock in UTC.
const budgetStateSQL = `, b AS (
	SELECT bu.*, CASE bu.period
		WHEN 'day' THEN date_trunc('day', now() AT TIME ZONE 'UTC')::date
		WHEN 'week' THEN date_trunc('week', now() AT TIME ZONE 'UTC')::date
		WHEN 'month' THEN date_trunc('month', now() AT TIME ZONE 'UTC')::date
	END AS start
	FROM sel bu
)
SELECT b.scope, b.subject, b.unit, b.limit_amount, b.period, b.start, b.reset_at, b.created_at, b.updated_at,
	CASE WHEN b.scope = 'session' THEN
		(SELECT coalesce(sum(CASE WHEN b.unit = 'usd' THEN t.cost_nanousd ELSE t.` + tokenSum + ` END), 0)::bigint
		 FROM usage_totals t WHERE t.session_id = b.subject AND (b.start IS NULL OR t.day >= b.start))
	ELSE
		(SELECT coalesce(sum(CASE WHEN b.unit = 'usd' THEN u.cost_nanousd ELSE u.tokens END), 0)::bigint
		 FROM usage_subjects u WHERE u.scope = b.scope AND u.subject = b.subject AND (b.start IS NULL OR u.day >= b.start))
	END
	- CASE WHEN b.reset_at IS NOT NULL AND (b.start IS NULL OR b.reset_at >= (b.start::timestamp AT TIME ZONE 'UTC')) THEN b.reset_base ELSE 0 END
FROM b`

func scanBudgetStates(rows pgx.Rows) ([]BudgetState, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (BudgetState, error) {
		var s BudgetState
		var start *time.Time
		err := r.Scan(&s.Scope, &s.Subject, &s.Unit, &s.Limit, &s.Period, &start, &s.ResetAt, &s.CreatedAt, &s.UpdatedAt, &s.Spent)
		if start != nil {
			st := time.Date(start.Year(), start.Month(), start.Day(), 0, 0, 0, 0, time.UTC)
			s.PeriodStart = &st
			var end time.Time
			switch s.Period {
			case PeriodDay:
				end = st.AddDate(0, 0, 1)
			case PeriodWeek:
				end = st.AddDate(0, 0, 7)
			case PeriodMonth:
				end = st.AddDate(0, 1, 0)
			}
			s.ResetsAt = &end
		}
		s.Spent = max(s.Spent, 0)
		return s, err
	})
}

// BudgetsFor reads the budgets a provider call of the session's turn
// owned by clientKeyID is under (the session's, the key's and the
// session's profile's), with what each has spent.
func (r reads) BudgetsFor(ctx context.Context, sessionID, clientKeyID string) ([]BudgetState, error) {
	rows, err := r.q.Query(ctx, budgetsForSQL, sessionID, clientKeyID)
	if err != nil {
		return nil, fmt.Errorf("read budgets: %w", err)
	}
	out, err := scanBudgetStates(rows)
	if err != nil {
		return nil, fmt.Errorf("read budgets: %w", err)
	}
	return out, nil
}

const budgetsForSQL = `WITH sel AS (
	SELECT * FROM budgets WHERE (scope = 'session' AND subject = $1) OR (scope = 'key' AND subject = $2)
	UNION ALL
	SELECT bu.* FROM budgets bu JOIN sessions s ON s.id = $1 WHERE bu.scope = 'profile' AND bu.subject = s.profile_id
)` + budgetStateSQL + ` ORDER BY b.scope, b.subject`

// budgetsForSessionKeysSQL is budgetsForSQL for a request not yet
// authenticated: the key budgets of every client key holding a live key to
// the session, which the caller narrows to the authenticated one
// (keyBudgetsOf). The order is budgetsForSQL's, so narrowed they are the
// same list.
const budgetsForSessionKeysSQL = `WITH sel AS (
	SELECT * FROM budgets WHERE (scope = 'session' AND subject = $1) OR (scope = 'key' AND subject IN (
		SELECT client_key_id FROM keys WHERE role = 'session' AND deleted_at IS NULL AND session_id = $1))
	UNION ALL
	SELECT bu.* FROM budgets bu JOIN sessions s ON s.id = $1 WHERE bu.scope = 'profile' AND bu.subject = s.profile_id
)` + budgetStateSQL + ` ORDER BY b.scope, b.subject`

// keyBudgetsOf keeps, of states read by budgetsForSessionKeysSQL, the
// budgets clientKeyID's turn runs under.
func keyBudgetsOf(states []BudgetState, clientKeyID string) []BudgetState {
	out := make([]BudgetState, 0, len(states))
	for _, b := range states {
		if b.Scope != BudgetKey || b.Subject == clientKeyID {
			out = append(out, b)
		}
	}
	return out
}

// SpentBudget is the first exhausted budget among states, nil when none is.
func SpentBudget(states []BudgetState) *BudgetState {
	for i := range states {
		if states[i].Exhausted() {
			return &states[i]
		}
	}
	return nil
}

// GetBudget reads one budget with its state (ErrNotFound if none).
func (s *Store) GetBudget(ctx context.Context, scope, subject string) (BudgetState, error) {
	return getBudget(ctx, s.Pool, scope, subject)
}

func getBudget(ctx context.Context, q dbtx, scope, subject string) (BudgetState, error) {
	rows, err := q.Query(ctx, `WITH sel AS (SELECT * FROM budgets WHERE scope = $1 AND subject = $2)`+budgetStateSQL, scope, subject)
	if err != nil {
		return BudgetState{}, fmt.Errorf("read budget: %w", err)
	}
	out, err := scanBudgetStates(rows)
	if err != nil {
		return BudgetState{}, fmt.Errorf("read budget: %w", err)
	}
	if len(out) == 0 {
		return BudgetState{}, ErrNotFound
	}
	return out[0], nil
}

// ListBudgets pages through every budget, by scope and subject.
func (s *Store) ListBudgets(ctx context.Context, after int64, limit int) (Page[BudgetState], error) {
	rows, err := s.Pool.Query(ctx, `WITH sel AS (SELECT * FROM budgets)`+budgetStateSQL+` ORDER BY b.scope, b.subject OFFSET $1 LIMIT $2`, after, limit+1)
	if err != nil {
		return Page[BudgetState]{}, fmt.Errorf("list budgets: %w", err)
	}
	out, err := scanBudgetStates(rows)
	if err != nil {
		return Page[BudgetState]{}, fmt.Errorf("list budgets: %w", err)
	}
	return offsetPage(out, after, limit), nil
}

// offsetPage is pageOf for listings whose cursor is how many rows came
// before: rows fetched with limit+1 from offset after.
func offsetPage[T any](rows []T, after int64, limit int) Page[T] {
	if rows == nil {
		rows = []T{}
	}
	if len(rows) <= limit {
		return Page[T]{Items: rows}
	}
	c := strconv.FormatInt(after+int64(limit), 10)
	return Page[T]{Items: rows[:limit], NextCursor: &c}
}

// BudgetChange is one audited change of a budget.
type BudgetChange struct {
	ID      int64           `json:"id"`
	At      time.Time       `json:"-"`
	Actor   string          `json:"actor"`
	Action  string          `json:"action"`
	Scope   string          `json:"scope"`
	Subject string          `json:"subject"`
	Before  json.RawMessage `json:"before"`
	After   json.RawMessage `json:"after"`
}

// Budget change actions.
const (
	BudgetSet    = "set"
	BudgetReset  = "reset"
	BudgetRemove = "remove"
)

func budgetJSON(b *BudgetState) any {
	if b == nil {
		return nil
	}
	out := map[string]any{"unit": b.Unit, "limit": b.Limit, "period": b.Period, "spent": b.Spent}
	enc, _ := json.Marshal(out)
	return string(enc)
}

// changeBudget runs fn on the budget (nil when there is none) under a lock
// of its row, then records the change with the state before and after.
func (s *Store) changeBudget(ctx context.Context, actor, action, scope, subject string, fn func(tx pgx.Tx, before *BudgetState) error) (BudgetState, error) {
	var after BudgetState
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		// Serialises changes of one budget (a row lock would miss a budget
		// not created yet).
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('budget:' || $1 || ':' || $2))`, scope, subject); err != nil {
			return fmt.Errorf("lock budget: %w", err)
		}
		var before *BudgetState
		b, err := getBudget(ctx, tx, scope, subject)
		switch {
		case err == nil:
			before = &b
		case !errors.Is(err, ErrNotFound):
			return err
		}
		if err := fn(tx, before); err != nil {
			return err
		}
		var afterp *BudgetState
		if action != BudgetRemove {
			if after, err = getBudget(ctx, tx, scope, subject); err != nil {
				return err
			}
			afterp = &after
		}
		if _, err := tx.Exec(ctx, `INSERT INTO budget_changes (actor, action, scope, subject, before, after) VALUES ($1, $2, $3, $4, $5::json, $6::json)`,
			actor, action, scope, subject, budgetJSON(before), budgetJSON(afterp)); err != nil {
			return fmt.Errorf("audit budget change: %w", err)
		}
		return nil
	})
	return after, err
}

// SetBudget creates or replaces a budget (raising or lowering it keeps
// what its period has spent), audited as actor's.
func (s *Store) SetBudget(ctx context.Context, actor string, b Budget) (BudgetState, error) {
	return s.changeBudget(ctx, actor, BudgetSet, b.Scope, b.Subject, func(tx pgx.Tx, before *BudgetState) error {
		// A changed period starts afresh: an earlier reset counted in
		// another period's terms.
		_, err := tx.Exec(ctx, `INSERT INTO budgets (scope, subject, unit, limit_amount, period) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (scope, subject) DO UPDATE SET unit = excluded.unit, limit_amount = excluded.limit_amount, period = excluded.period,
				reset_at = CASE WHEN budgets.unit = excluded.unit AND budgets.period = excluded.period THEN budgets.reset_at END,
				reset_base = CASE WHEN budgets.unit = excluded.unit AND budgets.period = excluded.period THEN budgets.reset_base ELSE 0 END,
				updated_at = now()`, b.Scope, b.Subject, b.Unit, b.Limit, b.Period)
		if err != nil {
			return fmt.Errorf("set budget: %w", err)
		}
		return nil
	})
}

// ResetBudget starts the budget's count afresh within its current period
// (ErrNotFound if there is none).
func (s *Store) ResetBudget(ctx context.Context, actor, scope, subject string) (BudgetState, error) {
	return s.changeBudget(ctx, actor, BudgetReset, scope, subject, func(tx pgx.Tx, before *BudgetState) error {
		if before == nil {
			return ErrNotFound
		}
		// What the period spent so far, before any earlier reset of it.
		base := before.Spent
		if _, err := tx.Exec(ctx, `UPDATE budgets SET reset_base = CASE
				WHEN reset_at IS NOT NULL AND ($3::timestamptz IS NULL OR reset_at >= $3) THEN reset_base ELSE 0 END + $4,
				reset_at = now(), updated_at = now() WHERE scope = $1 AND subject = $2`,
			scope, subject, before.PeriodStart, base); err != nil {
			return fmt.Errorf("reset budget: %w", err)
		}
		return nil
	})
}

// DeleteBudget removes a budget (ErrNotFound if there is none).
func (s *Store) DeleteBudget(ctx context.Context, actor, scope, subject string) error {
	_, err := s.changeBudget(ctx, actor, BudgetRemove, scope, subject, func(tx pgx.Tx, before *BudgetState) error {
		if before == nil {
			return ErrNotFound
		}
		_, err := tx.Exec(ctx, `DELETE FROM budgets WHERE scope = $1 AND subject = $2`, scope, subject)
		return err
	})
	return err
}

// BudgetChanges pages through the audit of budget changes, newest first;
// scope and subject filter it when set.
func (s *Store) BudgetChanges(ctx context.Context, scope, subject string, after int64, limit int) (Page[BudgetChange], error) {
	rows, err := s.Pool.Query(ctx, `SELECT id, at, actor, action, scope, subject, before, after FROM budget_changes
		WHERE ($1 = '' OR scope = $1) AND ($2 = '' OR subject = $2) AND ($3 = 0 OR id < $3)
		ORDER BY id DESC LIMIT $4`, scope, subject, after, limit+1)
	if err != nil {
		return Page[BudgetChange]{}, fmt.Errorf("list budget changes: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (BudgetChange, error) {
		var c BudgetChange
		var before, afterJ []byte
		err := r.Scan(&c.ID, &c.At, &c.Actor, &c.Action, &c.Scope, &c.Subject, &before, &afterJ)
		c.Before, c.After = nullJSON(before), nullJSON(afterJ)
		return c, err
	})
	if err != nil {
		return Page[BudgetChange]{}, fmt.Errorf("list budget changes: %w", err)
	}
	return pageOf(out, limit, func(c BudgetChange) int64 { return c.ID }), nil
}

func nullJSON(b []byte) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return b
}

// Usage groupings.
const (
	GroupSession  = "session"
	GroupKey      = "key"
	GroupProfile  = "profile"
	GroupProvider = "provider"
	GroupDay      = "day"
)

var groupColumn = map[string]string{
	GroupSession: "session_id", GroupKey: "client_key_id", GroupProfile: "profile_id", GroupProvider: "provider", GroupDay: "day::text",
}

// UsageQuery selects and groups usage.
type UsageQuery struct {
	GroupBy string
	// From and To bound the UTC days, both included.
	From, To time.Time
	// Filters, each ignored when empty.
	SessionID, ClientKeyID, ProfileID, Provider string
	// ByTokens orders the groups by tokens, ByCost by cost, both largest
	// first; else by the group's key (days oldest first).
	ByTokens, ByCost bool
}

// UsageSums are summed usage figures.
type UsageSums struct {
	Calls       int64
	Input       int64
	Output      int64
	CacheRead   int64
	CacheWrite  int64
	CostNanoUSD int64
}

// Tokens is every token summed.
func (u UsageSums) Tokens() int64 { return u.Input + u.Output + u.CacheRead + u.CacheWrite }

// UsageGroup is one group's sums.
type UsageGroup struct {
	Key string
	UsageSums
}

const usageSums = `coalesce(sum(calls), 0)::bigint, coalesce(sum(input_tokens), 0)::bigint, coalesce(sum(output_tokens), 0)::bigint,
	coalesce(sum(cache_read_tokens), 0)::bigint, coalesce(sum(cache_write_tokens), 0)::bigint, coalesce(sum(cost_nanousd), 0)::bigint`

// Usage pages through q's groups (the cursor counts the groups before),
// with the sums over all of them.
func (s *Store) Usage(ctx context.Context, q UsageQuery, after int64, limit int) (Page[UsageGroup], UsageSums, error) {
	col, ok := groupColumn[q.GroupBy]
	if !ok {
		return Page[UsageGroup]{}, UsageSums{}, fmt.Errorf("usage: unknown grouping %q", q.GroupBy)
	}
	where := `day >= $1::date AND day <= $2::date AND ($3 = '' OR session_id = $3) AND ($4 = '' OR client_key_id = $4)
		AND ($5 = '' OR profile_id = $5) AND ($6 = '' OR provider = $6)`
	args := []any{q.From.UTC().Format(time.DateOnly), q.To.UTC().Format(time.DateOnly), q.SessionID, q.ClientKeyID, q.ProfileID, q.Provider}
	order := "k"
	switch {
	case q.ByTokens:
		order = "sum(" + tokenSum + ") DESC, k"
	case q.ByCost:
		order = "sum(cost_nanousd) DESC, k"
	}
	b := &pgx.Batch{}
	b.Queue(`SELECT `+col+` AS k, `+usageSums+` FROM usage_totals WHERE `+where+` GROUP BY k ORDER BY `+order+` OFFSET $7 LIMIT $8`,
		append(args, after, limit+1)...)
	b.Queue(`SELECT `+usageSums+` FROM usage_totals WHERE `+where, args...)
	br := s.Pool.SendBatch(ctx, b)
	defer br.Close()
	rows, err := br.Query()
	if err != nil {
		return Page[UsageGroup]{}, UsageSums{}, fmt.Errorf("read usage: %w", err)
	}
	groups, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (UsageGroup, error) {
		var g UsageGroup
		err := r.Scan(&g.Key, &g.Calls, &g.Input, &g.Output, &g.CacheRead, &g.CacheWrite, &g.CostNanoUSD)
		return g, err
	})
	if err != nil {
		return Page[UsageGroup]{}, UsageSums{}, fmt.Errorf("read usage: %w", err)
	}
	var tot UsageSums
	if err := br.QueryRow().Scan(&tot.Calls, &tot.Input, &tot.Output, &tot.CacheRead, &tot.CacheWrite, &tot.CostNanoUSD); err != nil {
		return Page[UsageGroup]{}, UsageSums{}, fmt.Errorf("read usage totals: %w", err)
	}
	return offsetPage(groups, after, limit), tot, nil
}

// SessionUsage is a session's usage over its whole life.
func (s *Store) SessionUsage(ctx context.Context, sessionID string) (UsageSums, error) {
	var u UsageSums
	err := s.Pool.QueryRow(ctx, `SELECT `+usageSums+` FROM usage_totals WHERE session_id = $1`, sessionID).
		Scan(&u.Calls, &u.Input, &u.Output, &u.CacheRead, &u.CacheWrite, &u.CostNanoUSD)
	if err != nil {
		return u, fmt.Errorf("read session usage: %w", err)
	}
	return u, nil
}

// ReadBudgetsWithAttempt asks the attempt read that follows in t
// (Attempt, AttemptStreaming or AttemptContext) to read too, in its one
// round trip, the budgets a call of clientKeyID's turn is under
// (BudgetsFor); AttemptBudgets returns them.
func (t *Tx) ReadBudgetsWithAttempt(clientKeyID string) { t.budgetKey = &clientKeyID }

// AttemptBudgets are the budgets the attempt read found (nil when it was
// not asked to read them).
func (t *Tx) AttemptBudgets() []BudgetState { return t.budgets }

// queueAttemptBudgets and readAttemptBudgets add the budgets to an
// attempt read's batch when ReadBudgetsWithAttempt asked for them.
func (t *Tx) queueAttemptBudgets(b *pgx.Batch, sessionID string) {
	if t.budgetKey != nil {
		b.Queue(budgetsForSQL, sessionID, *t.budgetKey)
	}
}

func (t *Tx) readAttemptBudgets(br pgx.BatchResults) error {
	if t.budgetKey == nil {
		return nil
	}
	rows, err := br.Query()
	if err == nil {
		t.budgets, err = scanBudgetStates(rows)
	}
	if err != nil {
		return fmt.Errorf("read budgets: %w", err)
	}
	return nil
}

// Describe says which budget this is, what it allows and when it resets,
// for the failure of a turn it stopped and the refusal of a message.
func (b BudgetState) Describe() string {
	what := map[string]string{BudgetKey: "client key", BudgetProfile: "profile", BudgetSession: "session"}[b.Scope]
	per := map[string]string{PeriodDay: " a day", PeriodWeek: " a week", PeriodMonth: " a month"}[b.Period]
	s := fmt.Sprintf("the %s budget of %s (%s%s) is spent: %s used", what, b.Subject, b.amount(b.Limit), per, b.amount(b.Spent))
	if b.ResetsAt != nil {
		return s + "; it resets at " + FormatTime(*b.ResetsAt)
	}
	return s + "; it does not reset by itself (an admin may raise or reset it)"
}

func (b BudgetState) amount(v int64) string {
	if b.Unit == UnitUSD {
		return fmt.Sprintf("USD %s", strconv.FormatFloat(float64(v)/1e9, 'f', -1, 64))
	}
	return fmt.Sprintf("%d tokens", v)
}

// BudgetSubjectExists reports whether a budget's subject exists: a client
// key, a live profile, or a session (revoked keys and closed sessions
// included, so their budgets can still be read and removed).
func (s *Store) BudgetSubjectExists(ctx context.Context, scope, subject string) (bool, error) {
	var sql string
	switch scope {
	case BudgetKey:
		sql = `SELECT EXISTS (SELECT 1 FROM keys WHERE id = $1 AND role = 'client')`
	case BudgetProfile:
		sql = `SELECT EXISTS (SELECT 1 FROM profiles WHERE id = $1 AND deleted_at IS NULL)`
	case BudgetSession:
		sql = `SELECT EXISTS (SELECT 1 FROM sessions WHERE id = $1)`
	default:
		return false, fmt.Errorf("unknown budget scope %q", scope)
	}
	var ok bool
	if err := s.Pool.QueryRow(ctx, sql, subject).Scan(&ok); err != nil {
		return false, fmt.Errorf("look up budget subject: %w", err)
	}
	return ok, nil
}
