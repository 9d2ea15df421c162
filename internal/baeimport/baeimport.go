// Package baeimport carries a stopped BAE server's SQLite database over into
// a bae-go PostgreSQL database: profiles, client keys (their Argon2id hashes
// as they are, so the keys keep working), and sessions with their session
// keys and full event logs.
//
// The file is untrusted input. A first pass checks everything (schema
// version, integrity, every row and payload against the bounds a live
// request must meet, key hash costs, and that every key and session names
// a profile and keys of the same file) and everything against the target
// (no id, live client-key prefix or live profile name it already holds),
// so a bad file fails naming the row before anything is written. The
// second pass writes everything in one transaction: all of it, or none.
// Ids, hashes, timestamps and event order are kept.
package baeimport

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
	"unicode"

	_ "modernc.org/sqlite" // pure-Go SQLite driver ("sqlite")

	"github.com/bae-go/bae-go/api/wire"
	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/internal/config"
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
	// MaxPayloadBytes caps an event's payload and every other JSON
	// document of a row at what one live request may carry: the server's
	// BAE_MAX_BODY_BYTES (0 = config.DefaultMaxBodyBytes).
	MaxPayloadBytes int64
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
	// AdminKeys are not imported: the target keeps its own admin key.
	AdminKeys int `json:"admin_keys_skipped"`
	// KeysByProfile lists every imported client key under its profile, so
	// an operator sees which key opens sessions on which profile.
	KeysByProfile []ProfileKeys `json:"client_keys_by_profile"`
}

// ProfileKeys are the imported client keys of one imported profile.
type ProfileKeys struct {
	ProfileID   string `json:"profile_id"`
	ProfileName string `json:"profile_name"`
	// Deleted profiles arrive deleted; their keys open nothing.
	Deleted bool      `json:"profile_deleted"`
	Keys    []KeyInfo `json:"keys"`
}

// KeyInfo names one imported client key.
type KeyInfo struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Prefix  string `json:"prefix"`
	Revoked bool   `json:"revoked"`
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
	if opts.MaxPayloadBytes <= 0 {
		opts.MaxPayloadBytes = config.DefaultMaxBodyBytes
	}
	src, err := open(ctx, opts.Path, opts.MaxPayloadBytes)
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

	// Every row's id is unique in the file and, below, new to the target;
	// where names the row in messages.
	where := map[string]string{}
	claim := func(id, what string) error {
		if prev, ok := where[id]; ok {
			return fmt.Errorf("BAE database: %s has the id of %s", what, prev)
		}
		where[id] = what
		return nil
	}
	profileByID := map[string]store.ImportedProfile{}
	for _, p := range profiles {
		if err := claim(p.ID, "profile "+p.ID); err != nil {
			return rep, err
		}
		profileByID[p.ID] = p
	}
	// A key or session may only name a profile of this file: an id the
	// target alone holds would plant a key on the target's profile.
	clientKeyByID := map[string]store.ImportedKey{}
	prefixes := map[string]string{}
	for _, k := range clientKeys {
		if err := claim(k.ID, "client key "+k.ID); err != nil {
			return rep, err
		}
		if _, ok := profileByID[k.ProfileID]; !ok {
			return rep, fmt.Errorf("BAE database: client key %s names profile %q, which is not in this database", k.ID, k.ProfileID)
		}
		clientKeyByID[k.ID] = k
		// A live key is found by its prefix, which must name one key.
		if k.DeletedAt == nil && keyhash.IsArgon2id(k.Hash) {
			if other, ok := prefixes[k.Prefix]; ok {
				return rep, fmt.Errorf("BAE database: client keys %s and %s are both live under the prefix %q, which must name one key here: revoke one of them in BAE first", other, k.ID, k.Prefix)
			}
			prefixes[k.Prefix] = k.ID
		}
	}
	keysBySession := map[string][]store.ImportedKey{}
	for _, k := range sessionKeys {
		if err := claim(k.ID, "session key "+k.ID); err != nil {
			return rep, err
		}
		keysBySession[k.SessionID] = append(keysBySession[k.SessionID], k)
	}
	if dup, err := src.repeatedEventID(ctx); err != nil || dup != "" {
		return rep, cmp.Or(err, fmt.Errorf("BAE database: event %s appears more than once", quoted(dup)))
	}
	sessionIDs := make([]string, 0, len(sessions))
	for i := range sessions {
		s := &sessions[i]
		if err := claim(s.ID, "session "+s.ID); err != nil {
			return rep, err
		}
		if _, ok := profileByID[s.ProfileID]; !ok {
			return rep, fmt.Errorf("BAE database: session %s names profile %q, which is not in this database", s.ID, s.ProfileID)
		}
		if _, ok := clientKeyByID[s.ClientKeyID]; !ok {
			return rep, fmt.Errorf("BAE database: session %s names client key %q, which is not in this database", s.ID, s.ClientKeyID)
		}
		for _, c := range s.Clients {
			if _, ok := clientKeyByID[c.ClientKeyID]; !ok {
				return rep, fmt.Errorf("BAE database: session %s declares tools for client key %q, which is not in this database", s.ID, c.ClientKeyID)
			}
		}
		s.Keys = keysBySession[s.ID]
		delete(keysBySession, s.ID)
		for _, k := range s.Keys {
			if _, ok := clientKeyByID[k.ClientKeyID]; !ok {
				return rep, fmt.Errorf("BAE database: session key %s names client key %q, which is not in this database", k.ID, k.ClientKeyID)
			}
			if k.ProfileID != "" && k.ProfileID != s.ProfileID {
				return rep, fmt.Errorf("BAE database: session key %s names profile %q, not its session's %q", k.ID, k.ProfileID, s.ProfileID)
			}
		}
		n, err := src.checkEvents(ctx, st, s.ID)
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
		return rep, fmt.Errorf("BAE database: session key %s belongs to session %q, which is not in this database", ks[0].ID, sid)
	}

	// Nothing of the file may already be in the target: not its ids (a
	// previous import, or rows the target made itself), not a live key's
	// prefix, not a live profile's name.
	var keyIDs []string
	for _, k := range slices.Concat(clientKeys, sessionKeys) {
		keyIDs = append(keyIDs, k.ID)
	}
	present, err := st.ImportPresence(ctx, keysOf(profileByID), keyIDs, sessionIDs, nil)
	if err != nil {
		return rep, err
	}
	if len(present) > 0 {
		slices.SortFunc(present, func(a, b string) int { return cmp.Compare(where[a], where[b]) })
		return rep, fmt.Errorf("BAE database: %s: the target already holds that id (%d row(s) of this database do; was it imported before?)", where[present[0]], len(present))
	}
	livePrefixes, err := st.LiveClientKeyPrefixes(ctx)
	if err != nil {
		return rep, err
	}
	for prefix, id := range prefixes {
		if other, ok := livePrefixes[prefix]; ok {
			return rep, fmt.Errorf("BAE database: client key %s: its prefix %q is held by the target's live key %s, and a prefix must name one key: revoke one of them, then import again", id, prefix, other)
		}
	}
	names, err := st.LiveProfileNames(ctx)
	if err != nil {
		return rep, err
	}
	for _, p := range profiles {
		if p.DeletedAt != nil {
			continue
		}
		if id, ok := names[p.Name]; ok {
			return rep, fmt.Errorf("profile name %q is taken in the target by %s (BAE's is %s): rename or delete one of them, then import again", p.Name, id, p.ID)
		}
	}
	rep.KeysByProfile = keysByProfile(profiles, clientKeys)
	if opts.DryRun {
		rep.Imported = rep.Source
		return rep, nil
	}

	// Pass 2: write everything in one transaction.
	done, evs := 0, 0
	report := func() {
		if opts.Progress != nil {
			opts.Progress(Progress{Sessions: done, TotalSessions: len(sessions), Events: evs})
		}
	}
	var imported Counts
	err = st.Import(ctx, func(tx *store.ImportTx) error {
		if err := tx.ProfilesAndKeys(ctx, profiles, clientKeys); err != nil {
			return err
		}
		imported = Counts{Profiles: len(profiles), ClientKeys: len(clientKeys)}
		for _, s := range sessions {
			full, err := src.fullSession(ctx, s, opts.Now().UTC())
			if err != nil {
				return err
			}
			if err := tx.Session(ctx, full); err != nil {
				return err
			}
			addSession(&imported, s, len(full.Events)-closeNotes(s))
			evs += len(full.Events)
			done++
			if done%opts.ProgressEvery == 0 {
				report()
			}
		}
		return nil
	})
	if err != nil {
		return rep, fmt.Errorf("%w (nothing was imported)", err)
	}
	rep.Imported = imported
	report()
	return rep, nil
}

// keysByProfile groups client keys under their profiles, in file order.
func keysByProfile(profiles []store.ImportedProfile, keys []store.ImportedKey) []ProfileKeys {
	out := make([]ProfileKeys, 0, len(profiles))
	at := map[string]int{}
	for _, p := range profiles {
		at[p.ID] = len(out)
		out = append(out, ProfileKeys{ProfileID: p.ID, ProfileName: p.Name, Deleted: p.DeletedAt != nil, Keys: []KeyInfo{}})
	}
	for _, k := range keys {
		pk := &out[at[k.ProfileID]]
		pk.Keys = append(pk.Keys, KeyInfo{ID: k.ID, Name: k.Name, Prefix: k.Prefix, Revoked: k.DeletedAt != nil})
	}
	return out
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

func keysOf[V any](m map[string]V) []string {
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
	maxPayload int64
}

func open(ctx context.Context, path string, maxPayload int64) (*source, error) {
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
	src := &source{db: db, eventCount: map[string]int{}, maxPayload: maxPayload}
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
		where := fmt.Sprintf("profile %s", quoted(id))
		if err := checkID(id); err != nil {
			return nil, fmt.Errorf("BAE database: %s: %w", where, err)
		}
		if p.Name == "" {
			return nil, fmt.Errorf("BAE database: %s has no name", where)
		}
		if err := checkText(p.Name, wire.MaxNameBytes); err != nil {
			return nil, fmt.Errorf("BAE database: %s: name %w", where, err)
		}
		var prim string
		if err := json.Unmarshal([]byte(primary.String), &prim); err != nil || prim == "" || checkText(prim, wire.MaxNameBytes) != nil {
			return nil, fmt.Errorf("BAE database: %s: provider_config is not a provider name: %.300q", where, primary.String)
		}
		p.PrimaryProvider = prim
		for _, f := range []struct {
			col string
			in  sql.NullString
			out *json.RawMessage
		}{{"fallback_configs", fallbacks, &p.FallbackProviders}, {"mcp_servers", mcp, &p.MCPServers}, {"allowed_tools", tools, &p.AllowedTools}, {"available_sandboxes", sb, &p.AvailableSandboxes}} {
			if *f.out, err = stringList(f.in); err != nil {
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
		where := fmt.Sprintf("%s key %s", role.String, quoted(id))
		if role.String == store.RoleAdmin {
			admins++
			continue
		}
		if role.String != store.RoleClient && role.String != store.RoleSession {
			return nil, nil, 0, fmt.Errorf("BAE database: key %s has unknown role %.100q", quoted(id), role.String)
		}
		if err := checkID(id); err != nil {
			return nil, nil, 0, fmt.Errorf("BAE database: %s: %w", where, err)
		}
		// The stored costs are what a request presenting this prefix
		// would pay: refused here, they are never run.
		if !keyhash.IsArgon2id(hash.String) {
			return nil, nil, 0, fmt.Errorf("BAE database: %s: key_hash is not an Argon2id PHC string", where)
		}
		if err := keyhash.Check(hash.String); err != nil {
			return nil, nil, 0, fmt.Errorf("BAE database: %s: key_hash: %w", where, err)
		}
		if prefix.String == "" {
			return nil, nil, 0, fmt.Errorf("BAE database: %s has no key_prefix", where)
		}
		if err := checkText(prefix.String, wire.MaxNameBytes); err != nil {
			return nil, nil, 0, fmt.Errorf("BAE database: %s: key_prefix %w", where, err)
		}
		if err := checkText(name.String, wire.MaxNameBytes); err != nil {
			return nil, nil, 0, fmt.Errorf("BAE database: %s: name %w", where, err)
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
			return nil, nil, 0, fmt.Errorf("BAE database: %s names no session or client key", where)
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
		where := fmt.Sprintf("session %s", quoted(id))
		if err := checkID(id); err != nil {
			return nil, fmt.Errorf("BAE database: %s: %w", where, err)
		}
		sess := store.ImportedSession{ID: id, ClientKeyID: clientKey.String, ProfileID: profile.String, State: state.String}
		if version.Valid {
			v := version.String
			if len(v) > wire.MaxClientVersionBytes || strings.ContainsRune(v, 0) {
				return nil, fmt.Errorf("BAE database: %s: client_version must be at most %d bytes with no NUL characters", where, wire.MaxClientVersionBytes)
			}
			sess.ClientVersion = &v
		}
		switch sess.State {
		case store.StateOpen, store.StateClosed, store.StateError:
		default:
			return nil, fmt.Errorf("BAE database: %s has unknown state %.100q", where, sess.State)
		}
		if sess.CreatedAt, err = parseTime(created, where+" created_at"); err != nil {
			return nil, err
		}
		if sess.ClosedAt, err = parseOptTime(closed, where+" closed_at"); err != nil {
			return nil, err
		}
		clients := map[string]*store.ImportedClient{}
		var order []string
		decls := map[string][][]wire.ToolDecl{}
		for _, col := range []struct {
			name string
			in   sql.NullString
			set  func(*store.ImportedClient, json.RawMessage)
		}{
			{"client_tools", tools, func(c *store.ImportedClient, r json.RawMessage) { c.Tools = r }},
			{"sandbox_tools", sbTools, func(c *store.ImportedClient, r json.RawMessage) { c.SandboxTools = r }},
			{"subagent_tools", subTools, func(c *store.ImportedClient, r json.RawMessage) { c.SubagentTools = r }},
		} {
			if int64(len(col.in.String)) > s.maxPayload {
				return nil, fmt.Errorf("BAE database: %s: %s is %d bytes, above the %d a live request may carry", where, col.name, len(col.in.String), s.maxPayload)
			}
			byClient, err := perClient(col.in)
			if err != nil {
				return nil, fmt.Errorf("BAE database: %s: %s: %w", where, col.name, err)
			}
			for _, kv := range byClient {
				var list []wire.ToolDecl
				if len(kv.tools) > 0 {
					if err := json.Unmarshal(kv.tools, &list); err != nil {
						return nil, fmt.Errorf("BAE database: %s: %s: client %.300q: not a list of tool declarations", where, col.name, kv.client)
					}
				}
				decls[kv.client] = append(decls[kv.client], list)
				c, ok := clients[kv.client]
				if !ok {
					c = &store.ImportedClient{ClientKeyID: kv.client}
					clients[kv.client] = c
					order = append(order, kv.client)
				}
				col.set(c, kv.tools)
			}
		}
		// One client's declarations meet the live bounds together.
		for _, id := range order {
			if err := wire.CheckToolDecls(decls[id]...); err != nil {
				return nil, fmt.Errorf("BAE database: %s: tools of client %.300q: %w", where, id, err)
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

// repeatedEventID returns an event id the log holds twice, if any (BAE's
// primary key forbids it; a hand-made file may not), letting SQLite sort
// rather than holding every id in memory.
func (s *source) repeatedEventID(ctx context.Context) (string, error) {
	var id string
	err := s.db.QueryRowContext(ctx, `SELECT id FROM session_events GROUP BY id HAVING count(*) > 1 LIMIT 1`).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("BAE database: read events: %w", err)
	}
	return id, nil
}

// checkEvents reads a session's log once, checking every row (and that
// the target holds none of its event ids), and counts it.
func (s *source) checkEvents(ctx context.Context, st *store.Store, sessionID string) (int, error) {
	var batch []string
	flush := func() error {
		present, err := st.ImportPresence(ctx, nil, nil, nil, batch)
		if err != nil {
			return err
		}
		if len(present) > 0 {
			return fmt.Errorf("BAE database: event %s of session %s: the target already holds that id (was this database imported before?)", present[0], sessionID)
		}
		batch = batch[:0]
		return nil
	}
	n := 0
	err := s.eachEvent(ctx, sessionID, func(e store.ImportedEvent) {
		n++
		batch = append(batch, e.ID)
	}, func() error {
		if len(batch) >= 5000 {
			return flush()
		}
		return nil
	})
	if err == nil && len(batch) > 0 {
		err = flush()
	}
	s.eventCount[sessionID] = n
	return n, err
}

// eachEvent calls fn with every checked event of a session's log, then
// after (if given), whose error ends the read.
func (s *source) eachEvent(ctx context.Context, sessionID string, fn func(store.ImportedEvent), after ...func() error) error {
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
		where := fmt.Sprintf("event %s of session %s", quoted(id), sessionID)
		if err := checkID(id); err != nil {
			return fmt.Errorf("BAE database: %s: %w", where, err)
		}
		if !events.Type(typ).Known() {
			return fmt.Errorf("BAE database: %s has unknown event_type %.100q", where, typ)
		}
		// A live event's payload came in one request body: a bigger one
		// would be served whole by every read of the log.
		if int64(len(payload)) > s.maxPayload {
			return fmt.Errorf("BAE database: %s: payload is %d bytes, above the %d a live request may carry (BAE_MAX_BODY_BYTES)", where, len(payload), s.maxPayload)
		}
		if !json.Valid([]byte(payload)) {
			return fmt.Errorf("BAE database: %s: payload is not valid JSON", where)
		}
		at, err := parseTime(created, where+" created_at")
		if err != nil {
			return err
		}
		fn(store.ImportedEvent{ID: id, ClientKeyID: client.String, Type: typ, Payload: json.RawMessage(payload), CreatedAt: at})
		for _, a := range after {
			if err := a(); err != nil {
				return err
			}
		}
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

// stringList reads a profile's list column: null, or an array of at most
// wire.MaxListItems strings, each as the admin API bounds it.
func stringList(in sql.NullString) (json.RawMessage, error) {
	raw, err := jsonArrayOrNull(in)
	if err != nil || raw == nil {
		return raw, err
	}
	var items []string
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, errors.New("not a JSON array of strings")
	}
	if len(items) > wire.MaxListItems {
		return nil, fmt.Errorf("%d entries, above the %d a profile may hold", len(items), wire.MaxListItems)
	}
	for _, it := range items {
		if err := checkText(it, wire.MaxListItemBytes); err != nil {
			return nil, fmt.Errorf("entry %w", err)
		}
	}
	return raw, nil
}

// checkID bounds a row id as the admin API bounds ids.
func checkID(id string) error {
	if id == "" {
		return errors.New("empty id")
	}
	if err := checkText(id, wire.MaxNameBytes); err != nil {
		return fmt.Errorf("id %w", err)
	}
	return nil
}

// checkText applies the admin API's bounds on a name-like field.
func checkText(v string, limit int) error {
	if len(v) > limit {
		return fmt.Errorf("is %d bytes, above the %d a live request may store", len(v), limit)
	}
	if strings.IndexFunc(v, unicode.IsControl) >= 0 {
		return errors.New("contains control characters")
	}
	return nil
}

// quoted shows an id from the file in a message: as it is when it looks
// like one, quoted and cut short otherwise.
func quoted(id string) string {
	if len(id) <= wire.MaxNameBytes && strings.IndexFunc(id, func(r rune) bool { return unicode.IsControl(r) || unicode.IsSpace(r) }) < 0 && id != "" {
		return id
	}
	return fmt.Sprintf("%.80q", id)
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
