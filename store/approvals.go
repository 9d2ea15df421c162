package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/internal/lib/ids"
)

// ApprovalPrefix is the id prefix of an approval request.
const ApprovalPrefix = "apr_"

// ApprovalPending is the state of an approval nobody has decided yet; the
// other states are the events.Decision values.
const ApprovalPending = "pending"

// NewApproval is an approval request to store.
type NewApproval struct {
	SessionID   string
	TurnID      string
	Iteration   int
	ToolCallID  string
	ToolKind    events.Dispatch
	ToolName    string
	Server      string
	Arguments   json.RawMessage
	InputSchema json.RawMessage
	Deciders    events.Deciders
	TurnDriver  string
	Deadline    time.Time
	OnTimeout   events.OnTimeout
}

// Approval is one approval request and, once decided, its decision.
type Approval struct {
	Seq int64
	ID  string
	// NewApproval is the request as it was stored.
	NewApproval
	// State is ApprovalPending or an events.Decision.
	State             string
	ApprovedArguments json.RawMessage
	Message           string
	DecidedBy         *events.DecidedBy
	DecidedAt         *time.Time
	RequestedAt       time.Time
}

// Pending reports an approval still waiting for its decision.
func (a Approval) Pending() bool { return a.State == ApprovalPending }

const approvalCols = `seq, id, session_id, turn_id, iteration, tool_call_id, tool_kind, tool_name, coalesce(server, ''), arguments, input_schema,
	deciders, turn_driver, deadline, on_timeout, state, approved_arguments, coalesce(message, ''), decided_by, decided_at, requested_at`

func scanApproval(row pgx.Row) (Approval, error) {
	var a Approval
	var decided []byte
	err := row.Scan(&a.Seq, &a.ID, &a.SessionID, &a.TurnID, &a.Iteration, &a.ToolCallID, &a.ToolKind, &a.ToolName, &a.Server, &a.Arguments, &a.InputSchema,
		&a.Deciders, &a.TurnDriver, &a.Deadline, &a.OnTimeout, &a.State, &a.ApprovedArguments, &a.Message, &decided, &a.DecidedAt, &a.RequestedAt)
	if err != nil {
		return a, err
	}
	if len(decided) > 0 {
		var d events.DecidedBy
		if err := json.Unmarshal(decided, &d); err != nil {
			return a, fmt.Errorf("decode decided_by: %w", err)
		}
		a.DecidedBy = &d
	}
	return a, nil
}

func jsonArg(raw json.RawMessage) any {
	if len(raw) == 0 {
		return nil
	}
	return string(raw)
}

// RequestApproval stores an approval request and its approval.request
// event (under idemKey), once: a retry returns the request already stored.
func (t *Tx) RequestApproval(ctx context.Context, in NewApproval, idemKey, clientKeyID string) (Approval, error) {
	a, err := scanApproval(t.db.QueryRow(ctx, `INSERT INTO approvals (id, session_id, turn_id, iteration, tool_call_id, tool_kind, tool_name, server, arguments, input_schema,
			deciders, turn_driver, deadline, on_timeout)
		VALUES ($1, $2, $3, $4, $5, $6, $7, nullif($8, ''), $9, $10, $11, $12, $13, $14)
		ON CONFLICT (session_id, turn_id, iteration, tool_call_id) DO NOTHING RETURNING `+approvalCols,
		ids.New(ApprovalPrefix), in.SessionID, in.TurnID, in.Iteration, in.ToolCallID, in.ToolKind, in.ToolName, in.Server, jsonArg(in.Arguments), jsonArg(in.InputSchema),
		in.Deciders, in.TurnDriver, in.Deadline, in.OnTimeout))
	if errors.Is(err, pgx.ErrNoRows) {
		return scanApproval(t.db.QueryRow(ctx, `SELECT `+approvalCols+` FROM approvals
			WHERE session_id = $1 AND turn_id = $2 AND iteration = $3 AND tool_call_id = $4`, in.SessionID, in.TurnID, in.Iteration, in.ToolCallID))
	}
	if err != nil {
		return Approval{}, fmt.Errorf("insert approval: %w", err)
	}
	_, err = t.AppendEvents(ctx, in.SessionID, NewEvent{IdemKey: idemKey, TurnID: in.TurnID, ClientKeyID: clientKeyID, Payload: events.ApprovalRequestPayload{
		ApprovalID: a.ID, TurnID: a.TurnID, ToolCallID: a.ToolCallID, ToolKind: a.ToolKind, ToolName: a.ToolName, Server: events.Optional(a.Server),
		Arguments: a.Arguments, Deciders: a.Deciders, Deadline: FormatTime(a.Deadline), OnTimeout: a.OnTimeout,
	}})
	return a, err
}

// Settlement is an approval's decision as it is stored.
type Settlement struct {
	Decision events.Decision
	// Arguments are the approved arguments when a decider edited them.
	Arguments json.RawMessage
	Message   string
	By        events.DecidedBy
}

// SettleApproval moves a pending approval to its decision. It reports
// false, with the approval as it is, when it was already decided (a retry
// of the same settlement, or the approval ended otherwise).
func (t *Tx) SettleApproval(ctx context.Context, id string, s Settlement) (Approval, bool, error) {
	by, err := json.Marshal(s.By)
	if err != nil {
		return Approval{}, false, err
	}
	a, err := scanApproval(t.db.QueryRow(ctx, `UPDATE approvals SET state = $2, approved_arguments = $3, message = nullif($4, ''), decided_by = $5, decided_at = now()
		WHERE id = $1 AND state = 'pending' RETURNING `+approvalCols, id, string(s.Decision), jsonArg(s.Arguments), s.Message, string(by)))
	if errors.Is(err, pgx.ErrNoRows) {
		a, err = getApproval(ctx, t.db, id)
		return a, false, err
	}
	if err != nil {
		return Approval{}, false, fmt.Errorf("settle approval: %w", err)
	}
	return a, true, nil
}

func getApproval(ctx context.Context, q dbtx, id string) (Approval, error) {
	a, err := scanApproval(q.QueryRow(ctx, `SELECT `+approvalCols+` FROM approvals WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Approval{}, ErrNotFound
	}
	if err != nil {
		return Approval{}, fmt.Errorf("get approval: %w", err)
	}
	return a, nil
}

// GetApproval returns an approval by id (ErrNotFound if missing).
func (s *Store) GetApproval(ctx context.Context, id string) (Approval, error) {
	return getApproval(ctx, s.Pool, id)
}

// ApprovalFilter narrows a listing of approvals.
type ApprovalFilter struct {
	// State is "pending", "decided" or "" for both.
	State     string
	SessionID string
}

// ListApprovals pages approvals in request order.
func (s *Store) ListApprovals(ctx context.Context, f ApprovalFilter, after int64, limit int) (Page[Approval], error) {
	rows, err := s.Pool.Query(ctx, `SELECT `+approvalCols+` FROM approvals
		WHERE seq > $1 AND ($3 = '' OR session_id = $3)
		  AND ($2 = '' OR ($2 = 'pending' AND state = 'pending') OR ($2 = 'decided' AND state <> 'pending'))
		ORDER BY seq LIMIT $4`, after, f.State, f.SessionID, limit+1)
	if err != nil {
		return Page[Approval]{}, fmt.Errorf("list approvals: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Approval, error) { return scanApproval(r) })
	if err != nil {
		return Page[Approval]{}, fmt.Errorf("list approvals: %w", err)
	}
	return pageOf(list, limit, func(a Approval) int64 { return a.Seq }), nil
}

// ApprovedArguments returns the arguments a decider approved for a call,
// or nil when the call runs with the model's own (approved as they were,
// or by its deadline).
func (s *Store) ApprovedArguments(ctx context.Context, id string) (json.RawMessage, error) {
	a, err := getApproval(ctx, s.Pool, id)
	if err != nil {
		return nil, err
	}
	return a.ApprovedArguments, nil
}

// TurnHeldOnApproval reports whether the turn has an approval still
// pending (its workflow holds the turn until the decision).
func (s *Store) TurnHeldOnApproval(ctx context.Context, sessionID, turnID string) (bool, error) {
	var held bool
	err := s.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM approvals WHERE session_id = $1 AND turn_id = $2 AND state = 'pending')`, sessionID, turnID).Scan(&held)
	if err != nil {
		return false, fmt.Errorf("read pending approvals of turn %s: %w", turnID, err)
	}
	return held, nil
}
