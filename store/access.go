package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// StreamAccess is what a long-lived stream's authorization rests on, read
// in one query so every replica sees the same PostgreSQL facts.
type StreamAccess struct {
	// KeyLive: the session key and the client key it was minted for are
	// both unrevoked.
	KeyLive bool
	// ProfileLive: the session's profile is not deleted.
	ProfileLive bool
	// State is the session's state.
	State string
	// EndedByTurn: the session.error that ended the session belongs to the
	// turn asked about (its relay ends with the turn's own result).
	EndedByTurn bool
}

// StreamAccess reads the access facts for the session key sessionKeyID.
// turnID may be empty. A session key that does not exist reads as revoked.
func (s *Store) StreamAccess(ctx context.Context, sessionKeyID, turnID string) (StreamAccess, error) {
	var a StreamAccess
	var state *string
	err := s.Pool.QueryRow(ctx, `
		SELECT sk.deleted_at IS NULL AND ck.id IS NOT NULL AND ck.deleted_at IS NULL,
		       p.id IS NOT NULL AND p.deleted_at IS NULL,
		       s.state,
		       $2 <> '' AND EXISTS (SELECT 1 FROM session_events e
		                            WHERE e.session_id = s.id AND e.turn_id = $2 AND e.event_type = 'session.error')
		FROM keys sk
		LEFT JOIN keys ck ON ck.id = sk.client_key_id AND ck.role = 'client'
		LEFT JOIN sessions s ON s.id = sk.session_id
		LEFT JOIN profiles p ON p.id = s.profile_id
		WHERE sk.id = $1 AND sk.role = 'session'`, sessionKeyID, turnID).Scan(&a.KeyLive, &a.ProfileLive, &state, &a.EndedByTurn)
	if errors.Is(err, pgx.ErrNoRows) {
		return StreamAccess{}, nil
	}
	if err != nil {
		return StreamAccess{}, fmt.Errorf("read stream access: %w", err)
	}
	if state != nil {
		a.State = *state
	}
	return a, nil
}

// ClientKeyLive reports whether a client key is unrevoked, and share-locks
// its row: a revocation (an UPDATE of that row) waits for tx, so a turn
// cannot begin after its key was revoked.
func (t *Tx) ClientKeyLive(ctx context.Context, clientKeyID string) (bool, error) {
	tx := t.db
	var live bool
	err := tx.QueryRow(ctx, `SELECT deleted_at IS NULL FROM keys WHERE id = $1 AND role = 'client' FOR SHARE`, clientKeyID).Scan(&live)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("check client key: %w", err)
	}
	return live, nil
}

// SessionAccess is StreamAccess for every stream of one session at once:
// one read serves all of a session's streams on a replica, however many.
type SessionAccess struct {
	// Found is false when the session row does not exist.
	Found       bool
	ProfileLive bool
	State       string
	// LiveKeys are those of the asked session keys that are unrevoked,
	// bound to the session, and minted for a client key still unrevoked.
	LiveKeys map[string]bool
	// EndedTurns are those of the asked turns with a session.error event,
	// once the session is no longer open (StreamAccess.EndedByTurn).
	EndedTurns map[string]bool
}

// SessionAccess reads the access facts of sessionID for the session keys
// sessionKeyIDs and the relayed turns turnIDs, in one query.
func (s *Store) SessionAccess(ctx context.Context, sessionID string, sessionKeyIDs, turnIDs []string) (SessionAccess, error) {
	var a SessionAccess
	var live, ended []string
	err := s.Pool.QueryRow(ctx, `
		SELECT s.state, p.id IS NOT NULL AND p.deleted_at IS NULL,
		       coalesce((SELECT array_agg(sk.id) FROM keys sk
		                 JOIN keys ck ON ck.id = sk.client_key_id AND ck.role = 'client' AND ck.deleted_at IS NULL
		                 WHERE sk.id = ANY($2) AND sk.role = 'session' AND sk.session_id = s.id AND sk.deleted_at IS NULL), '{}'),
		       coalesce((SELECT array_agg(DISTINCT e.turn_id) FROM session_events e
		                 WHERE s.state <> 'open' AND e.session_id = s.id AND e.turn_id = ANY($3) AND e.event_type = 'session.error'), '{}')
		FROM sessions s
		LEFT JOIN profiles p ON p.id = s.profile_id
		WHERE s.id = $1`, sessionID, sessionKeyIDs, turnIDs).Scan(&a.State, &a.ProfileLive, &live, &ended)
	if errors.Is(err, pgx.ErrNoRows) {
		return SessionAccess{LiveKeys: map[string]bool{}, EndedTurns: map[string]bool{}}, nil
	}
	if err != nil {
		return SessionAccess{}, fmt.Errorf("read session access: %w", err)
	}
	a.Found = true
	a.LiveKeys = make(map[string]bool, len(live))
	for _, id := range live {
		a.LiveKeys[id] = true
	}
	a.EndedTurns = make(map[string]bool, len(ended))
	for _, id := range ended {
		a.EndedTurns[id] = true
	}
	return a, nil
}
