package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bae-go/bae-go/events"
)

// Subagent statuses.
const (
	SubagentRunning   = "running"
	SubagentCompleted = "completed"
	SubagentFailed    = "failed"
	SubagentTimedOut  = "timed_out"
	SubagentCancelled = "cancelled"
)

// Subagent is a remote subagent run.
type Subagent struct {
	ID          string
	SessionID   string
	ClientKeyID string
	Harness     string
	Model       string
	Status      string
	SandboxID   string
	Command     string
	Stdin       *string
	TimeoutSecs int
	ExitCode    *int
	Stdout      *string
	Stderr      *string
	Truncated   bool
	Reason      *string
	Detail      *string
	CreatedAt   time.Time
}

const subagentCols = `id, session_id, client_key_id, harness, model, status, sandbox_id, command, stdin, timeout_secs, exit_code, stdout, stderr, truncated, reason, detail, created_at`

func scanSubagent(row pgx.Row) (Subagent, error) {
	var s Subagent
	err := row.Scan(&s.ID, &s.SessionID, &s.ClientKeyID, &s.Harness, &s.Model, &s.Status, &s.SandboxID, &s.Command, &s.Stdin, &s.TimeoutSecs,
		&s.ExitCode, &s.Stdout, &s.Stderr, &s.Truncated, &s.Reason, &s.Detail, &s.CreatedAt)
	return s, err
}

// InsertSubagent records a launched subagent; an existing id (a retried
// launch) is left as it is.
func (t *Tx) InsertSubagent(ctx context.Context, s Subagent) error {
	tx := t.db
	_, err := tx.Exec(ctx, `INSERT INTO subagents (id, session_id, client_key_id, harness, model, status, sandbox_id, command, stdin, timeout_secs)
		VALUES ($1, $2, $3, $4, $5, 'running', $6, $7, $8, $9) ON CONFLICT (id) DO NOTHING`,
		s.ID, s.SessionID, s.ClientKeyID, s.Harness, s.Model, s.SandboxID, s.Command, s.Stdin, s.TimeoutSecs)
	if err != nil {
		return fmt.Errorf("insert subagent: %w", err)
	}
	return nil
}

// GetSubagent returns a subagent that has not been evicted.
func (s *Store) GetSubagent(ctx context.Context, sessionID, id string) (Subagent, error) {
	sa, err := scanSubagent(s.Pool.QueryRow(ctx, `SELECT `+subagentCols+` FROM subagents WHERE id = $1 AND session_id = $2 AND evicted_at IS NULL`, id, sessionID))
	if errors.Is(err, pgx.ErrNoRows) {
		return Subagent{}, ErrNotFound
	}
	if err != nil {
		return Subagent{}, fmt.Errorf("get subagent: %w", err)
	}
	return sa, nil
}

// TrackedSubagents lists the session's non-evicted subagents in launch order.
func (s *Store) TrackedSubagents(ctx context.Context, sessionID string) ([]Subagent, error) {
	rows, err := s.Pool.Query(ctx, `SELECT `+subagentCols+` FROM subagents WHERE session_id = $1 AND evicted_at IS NULL ORDER BY seq`, sessionID)
	if err != nil {
		return nil, fmt.Errorf("list subagents: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Subagent, error) { return scanSubagent(r) })
}

// HasTrackedSubagents reports whether the status tool has anything to say.
func (s *Store) HasTrackedSubagents(ctx context.Context, sessionID string) (bool, error) {
	var ok bool
	err := s.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM subagents WHERE session_id = $1 AND evicted_at IS NULL)`, sessionID).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("check subagents: %w", err)
	}
	return ok, nil
}

// RunningSubagents counts the session's running subagents.
func (s *Store) RunningSubagents(ctx context.Context, sessionID string) (int, error) {
	var n int
	err := s.Pool.QueryRow(ctx, `SELECT count(*) FROM subagents WHERE session_id = $1 AND status = 'running'`, sessionID).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count subagents: %w", err)
	}
	return n, nil
}

// SubagentOutcome is a terminal transition.
type SubagentOutcome struct {
	Status    string
	ExitCode  *int
	Stdout    *string
	Stderr    *string
	Truncated bool
	Reason    *string
	Detail    *string
}

// FinishSubagent moves a running subagent to a terminal status and appends
// ev in the same transaction. The first transition wins: it reports false,
// appending nothing, when the subagent was no longer running.
func (s *Store) FinishSubagent(ctx context.Context, sessionID, id string, o SubagentOutcome, ev NewEvent) (bool, error) {
	var done bool
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE subagents SET status = $3, exit_code = $4, stdout = $5, stderr = $6, truncated = $7, reason = $8, detail = $9, finished_at = now()
			WHERE id = $1 AND session_id = $2 AND status = 'running'`, id, sessionID, o.Status, o.ExitCode, o.Stdout, o.Stderr, o.Truncated, o.Reason, o.Detail)
		if err != nil {
			return fmt.Errorf("finish subagent: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return nil
		}
		done = true
		_, err = appendEvents(ctx, tx, sessionID, []NewEvent{ev})
		return err
	})
	return done, err
}

// EvictSubagents marks reported terminal subagents as acknowledged. It runs
// in the transaction that stores the status tool's result: evicted in one
// step and reported in another, a crash between them would drop a terminal
// status nobody read (the retried call no longer finds it).
func (t *Tx) EvictSubagents(ctx context.Context, sessionID string, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := t.db.Exec(ctx, `UPDATE subagents SET evicted_at = now() WHERE session_id = $1 AND id = ANY($2) AND status <> 'running'`, sessionID, ids)
	if err != nil {
		return fmt.Errorf("evict subagents: %w", err)
	}
	return nil
}

// CancelSubagents records the cancellation of running subagents (one id, or
// all of the session's with id ""), returning the ids it cancelled.
func (st *Store) CancelSubagents(ctx context.Context, sessionID, id, clientKeyID, reason string) ([]string, error) {
	all, err := st.TrackedSubagents(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	var cancelled []string
	for _, s := range all {
		if (id != "" && s.ID != id) || s.Status != SubagentRunning {
			continue
		}
		r := reason
		ok, err := st.FinishSubagent(ctx, sessionID, s.ID, SubagentOutcome{Status: SubagentCancelled, Reason: &r},
			NewEvent{IdemKey: "subagent/" + s.ID + "/end", ClientKeyID: clientKeyID,
				Payload: events.Subagent{Kind: events.SubagentCancelled, Placement: events.PlacementRemote, SubagentID: s.ID, Harness: s.Harness, Model: s.Model, Reason: &r}})
		if err != nil {
			return cancelled, err
		}
		if ok {
			cancelled = append(cancelled, s.ID)
		}
	}
	return cancelled, nil
}
