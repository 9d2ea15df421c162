package baeimport_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/baeimport"
	"github.com/bae-go/bae-go/internal/lib/keyhash"
	"github.com/bae-go/bae-go/internal/testing/testdb"
	"github.com/bae-go/bae-go/internal/testing/testenv"
	"github.com/bae-go/bae-go/store"
)

const providersTOML = `
[[providers.entries]]
name = "main"
provider = "anthropic"
base_url = "http://127.0.0.1:9"
model = "claude-test"
auth_token = "unused"
`

// seeded is a BAE deployment: profiles, keys and sessions with a few
// thousand events.
type seeded struct {
	db            *baeDB
	clientKeys    []string // live client key plaintexts
	revokedKey    string
	sessions      []*seededSession
	openSessions  int
	events        int
	profiles      int
	clientKeyRows int
}

// seed builds the deployment; releaseCost hashes one client key at BAE's
// release costs (64 MiB, t=3), as production databases hold them.
func seed(t *testing.T, releaseCost bool) *seeded {
	t.Helper()
	b := newBAEDB(t)
	s := &seeded{db: b}
	main := b.profile("main", "main", false)
	b.profile("old", "main", true)
	s.profiles = 2
	// The other keys at BAE's debug-build costs, to keep the test quick.
	cost := keyhash.TestParams
	if releaseCost {
		cost = keyhash.BAEParams
	}
	k1, p1 := b.key("client", "bae_", "release-cost", main, "", cost, false)
	k2, p2 := b.key("client", "bae_", "ci", main, "", keyhash.TestParams, false)
	_, revoked := b.key("client", "bae_", "gone", main, "", keyhash.TestParams, true)
	b.key("admin", "bae_admin_", "bootstrap", "", "", keyhash.TestParams, false)
	s.clientKeys, s.revokedKey, s.clientKeyRows = []string{p1, p2}, revoked, 3

	// A long closed session, a shared one still open, an errored one,
	// and a fresh open one with only its open event.
	long := b.session(main, k1, "closed")
	b.sessionKey(long, main, k1)
	b.event(long, k1, "session.open", map[string]any{"client_version": "1.0.0", "tools": []string{"get_current_time"}}, false)
	shared := b.session(main, k2, "open")
	b.sessionKey(shared, main, k2)
	b.event(shared, k2, "session.open", map[string]any{"client_version": "1.0.0", "tools": []string{}}, false)
	b.sessionKey(shared, main, k1)
	b.event(shared, k1, "session.join", map[string]any{"client_version": "2.0.0", "tools": []string{}}, false)
	errored := b.session(main, k2, "error")
	b.sessionKey(errored, main, k2)
	b.event(errored, k2, "session.open", map[string]any{"client_version": "1.0.0", "tools": []string{}}, false)
	// Interleave the logs, as concurrent sessions are in BAE's table.
	for i := 0; i < 600; i++ {
		b.turn(long, k1, i)
		if i%5 == 0 {
			b.turn(shared, []string{k1, k2}[i%2], i)
		}
	}
	b.event(long, k1, "session.close", map[string]any{"reason": "client_close"}, false)
	b.turn(errored, k2, 1)
	b.event(errored, "", "session.error", map[string]any{"reason": "all_providers_failed"}, false)
	fresh := b.session(main, k1, "open")
	b.sessionKey(fresh, main, k1)
	b.event(fresh, k1, "session.open", map[string]any{"client_version": "1.0.0", "tools": []string{}}, false)
	s.sessions = []*seededSession{long, shared, errored, fresh}
	s.openSessions = 2
	for _, ss := range s.sessions {
		s.events += len(ss.Events)
	}
	b.close()
	return s
}

func openStore(t *testing.T, url string) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), url, store.Options{MaxConns: 2, KeyHasher: keyhash.Argon2id{Params: keyhash.TestParams}})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	return st
}

// tableCounts is the target's row count per table.
func tableCounts(t *testing.T, st *store.Store) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, table := range []string{"profiles", "keys", "sessions", "session_clients", "session_events"} {
		var n int
		require.NoError(t, st.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n))
		out[table] = n
	}
	return out
}

func TestImportBAEDatabase(t *testing.T) {
	src := seed(t, true)
	require.Greater(t, src.events, 2000)
	srv := testenv.Start(t, testenv.Options{ConfigTOML: providersTOML})
	st := openStore(t, srv.DatabaseURL)
	ctx := context.Background()
	before := tableCounts(t, st)

	// A dry run counts and writes nothing.
	dry, err := baeimport.Run(ctx, st, baeimport.Options{Path: src.db.Path, DryRun: true})
	require.NoError(t, err)
	want := baeimport.Counts{Profiles: src.profiles, ClientKeys: src.clientKeyRows, Sessions: 4, SessionKeys: 5, Events: src.events, OpenSessions: src.openSessions}
	assert.Equal(t, want, dry.Source)
	assert.Equal(t, want, dry.Imported)
	assert.Equal(t, 1, dry.AdminKeys)
	assert.Equal(t, 8, dry.SchemaVersion)
	assert.Equal(t, before, tableCounts(t, st), "a dry run writes nothing")

	var progress []baeimport.Progress
	rep, err := baeimport.Run(ctx, st, baeimport.Options{Path: src.db.Path, ProgressEvery: 1,
		Progress: func(p baeimport.Progress) { progress = append(progress, p) }})
	require.NoError(t, err)
	assert.Equal(t, want, rep.Imported)
	// The report lists every client key under its profile.
	require.Len(t, rep.KeysByProfile, 2)
	assert.Equal(t, "main", rep.KeysByProfile[0].ProfileName)
	assert.False(t, rep.KeysByProfile[0].Deleted)
	require.Len(t, rep.KeysByProfile[0].Keys, 3)
	assert.Equal(t, []string{"release-cost", "ci", "gone"}, []string{rep.KeysByProfile[0].Keys[0].Name, rep.KeysByProfile[0].Keys[1].Name, rep.KeysByProfile[0].Keys[2].Name})
	assert.Equal(t, src.clientKeys[0][:8], rep.KeysByProfile[0].Keys[0].Prefix)
	assert.True(t, rep.KeysByProfile[0].Keys[2].Revoked)
	assert.Equal(t, "old", rep.KeysByProfile[1].ProfileName)
	assert.True(t, rep.KeysByProfile[1].Deleted)
	assert.Empty(t, rep.KeysByProfile[1].Keys)
	assert.Equal(t, dry.KeysByProfile, rep.KeysByProfile)
	require.NotEmpty(t, progress)
	assert.Equal(t, baeimport.Progress{Sessions: 4, TotalSessions: 4, Events: src.events + src.openSessions}, progress[len(progress)-1])
	after := tableCounts(t, st)

	// Every live client key authenticates: it opens a session on the
	// imported profile; the revoked one is refused.
	for _, k := range src.clientKeys {
		srv.Open(t, k, nil)
	}
	r := srv.Client(t, http.MethodPost, "/api/v1/sessions", src.revokedKey, map[string]any{})
	assert.Equal(t, http.StatusUnauthorized, r.Status)
	r = srv.Admin(t, http.MethodGet, "/admin/v1/profiles", nil)
	require.Equal(t, http.StatusOK, r.Status)
	assert.Len(t, r.Body["items"], 1, "the deleted profile stays deleted")

	for _, ss := range src.sessions {
		wantEvents := ss.Events
		if ss.State == "open" {
			wantEvents = append(append([]seededEvent(nil), ss.Events...), seededEvent{Type: "session.close", Payload: map[string]any{"reason": "imported"}})
		}
		for _, key := range ss.Keys {
			// The REST log, page by page, in BAE's order, ids and times kept.
			var got []map[string]any
			cursor := ""
			for {
				r := srv.Client(t, http.MethodGet, "/api/v1/sessions/"+ss.ID+"/events?limit=500&cursor="+cursor, key, nil)
				require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
				for _, it := range r.Body["items"].([]any) {
					got = append(got, it.(map[string]any))
				}
				next, _ := r.Body["next_cursor"].(string)
				if next == "" {
					break
				}
				cursor = next
			}
			checkLog(t, ss, wantEvents, got)

			// The same through session.subscribe's replay.
			sctx, cancel := context.WithTimeout(ctx, time.Minute)
			sub := srv.RPCStream(t, sctx, ss.ID, key, map[string]any{"jsonrpc": "2.0", "id": 1, "method": "session.subscribe",
				"params": map[string]any{"since_event_id": "evt_unknown"}})
			require.Equal(t, http.StatusOK, sub.Status())
			var replayed []map[string]any
			for len(replayed) < len(wantEvents) {
				m := sub.Next(30 * time.Second)
				require.NotNil(t, m, "replay of %s ended after %d of %d events", ss.ID, len(replayed), len(wantEvents))
				if p, ok := m["params"].(map[string]any); ok && m["method"] == "session.event" {
					replayed = append(replayed, p)
				}
			}
			sub.Close()
			cancel()
			checkLog(t, ss, wantEvents, replayed)
		}
		sess, err := st.GetSession(ctx, ss.ID)
		require.NoError(t, err)
		if ss.State == "open" {
			assert.Equal(t, store.StateClosed, sess.State, "open sessions arrive closed")
			assert.NotNil(t, sess.ClosedAt)
		} else {
			assert.Equal(t, ss.State, sess.State)
		}
	}

	// A re-run is refused (the target holds the file's ids) and changes
	// nothing.
	_, err = baeimport.Run(ctx, st, baeimport.Options{Path: src.db.Path})
	assert.ErrorContains(t, err, "the target already holds that id")
	now := tableCounts(t, st)
	// The two sessions the key check opened are the only change since.
	assert.Equal(t, after["profiles"], now["profiles"])
	assert.Equal(t, after["sessions"]+2, now["sessions"])
	assert.Equal(t, after["session_events"]+2, now["session_events"])
	_, err = baeimport.Run(ctx, st, baeimport.Options{Path: src.db.Path, DryRun: true})
	assert.ErrorContains(t, err, "the target already holds that id")
}

// checkLog compares a session's log read back with what BAE held.
func checkLog(t *testing.T, ss *seededSession, want []seededEvent, got []map[string]any) {
	t.Helper()
	require.Equal(t, len(want), len(got), "events of %s", ss.ID)
	for i, w := range want {
		g := got[i]
		assert.Equal(t, w.Type, g["event_type"], "%s event %d", ss.ID, i)
		assert.Equal(t, ss.ID, g["session_id"])
		if w.ID == "" { // the import's close note
			assert.Regexp(t, `^evt_[0-9a-f]{32}$`, g["id"])
			assert.Nil(t, g["client_key_id"])
		} else {
			assert.Equal(t, w.ID, g["id"], "%s event %d", ss.ID, i)
			assert.Equal(t, w.CreatedAt, g["created_at"], "%s event %d", ss.ID, i)
			if w.ClientKeyID == "" {
				assert.Nil(t, g["client_key_id"])
			} else {
				assert.Equal(t, w.ClientKeyID, g["client_key_id"])
			}
		}
		assert.Equal(t, w.Payload, g["payload"], "%s event %d", ss.ID, i)
	}
}

func TestImportRefusesBadDatabases(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, testdb.New(t))
	empty := tableCounts(t, st)

	t.Run("unknown schema version", func(t *testing.T) {
		b := newBAEDB(t)
		b.exec(`INSERT INTO schema_version (version, applied_at) VALUES (9, datetime('now'))`)
		b.close()
		_, err := baeimport.Run(ctx, st, baeimport.Options{Path: b.Path})
		var se *baeimport.SchemaError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, 9, se.Version)
		assert.ErrorContains(t, err, "schema version 9 is not one this importer knows (it reads versions 6 to 8)")
	})
	t.Run("not a database", func(t *testing.T) {
		p := t.TempDir() + "/bae.db"
		require.NoError(t, os.WriteFile(p, []byte("this is not SQLite, just text long enough to look like a header............................................................"), 0o600))
		_, err := baeimport.Run(ctx, st, baeimport.Options{Path: p})
		assert.ErrorContains(t, err, "is not a readable SQLite database")
	})
	t.Run("missing file", func(t *testing.T) {
		_, err := baeimport.Run(ctx, st, baeimport.Options{Path: t.TempDir() + "/absent.db"})
		assert.ErrorContains(t, err, "no such file")
	})
	t.Run("damaged pages", func(t *testing.T) {
		src := seed(t, false)
		raw, err := os.ReadFile(src.db.Path)
		require.NoError(t, err)
		// Scribble over the middle of the file, past the header page.
		for i := len(raw) / 2; i < len(raw)/2+8192 && i < len(raw); i++ {
			raw[i] = 0xA5
		}
		require.NoError(t, os.WriteFile(src.db.Path, raw, 0o600))
		_, err = baeimport.Run(ctx, st, baeimport.Options{Path: src.db.Path})
		require.Error(t, err)
		assert.Regexp(t, `corrupted|not a readable SQLite database|malformed`, err.Error())
	})
	t.Run("bad row late in the log", func(t *testing.T) {
		src := seed(t, false)
		b := src.db
		db := reopen(t, b)
		last := src.sessions[len(src.sessions)-1]
		_, err := db.Exec(`UPDATE session_events SET payload = '{"role": "user", "content": ' WHERE id = ?`, last.Events[0].ID)
		require.NoError(t, err)
		require.NoError(t, db.Close())
		_, err = baeimport.Run(ctx, st, baeimport.Options{Path: b.Path})
		assert.ErrorContains(t, err, "event "+last.Events[0].ID+" of session "+last.ID+": payload is not valid JSON")
	})
	t.Run("unknown event type", func(t *testing.T) {
		src := seed(t, false)
		db := reopen(t, src.db)
		_, err := db.Exec(`UPDATE session_events SET event_type = 'session.teleport' WHERE id = ?`, src.sessions[1].Events[3].ID)
		require.NoError(t, err)
		require.NoError(t, db.Close())
		_, err = baeimport.Run(ctx, st, baeimport.Options{Path: src.db.Path})
		assert.ErrorContains(t, err, `unknown event_type "session.teleport"`)
	})
	assert.Equal(t, empty, tableCounts(t, st), "a refused database leaves the target unchanged")
}

// The import is one transaction: a row that fails to store half-way (here
// a session id another writer took after the checks) leaves nothing of
// the file in the target, and a re-run after the cause is gone completes.
func TestImportIsAllOrNothing(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, testdb.New(t))
	src := seed(t, false)
	p, err := st.CreateProfile(ctx, store.ProfileInput{Name: "other", PrimaryProvider: "main"})
	require.NoError(t, err)
	k, _, err := st.NewClientKey(ctx, "other", p.ID)
	require.NoError(t, err)
	before := tableCounts(t, st)
	clash := src.sessions[2]
	took := false
	_, err = baeimport.Run(ctx, st, baeimport.Options{Path: src.db.Path, ProgressEvery: 1, Progress: func(pr baeimport.Progress) {
		if pr.Sessions == 1 && !took {
			took = true
			_, err := st.Pool.Exec(ctx, `INSERT INTO sessions (id, profile_id, client_key_id, state) VALUES ($1, $2, $3, 'closed')`, clash.ID, p.ID, k.ID)
			require.NoError(t, err)
		}
	}})
	require.ErrorContains(t, err, "import session "+clash.ID)
	assert.ErrorContains(t, err, "nothing was imported")
	require.True(t, took)
	after := tableCounts(t, st)
	after["sessions"]-- // the other writer's row
	assert.Equal(t, before, after, "nothing of the file is stored")
	_, err = st.GetSession(ctx, src.sessions[0].ID)
	assert.ErrorIs(t, err, store.ErrNotFound, "not even the sessions stored before the failure")

	_, err = st.Pool.Exec(ctx, `DELETE FROM sessions WHERE id = $1`, clash.ID)
	require.NoError(t, err)
	rep, err := baeimport.Run(ctx, st, baeimport.Options{Path: src.db.Path})
	require.NoError(t, err)
	assert.Equal(t, 4, rep.Imported.Sessions)
	assert.Equal(t, int64(len(clash.Events)), lastSeq(t, st, clash.ID))
}

func lastSeq(t *testing.T, st *store.Store, sessionID string) int64 {
	t.Helper()
	n, err := st.LastEventSeq(context.Background(), sessionID)
	require.NoError(t, err)
	return n
}

func reopen(t *testing.T, b *baeDB) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+b.Path)
	require.NoError(t, err)
	return db
}

// A live profile name BAE used that the target already gives another
// profile is refused before anything is written.
func TestImportRefusesTakenProfileName(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, testdb.New(t))
	taken, err := st.CreateProfile(ctx, store.ProfileInput{Name: "main", PrimaryProvider: "main"})
	require.NoError(t, err)
	before := tableCounts(t, st)
	src := seed(t, false)
	_, err = baeimport.Run(ctx, st, baeimport.Options{Path: src.db.Path})
	assert.ErrorContains(t, err, `profile name "main" is taken in the target by `+taken.ID)
	_, err = baeimport.Run(ctx, st, baeimport.Options{Path: src.db.Path, DryRun: true})
	assert.ErrorContains(t, err, `profile name "main" is taken`)
	assert.Equal(t, before, tableCounts(t, st))
	// A deleted profile of that name is no obstacle.
	require.NoError(t, st.DeleteProfile(ctx, taken.ID))
	rep, err := baeimport.Run(ctx, st, baeimport.Options{Path: src.db.Path})
	require.NoError(t, err)
	assert.Equal(t, 4, rep.Imported.Sessions)
}

// Hostile files, each with one defect, are refused naming the row, and the
// target is unchanged: costs that would take a replica down at the first
// request, keys and sessions planted on the target's profile, rows above
// the live limits, ids and key prefixes the target already holds.
func TestImportRefusesHostileFiles(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, testdb.New(t))
	target, err := st.CreateProfile(ctx, store.ProfileInput{Name: "target", PrimaryProvider: "main"})
	require.NoError(t, err)
	targetKey, _, err := st.NewClientKey(ctx, "target", target.ID)
	require.NoError(t, err)
	before := tableCounts(t, st)
	salt, digest := "MDEyMzQ1Njc4OWFiY2RlZg", strings.Repeat("A", 43)
	goodHash, err := keyhash.Argon2id{Params: keyhash.TestParams}.Hash("bae_" + strings.Repeat("c", 48))
	require.NoError(t, err)

	for _, tc := range []struct {
		name  string
		build func(b *baeDB) (wantErr string)
	}{
		{"memory cost of 4 GiB", func(b *baeDB) string {
			p := b.profile("p", "main", false)
			id := b.rawKey("client", "k", "$argon2id$v=19$m=4294967295,t=1,p=1$"+salt+"$"+digest, "bae_cccc", p, "")
			return "client key " + id + ": key_hash: Argon2 memory cost m=4294967295 KiB is above the 65536 KiB this server verifies"
		}},
		{"time cost", func(b *baeDB) string {
			p := b.profile("p", "main", false)
			id := b.rawKey("client", "k", "$argon2id$v=19$m=65536,t=100,p=1$"+salt+"$"+digest, "bae_cccc", p, "")
			return "client key " + id + ": key_hash: Argon2 time cost t=100 is above the 4"
		}},
		{"session key cost", func(b *baeDB) string {
			p := b.profile("p", "main", false)
			k := b.rawKey("client", "k", goodHash, "bae_cccc", p, "")
			s := b.session(p, k, "closed")
			id := b.rawKey("session", s.ID, "$argon2id$v=19$m=4096,t=1,p=64$"+salt+"$"+digest, "bae_ses_", p, k)
			return "session key " + id + ": key_hash: Argon2 parallelism p=64 is above the 4"
		}},
		{"client key on the target's profile", func(b *baeDB) string {
			id := b.rawKey("client", "planted", goodHash, "bae_cccc", target.ID, "")
			return "client key " + id + ` names profile "` + target.ID + `", which is not in this database`
		}},
		{"session on the target's profile", func(b *baeDB) string {
			p := b.profile("p", "main", false)
			k := b.rawKey("client", "k", goodHash, "bae_cccc", p, "")
			s := b.session(target.ID, k, "closed")
			return "session " + s.ID + ` names profile "` + target.ID + `", which is not in this database`
		}},
		{"profile id the target holds", func(b *baeDB) string {
			b.exec(`INSERT INTO profiles (id, name, provider_config, created_at) VALUES (?, 'elsewhere', '"main"', ?)`, target.ID, b.stamp(false))
			b.rawKey("client", "planted", goodHash, "bae_cccc", target.ID, "")
			return "profile " + target.ID + ": the target already holds that id"
		}},
		{"key id the target holds", func(b *baeDB) string {
			p := b.profile("p", "main", false)
			b.exec(`INSERT INTO keys (id, name, key_hash, key_prefix, role, profile_id, created_at) VALUES (?, 'k', ?, 'bae_cccc', 'client', ?, ?)`,
				targetKey.ID, goodHash, p, b.stamp(false))
			return "client key " + targetKey.ID + ": the target already holds that id"
		}},
		{"key prefix the target holds", func(b *baeDB) string {
			p := b.profile("p", "main", false)
			id := b.rawKey("client", "k", goodHash, targetKey.Prefix, p, "")
			return "client key " + id + `: its prefix "` + targetKey.Prefix + `" is held by the target's live key ` + targetKey.ID
		}},
		{"two live keys under one prefix", func(b *baeDB) string {
			p := b.profile("p", "main", false)
			k1 := b.rawKey("client", "k1", goodHash, "bae_cccc", p, "")
			k2 := b.rawKey("client", "k2", goodHash, "bae_cccc", p, "")
			return "client keys " + k1 + " and " + k2 + ` are both live under the prefix "bae_cccc"`
		}},
		{"event payload above the live cap", func(b *baeDB) string {
			p := b.profile("p", "main", false)
			k := b.rawKey("client", "k", goodHash, "bae_cccc", p, "")
			s := b.session(p, k, "closed")
			b.event(s, k, "session.open", map[string]any{"tools": []string{}}, false)
			b.event(s, k, "client.message.send", map[string]any{"role": "user", "content": strings.Repeat("x", 4<<20)}, false)
			return "event " + s.Events[1].ID + " of session " + s.ID + ": payload is 4194332 bytes, above the 4194304 a live request may carry"
		}},
		{"client_version above the live cap", func(b *baeDB) string {
			p := b.profile("p", "main", false)
			k := b.rawKey("client", "k", goodHash, "bae_cccc", p, "")
			s := b.session(p, k, "closed")
			b.exec(`UPDATE sessions SET client_version = ? WHERE id = ?`, strings.Repeat("1", 2000), s.ID)
			return "session " + s.ID + ": client_version must be at most 1024 bytes"
		}},
		{"tool declarations above the live cap", func(b *baeDB) string {
			p := b.profile("p", "main", false)
			k := b.rawKey("client", "k", goodHash, "bae_cccc", p, "")
			s := b.session(p, k, "closed")
			var tools []map[string]any
			for i := range 129 {
				tools = append(tools, map[string]any{"name": fmt.Sprintf("t%d", i)})
			}
			raw, _ := json.Marshal(map[string]any{k: tools})
			b.exec(`UPDATE sessions SET client_tools = ? WHERE id = ?`, string(raw), s.ID)
			return "session " + s.ID + ": tools of client \"" + k + "\": at most 128 tools may be declared"
		}},
		{"event id twice", func(b *baeDB) string {
			p := b.profile("p", "main", false)
			k := b.rawKey("client", "k", goodHash, "bae_cccc", p, "")
			s := b.session(p, k, "closed")
			b.event(s, k, "session.open", map[string]any{"tools": []string{}}, false)
			b.exec(`ALTER TABLE session_events RENAME TO old_events`)
			b.exec(`CREATE TABLE session_events (id TEXT, session_id TEXT, client_key_id TEXT, event_type TEXT NOT NULL, payload TEXT NOT NULL, created_at TEXT NOT NULL)`)
			b.exec(`INSERT INTO session_events SELECT id, session_id, client_key_id, event_type, payload, created_at FROM old_events`)
			b.exec(`INSERT INTO session_events SELECT id, session_id, client_key_id, event_type, payload, created_at FROM old_events`)
			return "event " + s.Events[0].ID + " appears more than once"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBAEDB(t)
			want := tc.build(b)
			b.close()
			for _, dry := range []bool{true, false} {
				_, err := baeimport.Run(ctx, st, baeimport.Options{Path: b.Path, DryRun: dry})
				require.Error(t, err, "dry run %v", dry)
				assert.Contains(t, err.Error(), want, "dry run %v", dry)
			}
			assert.Equal(t, before, tableCounts(t, st), "the target is unchanged")
		})
	}
}
