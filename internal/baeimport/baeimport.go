// Package baeimport carries a stopped BAE server's SQLite database over into
// a bae-go PostgreSQL database: profiles, client keys (their Argon2id hashes
// as they are, so the keys keep working), and sessions with their session
// keys and full event logs.
//
// The source is read twice: a first pass checks everything (schema
// version, integrity, every row and payload) and counts, so a bad database
// fails before anything is written; the second pass writes profiles and
// keys in one transaction, then each session in its own. Ids, hashes,
// timestamps and event order are kept, and a row already present is
// skipped, so a re-run imports nothing and an interrupted run can simply
// be run again.
package baeimport

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	_ "modernc.org/sqlite" // pure-Go SQLite driver ("sqlite")

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/internal/lib/ids"
	"github.com/bae-go/bae-go/internal/lib/keyhash"
	"github.com/bae-go/bae-go/store"
)

// Schema versions (BAE's schema_version table) this importer reads. Version
// 6 admits admin keys; 7 adds profiles.available_sandboxes and
// sessions.sandbox_tools; 8 adds sessions.subagent_tools.
const (
	minVersion = 6
	maxVersion = 8
)

// Options choose what Run does.
type Options struct {
	// Path is the BAE database file (BAE_DB_PATH of a stopped server).
	Path string
	// DryRun checks and counts without writing.
	DryRun bool
	// Progress, when set, is called every ProgressEvery sessions and once
	// at the end of the session pass.
	Progress      func(Progress)
	ProgressEvery int
	// Now stamps the close of sessions that were open (default time.Now).
	Now func() time.Time
}

// Progress is where the session pass is.
type Progress struct {
	Sessions, TotalSessions int
	Events                  int
}

// Counts are rows by kind.
type Counts struct {
	Profiles    int `json:"profiles"`
	ClientKeys  int `json:"client_keys"`
	Sessions    int `json:"sessions"`
	SessionKeys int `json:"session_keys"`
	Events      int `json:"events"`
	// OpenSessions were open in BAE; they arrive closed.
	OpenSessions int `json:"open_sessions"`
}

// Report says what the source holds and what was (or, on a dry run, would
// be) imported.
type Report struct {
	SchemaVersion int    `json:"schema_version"`
	DryRun        bool   `json:"dry_run"`
	Source        Counts `json:"source"`
	Imported      Counts `json:"imported"`
	// AlreadyPresent rows were skipped: a previous import brought them.
	AlreadyPresent Counts `json:"already_present"`
	// AdminKeys are not imported: the target keeps its own admin key.
	AdminKeys int `json:"admin_keys_skipped"`
}

// SchemaError is a source whose schema this importer does not know.
type SchemaError struct{ Version int }

func (e *SchemaError) Error() string {
	return fmt.Sprintf("BAE database schema version %d is not one this importer knows (it reads versions %d to %d); "+
		"open it once with a BAE release of that schema range, or use a bae-go release that knows version %d", e.Version, minVersion, maxVersion, e.Version)
}

// Run imports (or, with DryRun, checks and counts) the BAE database at
// opts.Path into st.
func Run(ctx context.Context, st *store.Store, opts Options) (Report, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.ProgressEvery <= 0 {
		opts.ProgressEvery = 100
	}
	src, err := open(ctx, opts.Path)
	if err != nil {
		return Report{}, err
	}
	defer src.db.Close()
	rep := Report{SchemaVersion: src.version, DryRun: opts.DryRun}

	// Pass 1: read and check everything; nothing is written yet.
	profiles, err := src.profiles(ctx)
	if err != nil {
		return rep, err
	}
	clientKeys, sessionKeys, admins, err := src.keys(ctx)
	if err != nil {
		return rep, err
	}
	rep.AdminKeys = admins
	sessions, err := src.sessions(ctx)
	if err != nil {
		return rep, err
	}
	rep.Source = Counts{Profiles: len(profiles), ClientKeys: len(clientKeys), Sessions: len(sessions)}
	profileIDs, keyIDs, sessionIDs := map[string]bool{}, map[string]bool{}, make([]string, 0, len(sessions))
	for _, p := range profiles {
		profileIDs[p.ID] = true
	}
	for _, k := range clientKeys {
		keyIDs[k.ID] = true
	}
	keysBySession := map[string][]store.ImportedKey{}
	for _, k := range sessionKeys {
		keysBySession[k.SessionID] = append(keysBySession[k.SessionID], k)
	}
	for i := range sessions {
		s := &sessions[i]
		if !profileIDs[s.ProfileID] {
			return rep, fmt.Errorf("BAE database: session %s names profile %q, which is not in the database", s.ID, s.ProfileID)
		}
		if !keyIDs[s.ClientKeyID] {
			return rep, fmt.Errorf("BAE database: session %s names client key %q, which is not in the database", s.ID, s.ClientKeyID)
		}
		s.Keys = keysBySession[s.ID]
		delete(keysBySession, s.ID)
		for _, k := range s.Keys {
			if !keyIDs[k.ClientKeyID] {
				return rep, fmt.Errorf("BAE database: session key %s names client key %q, which is not in the database", k.ID, k.ClientKeyID)
			}
		}
		n, err := src.checkEvents(ctx, s.ID)
		if err != nil {
			return rep, err
		}
		rep.Source.Events += n
		rep.Source.SessionKeys += len(s.Keys)
		if s.State == store.StateOpen {
			rep.Source.OpenSessions++
		}
		sessionIDs = append(sessionIDs, s.ID)
	}
	for sid, ks := range keysBySession {
		return rep, fmt.Errorf("BAE database: session key %s belongs to session %q, which is not in the database", ks[0].ID, sid)
	}

	// What the target already holds: a previous import.
	var allKeyIDs []string
	for _, k := range clientKeys {
		allKeyIDs = append(allKeyIDs, k.ID)
	}
	present, err := st.ImportPresence(ctx, keysOf(profileIDs), allKeyIDs, sessionIDs)
	if err != nil {
		return rep, err
	}
	names, err := st.LiveProfileNames(ctx)
	if err != nil {
		return rep, err
	}
	for _, p := range profiles {
		if p.DeletedAt != nil || present[p.ID] {
			continue
		}
		if id, ok := names[p.Name]; ok && id != p.ID {
			return rep, fmt.Errorf("profile name %q is taken in the target by %s (BAE's is %s): rename or delete one of them, then import again", p.Name, id, p.ID)
		}
	}
	for _, p := range profiles {
		if present[p.ID] {
			rep.AlreadyPresent.Profiles++
		}
	}
	for _, k := range clientKeys {
		if present[k.ID] {
			rep.AlreadyPresent.ClientKeys++
		}
	}
	for _, s := range sessions {
		if present[s.ID] {
			rep.AlreadyPresent.Sessions++
		}
	}
	if opts.DryRun {
		rep.Imported = Counts{
			Profiles:   rep.Source.Profiles - rep.AlreadyPresent.Profiles,
			ClientKeys: rep.Source.ClientKeys - rep.AlreadyPresent.ClientKeys,
		}
		for _, s := range sessions {
			if !present[s.ID] {
				addSession(&rep.Imported, s, src.eventCount[s.ID])
			} else {
				rep.AlreadyPresent.SessionKeys += len(s.Keys)
				rep.AlreadyPresent.Events += src.eventCount[s.ID]
			}
		}
		return rep, nil
	}

	// Pass 2: write.
	np, nk, err := st.ImportProfilesAndKeys(ctx, profiles, clientKeys)
	if err != nil {
		return rep, err
	}
	rep.Imported.Profiles, rep.Imported.ClientKeys = np, nk
	done, evs := 0, 0
	report := func() {
		if opts.Progress != nil {
			opts.Progress(Progress{Sessions: done, TotalSessions: len(sessions), Events: evs})
		}
	}
	for _, s := range sessions {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		if present[s.ID] {
			rep.AlreadyPresent.SessionKeys += len(s.Keys)
			rep.AlreadyPresent.Events += src.eventCount[s.ID]
		} else {
			full, err := src.fullSession(ctx, s, opts.Now().UTC())
			if err != nil {
				return rep, err
			}
			fresh, err := st.ImportSession(ctx, full)
			if err != nil {
				return rep, err
			}
			if fresh {
				addSession(&rep.Imported, s, len(full.Events)-closeNotes(s))
				evs += len(full.Events)
			} else {
				rep.AlreadyPresent.Sessions++
				rep.AlreadyPresent.SessionKeys += len(s.Keys)
				rep.AlreadyPresent.Events += src.eventCount[s.ID]
			}
		}
		done++
		if done%opts.ProgressEvery == 0 {
			report()
		}
	}
	report()
	return rep, nil
}

func addSession(c *Counts, s store.ImportedSession, events int) {
	c.Sessions++
	c.SessionKeys += len(s.Keys)
	c.Events += events
	if s.State == store.StateOpen {
		c.OpenSessions++
	}
}

// closeNotes is how many events the import adds to s's log.
func closeNotes(s store.ImportedSession) int {
	if s.State == store.StateOpen {
		return 1
	}
	return 0
}

func keysOf(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// source is an open BAE database.
type source struct {
	db         *sql.DB
	version    int
	eventCount map[string]int
}

func open(ctx context.Context, path string) (*source, error) {
	if path == "" {
		return nil, errors.New("no BAE database given")
	}
	// The driver would create a missing file; read-only mode refuses, but
	// with a less helpful message.
	if fi, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("BAE database: %w", err)
	} else if fi.IsDir() {
		return nil, fmt.Errorf("BAE database: %s is a directory", path)
	}
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		return nil, fmt.Errorf("BAE database %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	src := &source{db: db, eventCount: map[string]int{}}
	fail := func(err error) (*source, error) {
		db.Close()
		return nil, err
	}
	var check string
	if err := db.QueryRowContext(ctx, `PRAGMA quick_check`).Scan(&check); err != nil {
		return fail(fmt.Errorf("BAE database %s is not a readable SQLite database: %w", path, err))
	}
	if check != "ok" {
		return fail(fmt.Errorf("BAE database %s is corrupted (SQLite integrity check: %s)", path, check))
	}
	var hasVersions int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'`).Scan(&hasVersions); err != nil {
		return fail(fmt.Errorf("BAE database %s: %w", path, err))
	}
	if hasVersions == 0 {
		return fail(fmt.Errorf("BAE database %s has no schema_version table: not a BAE server database", path))
	}
	var v sql.NullInt64
	if err := db.QueryRowContext(ctx, `SELECT max(version) FROM schema_version`).Scan(&v); err != nil {
		return fail(fmt.Errorf("BAE database %s: read schema version: %w", path, err))
	}
	src.version = int(v.Int64)
	if src.version < minVersion || src.version > maxVersion {
		return fail(&SchemaError{Version: src.version})
	}
	return src, nil
}

func (s *source) profiles(ctx context.Context) ([]store.ImportedProfile, error) {
	sandboxes := "NULL"
	if s.version >= 7 {
		sandboxes = "available_sandboxes"
	}
	rows, err := s.db.QueryContext(ctx, `SELECT id, name, provider_config, fallback_configs, mcp_servers, allowed_tools, `+sandboxes+`,
		created_at, updated_at, deleted_at FROM profiles ORDER BY rowid`)
	if err != nil {
		return nil, fmt.Errorf("BAE database: read profiles: %w", err)
	}
	defer rows.Close()
	var out []store.ImportedProfile
	for rows.Next() {
		var id string
		var name, primary, fallbacks, mcp, tools, sb, created, updated, deleted sql.NullString
		if err := rows.Scan(&id, &name, &primary, &fallbacks, &mcp, &tools, &sb, &created, &updated, &deleted); err != nil {
			return nil, fmt.Errorf("BAE database: read profiles: %w", err)
		}
		p := store.ImportedProfile{ID: id, Name: name.String}
		where := fmt.Sprintf("profile %s", id)
		if p.Name == "" {
			return nil, fmt.Errorf("BAE database: %s has no name", where)
		}
		var prim string
		if err := json.Unmarshal([]byte(primary.String), &prim); err != nil || prim == "" {
			return nil, fmt.Errorf("BAE database: %s: provider_config is not a provider name: %q", where, primary.String)
		}
		p.PrimaryProvider = prim
		for _, f := range []struct {
			col string
			in  sql.NullString
			out *json.RawMessage
		}{{"fallback_configs", fallbacks, &p.FallbackProviders}, {"mcp_servers", mcp, &p.MCPServers}, {"allowed_tools", tools, &p.AllowedTools}, {"available_sandboxes", sb, &p.AvailableSandboxes}} {
			if *f.out, err = jsonArrayOrNull(f.in); err != nil {
				return nil, fmt.Errorf("BAE database: %s: %s: %w", where, f.col, err)
			}
		}
		if p.CreatedAt, err = parseTime(created, where+" created_at"); err != nil {
			return nil, err
		}
		p.UpdatedAt = p.CreatedAt
		if u, err := parseOptTime(updated, where+" updated_at"); err != nil {
			return nil, err
		} else if u != nil {
			p.UpdatedAt = *u
		}
		if p.DeletedAt, err = parseOptTime(deleted, where+" deleted_at"); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// keys returns client keys, session keys (in their sessions' order of
// minting) and the number of admin keys, which stay behind.
func (s *source) keys(ctx context.Context) (client, session []store.ImportedKey, admins int, err error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, name, key_hash, key_prefix, role, profile_id, client_id, created_at, last_used_at, deleted_at
		FROM keys ORDER BY rowid`)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("BAE database: read keys: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var name, hash, prefix, role, profile, clientID, created, used, deleted sql.NullString
		if err := rows.Scan(&id, &name, &hash, &prefix, &role, &profile, &clientID, &created, &used, &deleted); err != nil {
			return nil, nil, 0, fmt.Errorf("BAE database: read keys: %w", err)
		}
		where := fmt.Sprintf("key %s", id)
		if role.String == store.RoleAdmin {
			admins++
			continue
		}
		if role.String != store.RoleClient && role.String != store.RoleSession {
			return nil, nil, 0, fmt.Errorf("BAE database: %s has unknown role %q", where, role.String)
		}
		if !keyhash.Valid(hash.String) {
			return nil, nil, 0, fmt.Errorf("BAE database: %s: key_hash is not an Argon2id PHC string", where)
		}
		if prefix.String == "" {
			return nil, nil, 0, fmt.Errorf("BAE database: %s has no key_prefix", where)
		}
		k := store.ImportedKey{ID: id, Role: role.String, Name: name.String, Prefix: prefix.String, Hash: hash.String, ProfileID: profile.String}
		if k.CreatedAt, err = parseTime(created, where+" created_at"); err != nil {
			return nil, nil, 0, err
		}
		if k.LastUsedAt, err = parseOptTime(used, where+" last_used_at"); err != nil {
			return nil, nil, 0, err
		}
		if k.DeletedAt, err = parseOptTime(deleted, where+" deleted_at"); err != nil {
			return nil, nil, 0, err
		}
		if k.Role == store.RoleClient {
			client = append(client, k)
			continue
		}
		// BAE keeps a session key's session id in its name.
		k.SessionID, k.ClientKeyID = name.String, clientID.String
		if k.SessionID == "" || k.ClientKeyID == "" {
			return nil, nil, 0, fmt.Errorf("BAE database: session %s names no session or client key", where)
		}
		session = append(session, k)
	}
	return client, session, admins, rows.Err()
}

// sessions reads the session rows (not their events), checking their
// per-client declarations.
func (s *source) sessions(ctx context.Context) ([]store.ImportedSession, error) {
	sandbox, subagent := "NULL", "NULL"
	if s.version >= 7 {
		sandbox = "sandbox_tools"
	}
	if s.version >= 8 {
		subagent = "subagent_tools"
	}
	rows, err := s.db.QueryContext(ctx, `SELECT id, client_key_id, profile_id, state, client_version, client_tools, `+sandbox+`, `+subagent+`,
		created_at, closed_at FROM sessions ORDER BY rowid`)
	if err != nil {
		return nil, fmt.Errorf("BAE database: read sessions: %w", err)
	}
	defer rows.Close()
	var out []store.ImportedSession
	for rows.Next() {
		var id string
		var clientKey, profile, state, version, tools, sbTools, subTools, created, closed sql.NullString
		if err := rows.Scan(&id, &clientKey, &profile, &state, &version, &tools, &sbTools, &subTools, &created, &closed); err != nil {
			return nil, fmt.Errorf("BAE database: read sessions: %w", err)
		}
		where := fmt.Sprintf("session %s", id)
		sess := store.ImportedSession{ID: id, ClientKeyID: clientKey.String, ProfileID: profile.String, State: state.String}
		if version.Valid {
			v := version.String
			sess.ClientVersion = &v
		}
		switch sess.State {
		case store.StateOpen, store.StateClosed, store.StateError:
		default:
			return nil, fmt.Errorf("BAE database: %s has unknown state %q", where, sess.State)
		}
		if sess.CreatedAt, err = parseTime(created, where+" created_at"); err != nil {
			return nil, err
		}
		if sess.ClosedAt, err = parseOptTime(closed, where+" closed_at"); err != nil {
			return nil, err
		}
		clients := map[string]*store.ImportedClient{}
		var order []string
		for _, col := range []struct {
			name string
			in   sql.NullString
			set  func(*store.ImportedClient, json.RawMessage)
		}{
			{"client_tools", tools, func(c *store.ImportedClient, r json.RawMessage) { c.Tools = r }},
			{"sandbox_tools", sbTools, func(c *store.ImportedClient, r json.RawMessage) { c.SandboxTools = r }},
			{"subagent_tools", subTools, func(c *store.ImportedClient, r json.RawMessage) { c.SubagentTools = r }},
		} {
			byClient, err := perClient(col.in)
			if err != nil {
				return nil, fmt.Errorf("BAE database: %s: %s: %w", where, col.name, err)
			}
			for _, kv := range byClient {
				c, ok := clients[kv.client]
				if !ok {
					c = &store.ImportedClient{ClientKeyID: kv.client}
					clients[kv.client] = c
					order = append(order, kv.client)
				}
				col.set(c, kv.tools)
			}
		}
		if _, ok := clients[sess.ClientKeyID]; !ok {
			clients[sess.ClientKeyID] = &store.ImportedClient{ClientKeyID: sess.ClientKeyID}
			order = append([]string{sess.ClientKeyID}, order...)
		}
		clients[sess.ClientKeyID].ClientVersion = sess.ClientVersion
		for _, id := range order {
			sess.Clients = append(sess.Clients, *clients[id])
		}
		out = append(out, sess)
	}
	return out, rows.Err()
}

type clientTools struct {
	client string
	tools  json.RawMessage
}

// perClient reads BAE's {"<client key id>": [...]} columns in key order of
// appearance.
func perClient(in sql.NullString) ([]clientTools, error) {
	if !in.Valid || strings.TrimSpace(in.String) == "" || strings.TrimSpace(in.String) == "null" {
		return nil, nil
	}
	dec := json.NewDecoder(strings.NewReader(in.String))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, errors.New("not a JSON object of client key ids")
	}
	var out []clientTools
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("not valid JSON: %w", err)
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("not valid JSON: %w", err)
		}
		arr, err := jsonArrayOrNull(sql.NullString{String: string(raw), Valid: true})
		if err != nil {
			return nil, fmt.Errorf("client %v: %w", t, err)
		}
		out = append(out, clientTools{client: t.(string), tools: arr})
	}
	return out, nil
}

// checkEvents reads a session's log once, checking every row, and counts it.
func (s *source) checkEvents(ctx context.Context, sessionID string) (int, error) {
	n := 0
	err := s.eachEvent(ctx, sessionID, func(store.ImportedEvent) { n++ })
	s.eventCount[sessionID] = n
	return n, err
}

func (s *source) eachEvent(ctx context.Context, sessionID string, fn func(store.ImportedEvent)) error {
	rows, err := s.db.QueryContext(ctx, `SELECT id, client_key_id, event_type, payload, created_at FROM session_events
		WHERE session_id = ? ORDER BY rowid`, sessionID)
	if err != nil {
		return fmt.Errorf("BAE database: read events of session %s: %w", sessionID, err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, typ, payload string
		var client, created sql.NullString
		if err := rows.Scan(&id, &client, &typ, &payload, &created); err != nil {
			return fmt.Errorf("BAE database: read events of session %s: %w", sessionID, err)
		}
		where := fmt.Sprintf("event %s of session %s", id, sessionID)
		if !events.Type(typ).Known() {
			return fmt.Errorf("BAE database: %s has unknown event_type %q", where, typ)
		}
		if !json.Valid([]byte(payload)) {
			return fmt.Errorf("BAE database: %s: payload is not valid JSON", where)
		}
		at, err := parseTime(created, where+" created_at")
		if err != nil {
			return err
		}
		fn(store.ImportedEvent{ID: id, ClientKeyID: client.String, Type: typ, Payload: json.RawMessage(payload), CreatedAt: at})
	}
	return rows.Err()
}

// fullSession reads a checked session's log and, for a session that was
// open, closes it with a session.close (imported) event at the end.
func (s *source) fullSession(ctx context.Context, sess store.ImportedSession, now time.Time) (store.ImportedSession, error) {
	sess.Events = make([]store.ImportedEvent, 0, s.eventCount[sess.ID]+1)
	if err := s.eachEvent(ctx, sess.ID, func(e store.ImportedEvent) { sess.Events = append(sess.Events, e) }); err != nil {
		return sess, err
	}
	if len(sess.Events) != s.eventCount[sess.ID] {
		return sess, fmt.Errorf("BAE database changed during the import (session %s had %d events, now %d): stop the BAE server first", sess.ID, s.eventCount[sess.ID], len(sess.Events))
	}
	if sess.State == store.StateOpen {
		note, err := json.Marshal(events.SessionClosePayload{Reason: events.CloseImported})
		if err != nil {
			return sess, err
		}
		sess.Events = append(sess.Events, store.ImportedEvent{ID: ids.New(ids.EventPrefix), Type: string(events.SessionClose), Payload: note, CreatedAt: now})
		sess.State, sess.ClosedAt = store.StateClosed, &now
	}
	return sess, nil
}

func jsonArrayOrNull(in sql.NullString) (json.RawMessage, error) {
	t := strings.TrimSpace(in.String)
	if !in.Valid || t == "" || t == "null" {
		return nil, nil
	}
	var arr []json.RawMessage
	if err := json.Unmarshal([]byte(t), &arr); err != nil {
		return nil, errors.New("not a JSON array")
	}
	return json.RawMessage(t), nil
}

// BAE writes strftime('%Y-%m-%dT%H:%M:%fZ'); SQLite's datetime() form is
// accepted too.
var timeLayouts = []string{time.RFC3339Nano, "2006-01-02 15:04:05.999999999", "2006-01-02T15:04:05.999999999"}

func parseTime(in sql.NullString, what string) (time.Time, error) {
	if !in.Valid || in.String == "" {
		return time.Time{}, fmt.Errorf("BAE database: %s is missing", what)
	}
	for _, l := range timeLayouts {
		if t, err := time.Parse(l, in.String); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("BAE database: %s: %q is not a timestamp", what, in.String)
}

func parseOptTime(in sql.NullString, what string) (*time.Time, error) {
	if !in.Valid || in.String == "" {
		return nil, nil
	}
	t, err := parseTime(in, what)
	if err != nil {
		return nil, err
	}
	return &t, nil
}
