package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Rows carried over from another deployment (a BAE database): their ids,
// hashes, timestamps and event order are kept as they were. Every insert
// skips a row whose id is already present, so importing twice changes
// nothing.

// ImportedProfile is a profile as another deployment stored it.
type ImportedProfile struct {
	ID, Name, PrimaryProvider string
	FallbackProviders         json.RawMessage
	MCPServers                json.RawMessage
	AllowedTools              json.RawMessage
	AvailableSandboxes        json.RawMessage
	CreatedAt, UpdatedAt      time.Time
	DeletedAt                 *time.Time
}

// ImportedKey is a client or session key row, its hash kept as is.
type ImportedKey struct {
	ID, Role, Name, Prefix, Hash      string
	ProfileID, SessionID, ClientKeyID string
	CreatedAt                         time.Time
	LastUsedAt, DeletedAt             *time.Time
}

// ImportedEvent is one event of an imported session's log.
type ImportedEvent struct {
	ID, ClientKeyID, Type string
	Payload               json.RawMessage
	CreatedAt             time.Time
}

// ImportedClient is one client's declarations on an imported session.
type ImportedClient struct {
	ClientKeyID                        string
	ClientVersion                      *string
	Tools, SandboxTools, SubagentTools json.RawMessage
}

// ImportedSession is a session with everything that belongs to it.
type ImportedSession struct {
	ID, ProfileID, ClientKeyID, State string
	ClientVersion                     *string
	CreatedAt                         time.Time
	ClosedAt                          *time.Time
	Clients                           []ImportedClient
	Keys                              []ImportedKey
	// Events in log order; they get seq 1…n.
	Events []ImportedEvent
}

// ImportPresence reports which of the given ids the target already holds.
func (s *Store) ImportPresence(ctx context.Context, profileIDs, keyIDs, sessionIDs []string) (map[string]bool, error) {
	rows, err := s.Pool.Query(ctx, `SELECT id FROM profiles WHERE id = ANY($1)
		UNION ALL SELECT id FROM keys WHERE id = ANY($2)
		UNION ALL SELECT id FROM sessions WHERE id = ANY($3)`, profileIDs, keyIDs, sessionIDs)
	if err != nil {
		return nil, fmt.Errorf("check imported ids: %w", err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("check imported ids: %w", err)
	}
	out := make(map[string]bool, len(found))
	for _, id := range found {
		out[id] = true
	}
	return out, nil
}

// LiveProfileNames maps each live profile's name to its id.
func (s *Store) LiveProfileNames(ctx context.Context) (map[string]string, error) {
	rows, err := s.Pool.Query(ctx, `SELECT name, id FROM profiles WHERE deleted_at IS NULL`)
	if err != nil {
		return nil, fmt.Errorf("list profile names: %w", err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var name, id string
		if err := rows.Scan(&name, &id); err != nil {
			return nil, fmt.Errorf("list profile names: %w", err)
		}
		out[name] = id
	}
	return out, rows.Err()
}

// ImportProfilesAndKeys stores profiles and client keys in one transaction
// and returns how many of each were new.
func (s *Store) ImportProfilesAndKeys(ctx context.Context, profiles []ImportedProfile, keys []ImportedKey) (int, int, error) {
	var np, nk int
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		np, nk = 0, 0
		for _, p := range profiles {
			tag, err := tx.Exec(ctx, `INSERT INTO profiles (id, name, primary_provider, fallback_providers, mcp_servers, allowed_tools, available_sandboxes, created_at, updated_at, deleted_at)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT (id) DO NOTHING`,
				p.ID, p.Name, p.PrimaryProvider, jsonArray(p.FallbackProviders), jsonArray(p.MCPServers), jsonArray(p.AllowedTools), jsonArray(p.AvailableSandboxes),
				p.CreatedAt, p.UpdatedAt, p.DeletedAt)
			if err != nil {
				return fmt.Errorf("import profile %s (%q): %w", p.ID, p.Name, err)
			}
			np += int(tag.RowsAffected())
		}
		for _, k := range keys {
			n, err := importKey(ctx, tx, k)
			if err != nil {
				return err
			}
			nk += n
		}
		return nil
	})
	return np, nk, err
}

func importKey(ctx context.Context, tx pgx.Tx, k ImportedKey) (int, error) {
	tag, err := tx.Exec(ctx, `INSERT INTO keys (id, role, name, prefix, key_hash, profile_id, session_id, client_key_id, created_at, last_used_at, deleted_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) ON CONFLICT (id) DO NOTHING`,
		k.ID, k.Role, k.Name, k.Prefix, k.Hash, nullable(k.ProfileID), nullable(k.SessionID), nullable(k.ClientKeyID), k.CreatedAt, k.LastUsedAt, k.DeletedAt)
	if err != nil {
		return 0, fmt.Errorf("import %s key %s: %w", k.Role, k.ID, err)
	}
	return int(tag.RowsAffected()), nil
}

// ImportSession stores a session, its clients, its session keys and its
// whole event log in one transaction. It returns false, changing nothing,
// when the session is already present.
func (s *Store) ImportSession(ctx context.Context, sess ImportedSession) (bool, error) {
	var fresh bool
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO sessions (id, profile_id, client_key_id, state, client_version, created_at, closed_at, last_event_seq)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (id) DO NOTHING`,
			sess.ID, sess.ProfileID, sess.ClientKeyID, sess.State, sess.ClientVersion, sess.CreatedAt, sess.ClosedAt, len(sess.Events))
		if err != nil {
			return fmt.Errorf("import session %s: %w", sess.ID, err)
		}
		if fresh = tag.RowsAffected() == 1; !fresh {
			return nil
		}
		for _, c := range sess.Clients {
			if _, err := tx.Exec(ctx, `INSERT INTO session_clients (session_id, client_key_id, client_version, tools, sandbox_tools, subagent_tools, joined_at)
				VALUES ($1, $2, $3, $4, $5, $6, $7)`, sess.ID, c.ClientKeyID, c.ClientVersion,
				jsonArray(c.Tools), jsonArray(c.SandboxTools), jsonArray(c.SubagentTools), sess.CreatedAt); err != nil {
				return fmt.Errorf("import session %s client %s: %w", sess.ID, c.ClientKeyID, err)
			}
		}
		for _, k := range sess.Keys {
			if _, err := importKey(ctx, tx, k); err != nil {
				return fmt.Errorf("session %s: %w", sess.ID, err)
			}
		}
		_, err = tx.CopyFrom(ctx, pgx.Identifier{"session_events"},
			[]string{"session_id", "seq", "id", "client_key_id", "event_type", "payload", "created_at"},
			pgx.CopyFromSlice(len(sess.Events), func(i int) ([]any, error) {
				e := sess.Events[i]
				return []any{sess.ID, int64(i + 1), e.ID, nullable(e.ClientKeyID), e.Type, []byte(e.Payload), e.CreatedAt}, nil
			}))
		if err != nil {
			return fmt.Errorf("import session %s events: %w", sess.ID, err)
		}
		return nil
	})
	return fresh, err
}

func jsonArray(r json.RawMessage) string { return rawOrEmptyArray(r) }
