package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bae-go/bae-go/events"
)

// ErrClientKeyRevoked is an open or join whose client key was revoked
// before its session could be stored.
var ErrClientKeyRevoked = errors.New("client key revoked")

// Caps bound what one client key, one profile and one session may hold at
// once. Zero is no bound.
type Caps struct {
	SessionsPerKey      int
	SessionsPerProfile  int
	SandboxesPerKey     int
	SandboxesPerProfile int
	// QueuedTurnsPerSession and QueuedTurnsPerKey bound the turns stored
	// and not yet begun, of one session and of one client key over its
	// open sessions.
	QueuedTurnsPerSession int
	QueuedTurnsPerKey     int
}

// Quota scopes and resources, as QuotaError names them.
const (
	ScopeClientKey = "client_key"
	ScopeProfile   = "profile"
	ScopeSession   = "session"

	ResourceSessions  = "sessions"
	ResourceSandboxes = "sandboxes"
	ResourceStreams   = "streams"
	// ResourceQueuedTurns: turns stored and not yet begun.
	ResourceQueuedTurns = "queued turns"
)

// QuotaError is a refusal because a cap is reached: Scope already holds
// Limit of Resource.
type QuotaError struct {
	Scope    string
	Resource string
	Limit    int
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("this %s already holds %d open %s, its limit", e.Scope, e.Limit, e.Resource)
}

// lockClientKey checks, inside tx, that the client key is unrevoked and
// locks its row until tx ends: a revocation (an UPDATE of the row) waits
// for tx and then sees what tx stored, and two opens of one key count their
// sessions one after the other.
func lockClientKey(ctx context.Context, tx pgx.Tx, clientKeyID string) error {
	var live bool
	err := tx.QueryRow(ctx, `SELECT deleted_at IS NULL FROM keys WHERE id = $1 AND role = 'client' FOR NO KEY UPDATE`, clientKeyID).Scan(&live)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && !live) {
		return ErrClientKeyRevoked
	}
	if err != nil {
		return fmt.Errorf("lock client key: %w", err)
	}
	return nil
}

// lockProfile locks a profile's row so that two opens on it count its
// sessions (or sandboxes) one after the other. A deleted profile is not
// this check's business: the caller already resolved it.
func lockProfile(ctx context.Context, tx pgx.Tx, profileID string) error {
	if _, err := tx.Exec(ctx, `SELECT 1 FROM profiles WHERE id = $1 FOR NO KEY UPDATE`, profileID); err != nil {
		return fmt.Errorf("lock profile: %w", err)
	}
	return nil
}

// checkSessionCaps refuses a new session (or a join of another session,
// when profile is false) once the key or the profile holds its cap of open
// sessions. A session counts for every client key holding a live session
// key to it; exceptSession (a join's own session) is not counted.
func checkSessionCaps(ctx context.Context, tx pgx.Tx, caps Caps, clientKeyID, profileID, exceptSession string, profile bool) error {
	if caps.SessionsPerKey > 0 {
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(DISTINCT k.session_id) FROM keys k JOIN sessions s ON s.id = k.session_id
			WHERE k.role = 'session' AND k.client_key_id = $1 AND k.deleted_at IS NULL AND s.state = 'open' AND s.id <> $2`,
			clientKeyID, exceptSession).Scan(&n); err != nil {
			return fmt.Errorf("count the key's sessions: %w", err)
		}
		if n >= caps.SessionsPerKey {
			return &QuotaError{Scope: ScopeClientKey, Resource: ResourceSessions, Limit: caps.SessionsPerKey}
		}
	}
	if profile && caps.SessionsPerProfile > 0 {
		if err := lockProfile(ctx, tx, profileID); err != nil {
			return err
		}
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM sessions WHERE profile_id = $1 AND state = 'open'`, profileID).Scan(&n); err != nil {
			return fmt.Errorf("count the profile's sessions: %w", err)
		}
		if n >= caps.SessionsPerProfile {
			return &QuotaError{Scope: ScopeProfile, Resource: ResourceSessions, Limit: caps.SessionsPerProfile}
		}
	}
	return nil
}

// ClaimSandbox takes the session's one sandbox slot for sb, started by
// sb.ClientKeyID, once the key and the session's profile are under their
// caps of running sandboxes (open sessions whose slot is taken). It fails
// with ErrSandboxBusy when the slot is taken, ErrClientKeyRevoked when the
// key was revoked, and *QuotaError at a cap.
func (s *Store) ClaimSandbox(ctx context.Context, sessionID, profileID string, sb SandboxState, caps Caps) error {
	b, err := json.Marshal(sb)
	if err != nil {
		return fmt.Errorf("encode sandbox: %w", err)
	}
	return pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		if err := lockClientKey(ctx, tx, sb.ClientKeyID); err != nil {
			return err
		}
		var taken bool
		if err := tx.QueryRow(ctx, `SELECT sandbox IS NOT NULL FROM sessions WHERE id = $1 FOR NO KEY UPDATE`, sessionID).Scan(&taken); err != nil {
			return fmt.Errorf("read sandbox slot: %w", err)
		}
		if taken {
			return ErrSandboxBusy
		}
		if caps.SandboxesPerKey > 0 {
			var n int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM sessions
				WHERE state = 'open' AND sandbox IS NOT NULL AND sandbox->>'client_key_id' = $1`, sb.ClientKeyID).Scan(&n); err != nil {
				return fmt.Errorf("count the key's sandboxes: %w", err)
			}
			if n >= caps.SandboxesPerKey {
				return &QuotaError{Scope: ScopeClientKey, Resource: ResourceSandboxes, Limit: caps.SandboxesPerKey}
			}
		}
		if caps.SandboxesPerProfile > 0 {
			if err := lockProfile(ctx, tx, profileID); err != nil {
				return err
			}
			var n int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM sessions
				WHERE state = 'open' AND sandbox IS NOT NULL AND profile_id = $1`, profileID).Scan(&n); err != nil {
				return fmt.Errorf("count the profile's sandboxes: %w", err)
			}
			if n >= caps.SandboxesPerProfile {
				return &QuotaError{Scope: ScopeProfile, Resource: ResourceSandboxes, Limit: caps.SandboxesPerProfile}
			}
		}
		tag, err := tx.Exec(ctx, `UPDATE sessions SET sandbox = $2 WHERE id = $1 AND sandbox IS NULL`, sessionID, string(b))
		if err != nil {
			return fmt.Errorf("claim sandbox: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return ErrSandboxBusy
		}
		return nil
	})
}

// IdleSession is an open session with no event for longer than asked.
type IdleSession struct {
	ID          string
	ProfileID   string
	ClientKeyID string
}

// IdleSessions lists up to limit open sessions whose last event (their
// open, for a session never used) is older than idle and that have no turn
// in progress (busySQL). Busy ones are left out rather than skipped later,
// so sessions paused for days cannot fill every page.
func (s *Store) IdleSessions(ctx context.Context, idle time.Duration, limit int) ([]IdleSession, error) {
	rows, err := s.Pool.Query(ctx, `SELECT s.id, s.profile_id, s.client_key_id FROM sessions s
		LEFT JOIN session_events e ON e.session_id = s.id AND e.seq = s.last_event_seq
		WHERE s.state = 'open' AND coalesce(e.created_at, s.created_at) < now() - $1 * interval '1 microsecond'
		  AND NOT `+busySQL+`
		ORDER BY s.seq LIMIT $2`, idle.Microseconds(), limit)
	if err != nil {
		return nil, fmt.Errorf("list idle sessions: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (IdleSession, error) {
		var i IdleSession
		return i, r.Scan(&i.ID, &i.ProfileID, &i.ClientKeyID)
	})
	if err != nil {
		return nil, fmt.Errorf("list idle sessions: %w", err)
	}
	return list, nil
}

// busySQL is true for a session s with a turn in progress: one paused for
// client tool results (it may wait on a person for longer than any idle
// TTL), or a stored message whose turn has not recorded its result yet
// (queued, running, or between its last event and its result), or an
// approval waiting for a person's decision (its turn is running, but a
// turn submitted as an Update has no stored input to show it).
const busySQL = `(s.pending_turn IS NOT NULL
	OR EXISTS (SELECT 1 FROM turn_inputs t WHERE t.session_id = s.id AND t.result IS NULL)
	OR EXISTS (SELECT 1 FROM approvals a WHERE a.session_id = s.id AND a.state = 'pending'))`

// CloseIdleSession closes an open session with a session.close
// (idle_timeout) event, provided it is still idle: no event appended since
// IdleSessions listed it and no turn in progress. It reports whether it
// closed it. It holds the session row lock, the one every append takes,
// from the check to the close: a turn's events are either committed before
// the check (and the turn is then in progress until its result is
// recorded) or refused by the store after the close, so no turn's event
// ever follows the session.close.
func (s *Store) CloseIdleSession(ctx context.Context, sessionID string, idle time.Duration) (bool, error) {
	var closed bool
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		var state string
		err := tx.QueryRow(ctx, `SELECT state FROM sessions WHERE id = $1 FOR UPDATE`, sessionID).Scan(&state)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && state != StateOpen) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("close idle session: lock: %w", err)
		}
		// A statement of its own, begun once the lock is held, so it sees
		// every turn input, result and event committed before the lock.
		var still bool
		err = tx.QueryRow(ctx, `SELECT NOT `+busySQL+`
			AND coalesce((SELECT e.created_at FROM session_events e WHERE e.session_id = s.id AND e.seq = s.last_event_seq), s.created_at) < now() - $2 * interval '1 microsecond'
			FROM sessions s WHERE s.id = $1`, sessionID, idle.Microseconds()).Scan(&still)
		if err != nil {
			return fmt.Errorf("close idle session: %w", err)
		}
		if !still {
			return nil
		}
		if _, err := tx.Exec(ctx, `UPDATE sessions SET state = 'closed', closed_at = now() WHERE id = $1`, sessionID); err != nil {
			return fmt.Errorf("close idle session: %w", err)
		}
		closed = true
		_, err = appendEnding(ctx, tx, sessionID, []NewEvent{{Payload: events.SessionClosePayload{Reason: events.CloseIdleTimeout}}})
		return err
	})
	return closed, err
}
