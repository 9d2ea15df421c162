package baeimport_test

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/lib/ids"
	"github.com/bae-go/bae-go/internal/lib/keyhash"
)

// baeSchema is the shape of a BAE server database at schema version 8,
// written down from its published migrations (tables, columns and
// constraints are facts of the format; the statements are ours). BAE keeps
// JSON in TEXT columns, timestamps as '%Y-%m-%dT%H:%M:%fZ' text, and a
// session key's session id in keys.name.
var baeSchema = []string{
	`CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)`,
	`CREATE TABLE profiles (
		id TEXT PRIMARY KEY, name TEXT UNIQUE, provider_config TEXT, fallback_configs TEXT,
		mcp_servers TEXT, allowed_tools TEXT, created_at TEXT, updated_at TEXT, deleted_at TEXT,
		available_sandboxes TEXT)`,
	`CREATE TABLE keys (
		id TEXT PRIMARY KEY, name TEXT, key_hash TEXT, key_prefix TEXT,
		role TEXT CHECK(role IN ('client','session','admin')),
		profile_id TEXT REFERENCES profiles(id), client_id TEXT REFERENCES keys(id),
		created_at TEXT, last_used_at TEXT, deleted_at TEXT)`,
	`CREATE TABLE sessions (
		id TEXT PRIMARY KEY, client_key_id TEXT REFERENCES keys(id), profile_id TEXT REFERENCES profiles(id),
		state TEXT CHECK(state IN ('open','closed','error')), client_version TEXT, client_tools TEXT,
		created_at TEXT, closed_at TEXT, sandbox_tools TEXT, subagent_tools TEXT)`,
	`CREATE TABLE session_events (
		id TEXT PRIMARY KEY, session_id TEXT REFERENCES sessions(id), client_key_id TEXT,
		event_type TEXT NOT NULL, payload TEXT NOT NULL, created_at TEXT NOT NULL)`,
}

const baeSchemaVersion = 8

// baeDB builds a BAE database file for a test.
type baeDB struct {
	t    *testing.T
	Path string
	db   *sql.DB
	now  time.Time
}

func newBAEDB(t *testing.T) *baeDB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "bae.db")
	db, err := sql.Open("sqlite", "file:"+path)
	require.NoError(t, err)
	db.SetMaxOpenConns(1)
	for _, stmt := range baeSchema {
		_, err := db.Exec(stmt)
		require.NoError(t, err)
	}
	for v := 1; v <= baeSchemaVersion; v++ {
		_, err := db.Exec(`INSERT INTO schema_version (version, applied_at) VALUES (?, datetime('now'))`, v)
		require.NoError(t, err)
	}
	// One transaction for the whole seed: thousands of autocommitted
	// inserts would each wait for the disk.
	_, err = db.Exec(`BEGIN`)
	require.NoError(t, err)
	return &baeDB{t: t, Path: path, db: db, now: time.Date(2026, 7, 6, 18, 26, 1, 0, time.UTC)}
}

func (b *baeDB) exec(q string, args ...any) {
	b.t.Helper()
	_, err := b.db.Exec(q, args...)
	require.NoError(b.t, err)
}

// stamp returns BAE's timestamp text, a millisecond later on every call
// except when same is set (BAE's clock often repeats within a turn; the
// log's order is the insertion order, not the time).
func (b *baeDB) stamp(same bool) string {
	if !same {
		b.now = b.now.Add(time.Millisecond)
	}
	return b.now.Format("2006-01-02T15:04:05.000Z")
}

func (b *baeDB) close() {
	b.exec(`COMMIT`)
	require.NoError(b.t, b.db.Close())
}

func (b *baeDB) profile(name, primary string, deleted bool) string {
	id := ids.New(ids.ProfilePrefix)
	var del any
	if deleted {
		del = b.stamp(false)
	}
	prim, _ := json.Marshal(primary)
	b.exec(`INSERT INTO profiles (id, name, provider_config, fallback_configs, mcp_servers, allowed_tools, available_sandboxes, created_at, updated_at, deleted_at)
		VALUES (?, ?, ?, '["backup"]', '[]', '["get_current_time"]', '["python:3.12"]', ?, ?, ?)`, id, name, string(prim), b.stamp(false), b.stamp(true), del)
	return id
}

// key stores a key hashed as BAE hashes it, with BAE's eight-character
// prefix, and returns its id and plaintext.
func (b *baeDB) key(role, prefix, name, profileID, clientID string, p keyhash.Params, revoked bool) (string, string) {
	b.t.Helper()
	secret := ids.NewSecret(prefix)
	hash, err := keyhash.Argon2id{Params: p}.Hash(secret)
	require.NoError(b.t, err)
	id := ids.New(ids.KeyIDPrefix)
	var del, client any
	if revoked {
		del = b.stamp(false)
	}
	if clientID != "" {
		client = clientID
	}
	b.exec(`INSERT INTO keys (id, name, key_hash, key_prefix, role, profile_id, client_id, created_at, last_used_at, deleted_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL, ?)`, id, name, hash, secret[:8], role, profileID, client, b.stamp(false), del)
	return id, secret
}

// seededEvent is what the test expects to read back.
type seededEvent struct {
	ID, ClientKeyID, Type, CreatedAt string
	Payload                          map[string]any
}

type seededSession struct {
	ID, ProfileID, State string
	Keys                 []string // session key plaintexts, one per client
	Events               []seededEvent
}

func (b *baeDB) session(profileID, clientKeyID, state string) *seededSession {
	id := ids.New(ids.SessionPrefix)
	var closed any
	if state != "open" {
		closed = b.stamp(false)
	}
	tools := fmt.Sprintf(`{%q:[{"name":"get_current_time","description":"now","input_schema":{"type":"object"}}]}`, clientKeyID)
	b.exec(`INSERT INTO sessions (id, client_key_id, profile_id, state, client_version, client_tools, created_at, closed_at, sandbox_tools, subagent_tools)
		VALUES (?, ?, ?, ?, '1.0.0', ?, ?, ?, ?, ?)`, id, clientKeyID, profileID, state, tools, b.stamp(false), closed,
		fmt.Sprintf(`{%q:[]}`, clientKeyID), fmt.Sprintf(`{%q:[]}`, clientKeyID))
	return &seededSession{ID: id, ProfileID: profileID, State: state}
}

// sessionKey mints the session key BAE gives a client of s.
func (b *baeDB) sessionKey(s *seededSession, profileID, clientKeyID string) {
	_, secret := b.key("session", ids.SessionKeyPrefix, s.ID, profileID, clientKeyID, keyhash.TestParams, false)
	s.Keys = append(s.Keys, secret)
}

func (b *baeDB) event(s *seededSession, clientKeyID, typ string, payload map[string]any, sameTime bool) {
	b.t.Helper()
	id := ids.New(ids.EventPrefix)
	raw, err := json.Marshal(payload)
	require.NoError(b.t, err)
	at := b.stamp(sameTime)
	var client any
	if clientKeyID != "" {
		client = clientKeyID
	}
	b.exec(`INSERT INTO session_events (id, session_id, client_key_id, event_type, payload, created_at) VALUES (?, ?, ?, ?, ?, ?)`,
		id, s.ID, client, typ, string(raw), at)
	var back map[string]any
	require.NoError(b.t, json.Unmarshal(raw, &back))
	s.Events = append(s.Events, seededEvent{ID: id, ClientKeyID: clientKeyID, Type: typ, CreatedAt: at, Payload: back})
}

// turn appends the events of one text turn, the way BAE logs it.
func (b *baeDB) turn(s *seededSession, clientKeyID string, n int) {
	text := fmt.Sprintf("message %d — ünïcode \u2028 and \"quotes\"", n)
	b.event(s, clientKeyID, "client.message.send", map[string]any{"role": "user", "content": text}, false)
	b.event(s, "", "provider.request", map[string]any{"provider": "main", "model": "claude-test",
		"messages": []any{map[string]any{"role": "user", "content": text}}}, true)
	b.event(s, "", "provider.response", map[string]any{"provider": "main", "stop_reason": "end_turn",
		"content": []any{map[string]any{"type": "text", "text": strings.Repeat("answer ", n%7+1)}}}, false)
	b.event(s, "", "server.message.send", map[string]any{"role": "assistant",
		"content": []any{map[string]any{"type": "text", "text": strings.Repeat("answer ", n%7+1)}}}, true)
}

// rawKey stores a key row as given (a hand-made file's row), returning
// its id.
func (b *baeDB) rawKey(role, name, hash, prefix, profileID, clientID string) string {
	b.t.Helper()
	id := ids.New(ids.KeyIDPrefix)
	var client any
	if clientID != "" {
		client = clientID
	}
	b.exec(`INSERT INTO keys (id, name, key_hash, key_prefix, role, profile_id, client_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		id, name, hash, prefix, role, profileID, client, b.stamp(false))
	return id
}
