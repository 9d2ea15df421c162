package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/app"
	"github.com/bae-go/bae-go/internal/testing/testenv"
	"github.com/bae-go/bae-go/internal/testing/testlog"
)

// TestSessionOpensWaitForAdmission: with BAE_MAX_CONCURRENT_OPENS=1, an open
// held inside its slot (its session insert waits on a lock) makes the next
// open wait, then get 503 server_busy with Retry-After; once the first
// finishes, opens go through again. A driver registration waits the same way.
func TestSessionOpensWaitForAdmission(t *testing.T) {
	s := testenv.Start(t, testenv.Options{
		ConfigTOML: providersTOML,
		Env:        map[string]string{"BAE_MAX_CONCURRENT_OPENS": "1"},
		Extend: func(p *app.Parts) error {
			p.Deps.AdmissionWait = 300 * time.Millisecond
			return nil
		},
	})
	pid := s.Profile(t, map[string]any{"name": "main", "primary_provider": "main"})
	_, clientKey := s.Key(t, pid)
	sid, sk := s.Open(t, clientKey, nil)

	ctx := context.Background()
	held := holdSessionInserts(t, s.DatabaseURL)
	first := post(s.ClientURL+"/api/v1/sessions", clientKey)
	held.awaitOne(t)

	// Without admission this open would wait on the lock too: the client
	// gives up long before the test's own deadline.
	busyCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(busyCtx, http.MethodPost, s.ClientURL+"/api/v1/sessions", strings.NewReader("{}"))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+clientKey)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err, "the second open is refused, not held")
	var busy map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&busy))
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%v", busy)
	assert.Equal(t, "server_busy", busy["type"])
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))

	// Registering a driver is the other half of connecting: it waits too.
	reg := testenv.Terminal(t, s.Call(t, sid, sk, "session.registerDriver", nil))
	require.Contains(t, reg, "error", "%v", reg)
	rpcErr := reg["error"].(map[string]any)
	assert.EqualValues(t, -32000, rpcErr["code"])
	assert.Contains(t, rpcErr["message"], "server_busy")

	held.release(t)
	assert.Equal(t, http.StatusCreated, <-first, "the held open completes")
	s.Open(t, clientKey, nil)
	reg = testenv.Terminal(t, s.Call(t, sid, sk, "session.registerDriver", nil))
	assert.Contains(t, reg, "result", "%v", reg)
}

// TestOpenThatWaitedRechecksItsKey: an open, a driver registration and a
// join that waited for a slot check their keys again once they have it. The
// keys are revoked while they wait; all three are refused, and nothing is
// stored.
func TestOpenThatWaitedRechecksItsKey(t *testing.T) {
	logs := &testlog.Buffer{}
	s := testenv.Start(t, testenv.Options{
		ConfigTOML: providersTOML,
		Env:        map[string]string{"BAE_MAX_CONCURRENT_OPENS": "1"},
		LogOutput:  logs,
	})
	pid := s.Profile(t, map[string]any{"name": "main", "primary_provider": "main"})
	_, holder := s.Key(t, pid)
	openerID, opener := s.Key(t, pid)
	driverID, driver := s.Key(t, pid)
	joinerID, joiner := s.Key(t, pid)
	// The driver joins a session another key opened: revoking its key
	// revokes its session key and leaves the session open.
	sid, _ := s.Open(t, holder, nil)
	sk := s.Join(t, sid, driver, nil)

	held := holdSessionInserts(t, s.DatabaseURL)
	holding := post(s.ClientURL+"/api/v1/sessions", holder)
	held.awaitOne(t)
	waits := func() int { return strings.Count(logs.String(), "waiting for a session-open slot") }

	waiting := post(s.ClientURL+"/api/v1/sessions", opener)
	require.Eventually(t, func() bool { return waits() == 1 }, 30*time.Second, 10*time.Millisecond, "the second open waits")
	registered := make(chan []map[string]any, 1)
	go func() {
		registered <- s.Call(t, sid, sk, "session.registerDriver", nil)
	}()
	require.Eventually(t, func() bool { return waits() == 2 }, 30*time.Second, 10*time.Millisecond, "the registration waits")
	joining := post(s.ClientURL+"/api/v1/sessions/"+sid+"/join", joiner)
	require.Eventually(t, func() bool { return waits() == 3 }, 30*time.Second, 10*time.Millisecond, "the join waits")

	for _, id := range []string{openerID, driverID, joinerID} {
		require.Equal(t, http.StatusNoContent, s.Admin(t, http.MethodDelete, "/admin/v1/keys/"+id, nil).Status)
	}
	held.release(t)
	assert.Equal(t, http.StatusCreated, <-holding)
	assert.Equal(t, http.StatusUnauthorized, <-waiting, "the waiting open's key was revoked")
	assert.Equal(t, http.StatusUnauthorized, <-joining, "the waiting join's key was revoked")
	reg := testenv.Terminal(t, <-registered)
	require.Contains(t, reg, "error", "%v", reg)
	assert.Contains(t, reg["error"].(map[string]any)["message"], "unauthorized")

	ctx := context.Background()
	var sessions, drivers int
	require.NoError(t, held.db.QueryRow(ctx, `SELECT count(*) FROM sessions WHERE client_key_id = $1`, openerID).Scan(&sessions))
	require.NoError(t, held.db.QueryRow(ctx, `SELECT count(*) FROM session_clients WHERE session_id = $1 AND registered_at IS NOT NULL`, sid).Scan(&drivers))
	var joins int
	require.NoError(t, held.db.QueryRow(ctx, `SELECT count(*) FROM session_clients WHERE session_id = $1 AND client_key_id = $2`, sid, joinerID).Scan(&joins))
	assert.Zero(t, joins, "no join with a revoked key")
	assert.Zero(t, sessions, "no session for the revoked key")
	assert.Zero(t, drivers, "no driver registered with a revoked key")
}

// heldInserts holds every session insert on an advisory lock until release.
type heldInserts struct {
	db *pgx.Conn
}

const holdLock = 4343

func holdSessionInserts(t *testing.T, dbURL string) *heldInserts {
	t.Helper()
	ctx := context.Background()
	db, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close(context.Background()) })
	for _, sql := range []string{
		fmt.Sprintf(`CREATE FUNCTION hold_session() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN PERFORM pg_advisory_xact_lock(%d); RETURN NEW; END $$`, holdLock),
		`CREATE TRIGGER hold BEFORE INSERT ON sessions FOR EACH ROW EXECUTE FUNCTION hold_session()`,
		fmt.Sprintf(`SELECT pg_advisory_lock(%d)`, holdLock),
	} {
		_, err := db.Exec(ctx, sql)
		require.NoError(t, err)
	}
	return &heldInserts{db: db}
}

// awaitOne waits until one session insert is held: the open doing it has the
// only admission slot.
func (h *heldInserts) awaitOne(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		_ = h.db.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'INSERT INTO sessions%'`).Scan(&n)
		return n == 1
	}, 30*time.Second, 20*time.Millisecond, "an open holds the only slot")
}

func (h *heldInserts) release(t *testing.T) {
	t.Helper()
	_, err := h.db.Exec(context.Background(), fmt.Sprintf(`SELECT pg_advisory_unlock(%d)`, holdLock))
	require.NoError(t, err)
}

// post sends an empty JSON body with key as bearer, in the background; the
// channel gets the status (0 when the request failed).
func post(url, key string) <-chan int {
	out := make(chan int, 1)
	go func() {
		status := 0
		req, err := http.NewRequest(http.MethodPost, url, strings.NewReader("{}"))
		if err == nil {
			req.Header.Set("Authorization", "Bearer "+key)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				status = resp.StatusCode
				resp.Body.Close()
			}
		}
		out <- status
	}()
	return out
}
