package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ErrClientKeyRevoked is an open or join whose client key was revoked
// before its session could be stored.
var ErrClientKeyRevoked = errors.New("client key revoked")

// Caps bound what one client key, and one profile, may hold at once. Zero
// is no bound.
type Caps struct {
	SessionsPerKey      int
	SessionsPerProfile  int
	SandboxesPerKey     int
	SandboxesPerProfile int
}

// Quota scopes and resources, as QuotaError names them.
const (
	ScopeClientKey = "client_key"
	ScopeProfile   = "profile"
	ScopeSession   = "session"

	ResourceSessions  = "sessions"
	ResourceSandboxes = "sandboxes"
	ResourceStreams   = "streams"
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
