package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Rows carried over from another deployment (a BAE database): their ids,
// hashes, timestamps and event order are kept as they were. An import is
// one transaction, and a row whose id (or live client-key prefix, or live
// profile name) the target already holds fails it whole: an imported row
// never lands next to, or on top of, the target's own.

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

// ImportPresence returns which of the given ids the target already holds.
func (s *Store) ImportPresence(ctx context.Context, profileIDs, keyIDs, sessionIDs, eventIDs []string) ([]string, error) {
	rows, err := s.Pool.Query(ctx, `SELECT id FROM profiles WHERE id = ANY($1)
		UNION ALL SELECT id FROM keys WHERE id = ANY($2)
		UNION ALL SELECT id FROM sessions WHERE id = ANY($3)
		UNION ALL SELECT id FROM session_events WHERE id = ANY($4)`, profileIDs, keyIDs, sessionIDs, eventIDs)
	if err != nil {
		return nil, fmt.Errorf("check imported ids: %w", err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("check imported ids: %w", err)
	}
	return found, nil
}

// LiveClientKeyPrefixes maps each prefix a live Argon2id client key holds
// to that key's id: an imported key must not share one (see migration
// 0014).
func (s *Store) LiveClientKeyPrefixes(ctx context.Context) (map[string]string, error) {
	rows, err := s.Pool.Query(ctx, `SELECT prefix, id FROM keys WHERE role = 'client' AND deleted_at IS NULL AND key_hash LIKE '$argon2id$%'`)
	if err != nil {
		return nil, fmt.Errorf("list key prefixes: %w", err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var prefix, id string
		if err := rows.Scan(&prefix, &id); err != nil {
			return nil, fmt.Errorf("list key prefixes: %w", err)
		}
		out[prefix] = id
	}
	return out, rows.Err()
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

// Import runs fn in one transaction: every row fn stores is kept, or none.
func (s *Store) Import(ctx context.Context, fn func(*ImportTx) error) error {
	return pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error { return fn(&ImportTx{tx: tx}) })
}

// ImportTx stores imported rows inside Import's transaction. A row whose
// id is taken fails it.
type ImportTx struct{ tx pgx.Tx }

// ProfilesAndKeys stores profiles and client keys.
func (t *ImportTx) ProfilesAndKeys(ctx context.Context, profiles []ImportedProfile, keys []ImportedKey) error {
	for _, p := range profiles {
		if _, err := t.tx.Exec(ctx, `INSERT INTO profiles (id, name, primary_provider, fallback_providers, mcp_servers, allowed_tools, available_sandboxes, created_at, updated_at, deleted_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
			p.ID, p.Name, p.PrimaryProvider, jsonArray(p.FallbackProviders), jsonArray(p.MCPServers), jsonArray(p.AllowedTools), jsonArray(p.AvailableSandboxes),
			p.CreatedAt, p.UpdatedAt, p.DeletedAt); err != nil {
			return fmt.Errorf("import profile %s (%q): %w", p.ID, p.Name, err)
		}
	}
	for _, k := range keys {
		if err := importKey(ctx, t.tx, k); err != nil {
			return err
		}
	}
	return nil
}

func importKey(ctx context.Context, tx pgx.Tx, k ImportedKey) error {
	if _, err := tx.Exec(ctx, `INSERT INTO keys (id, role, name, prefix, key_hash, profile_id, session_id, client_key_id, created_at, last_used_at, deleted_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
		k.ID, k.Role, k.Name, k.Prefix, k.Hash, nullable(k.ProfileID), nullable(k.SessionID), nullable(k.ClientKeyID), k.CreatedAt, k.LastUsedAt, k.DeletedAt); err != nil {
		return fmt.Errorf("import %s key %s: %w", k.Role, k.ID, err)
	}
	return nil
}

// Session stores a session, its clients, its session keys and its whole
// event log.
func (t *ImportTx) Session(ctx context.Context, sess ImportedSession) error {
	tx := t.tx
	if _, err := tx.Exec(ctx, `INSERT INTO sessions (id, profile_id, client_key_id, state, client_version, created_at, closed_at, last_event_seq)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
		sess.ID, sess.ProfileID, sess.ClientKeyID, sess.State, sess.ClientVersion, sess.CreatedAt, sess.ClosedAt, len(sess.Events)); err != nil {
		return fmt.Errorf("import session %s: %w", sess.ID, err)
	}
	for _, c := range sess.Clients {
		if _, err := tx.Exec(ctx, `INSERT INTO session_clients (session_id, client_key_id, client_version, tools, sandbox_tools, subagent_tools, joined_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7)`, sess.ID, c.ClientKeyID, c.ClientVersion,
			jsonArray(c.Tools), jsonArray(c.SandboxTools), jsonArray(c.SubagentTools), sess.CreatedAt); err != nil {
			return fmt.Errorf("import session %s client %s: %w", sess.ID, c.ClientKeyID, err)
		}
	}
	for _, k := range sess.Keys {
		if err := importKey(ctx, tx, k); err != nil {
			return fmt.Errorf("session %s: %w", sess.ID, err)
		}
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"session_events"},
		[]string{"session_id", "seq", "id", "client_key_id", "event_type", "payload", "created_at"},
		pgx.CopyFromSlice(len(sess.Events), func(i int) ([]any, error) {
			e := sess.Events[i]
			return []any{sess.ID, int64(i + 1), e.ID, nullable(e.ClientKeyID), e.Type, []byte(e.Payload), e.CreatedAt}, nil
		})); err != nil {
		return fmt.Errorf("import session %s events: %w", sess.ID, err)
	}
	return nil
}

func jsonArray(r json.RawMessage) string { return rawOrEmptyArray(r) }
