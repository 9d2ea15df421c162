package api_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/testing/testenv"
)

// pipedPost starts a POST whose body the test writes through the returned
// pipe; the response arrives on the channel once the body is closed.
func pipedPost(t *testing.T, url, token string) (*io.PipeWriter, <-chan *http.Response) {
	t.Helper()
	pr, pw := io.Pipe()
	req, err := http.NewRequest(http.MethodPost, url, pr)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	done := make(chan *http.Response, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("slow request: %v", err)
			close(done)
			return
		}
		done <- resp
	}()
	t.Cleanup(func() { pw.Close() })
	return pw, done
}

// awaitAuthenticated waits until the server has authenticated the client
// key keyID: the first authentication stamps the key's last_used_at.
func awaitAuthenticated(t *testing.T, db *pgx.Conn, keyID string) {
	t.Helper()
	require.Eventually(t, func() bool {
		var used bool
		err := db.QueryRow(context.Background(), `SELECT last_used_at IS NOT NULL FROM keys WHERE id = $1`, keyID).Scan(&used)
		return err == nil && used
	}, 10*time.Second, 5*time.Millisecond, "the server never authenticated the slow request's key")
}

func problemOf(t *testing.T, resp *http.Response) map[string]any {
	t.Helper()
	require.NotNil(t, resp)
	defer resp.Body.Close()
	var p map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&p))
	return p
}

// TestSlowOpenAcrossRevocationIsRefused: an open and a join authenticated
// before their bodies arrived, whose client keys the admin revoked
// meanwhile, are refused with 401 unauthorized once the bodies arrive, and
// leave no session key behind.
func TestSlowOpenAcrossRevocationIsRefused(t *testing.T) {
	s := testenv.Start(t, testenv.Options{ConfigTOML: providersTOML})
	pid := s.Profile(t, map[string]any{"name": "main", "primary_provider": "main"})
	db, err := pgx.Connect(context.Background(), s.DatabaseURL)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close(context.Background()) })

	_, owner := s.Key(t, pid)
	sid, _ := s.Open(t, owner, nil)

	for _, tc := range []struct{ name, path string }{
		{"open", "/api/v1/sessions"},
		{"join", "/api/v1/sessions/" + sid + "/join"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keyID, key := s.Key(t, pid)
			body, resp := pipedPost(t, s.ClientURL+tc.path, key)
			awaitAuthenticated(t, db, keyID)

			r := s.Admin(t, http.MethodDelete, "/admin/v1/keys/"+keyID, nil)
			require.Equal(t, http.StatusNoContent, r.Status, string(r.Raw))

			_, err := body.Write([]byte(`{"client_version":"slow"}`))
			require.NoError(t, err)
			require.NoError(t, body.Close())
			res := <-resp
			p := problemOf(t, res)
			assert.Equal(t, http.StatusUnauthorized, res.StatusCode, "%v", p)
			assert.Equal(t, "unauthorized", p["type"])
			assert.Equal(t, "application/problem+json", res.Header.Get("Content-Type"))

			var minted int
			require.NoError(t, db.QueryRow(context.Background(), `SELECT count(*) FROM keys WHERE role = 'session' AND client_key_id = $1`, keyID).Scan(&minted))
			assert.Zero(t, minted, "no session key was minted for the revoked client key")
		})
	}
}

// TestSessionKeyOfRevokedClientKeyStopsWorking: a session key whose client
// key is revoked (the session key itself left live, as a revocation racing
// an open could leave it before opens checked the key in their transaction)
// is refused by every session-key request, not only by turns.
func TestSessionKeyOfRevokedClientKeyStopsWorking(t *testing.T) {
	s := testenv.Start(t, testenv.Options{ConfigTOML: providersTOML})
	pid := s.Profile(t, map[string]any{"name": "main", "primary_provider": "main"})
	keyID, key := s.Key(t, pid)
	sid, sk := s.Open(t, key, nil)
	require.Equal(t, http.StatusOK, s.Client(t, http.MethodGet, "/api/v1/sessions/"+sid+"/events", sk, nil).Status)
	reg := testenv.Terminal(t, s.Call(t, sid, sk, "session.registerDriver", nil))
	require.Contains(t, reg, "result", "%v", reg)

	db, err := pgx.Connect(context.Background(), s.DatabaseURL)
	require.NoError(t, err)
	defer db.Close(context.Background())
	_, err = db.Exec(context.Background(), `UPDATE keys SET deleted_at = now() WHERE id = $1`, keyID)
	require.NoError(t, err)

	r := s.Client(t, http.MethodGet, "/api/v1/sessions/"+sid+"/events", sk, nil)
	assert.Equal(t, http.StatusUnauthorized, r.Status, "GET /events: %s", r.Raw)
	assert.Equal(t, "unauthorized", r.Body["type"])
	for _, call := range []struct {
		method string
		params any
	}{
		{"session.registerDriver", nil},
		{"session.startRemoteSandbox", map[string]any{"image": "alpine"}},
		{"session.execRemoteSandbox", map[string]any{"command": "id"}},
	} {
		r := s.Client(t, http.MethodPost, "/api/v1/sessions/"+sid+"/rpc", sk,
			map[string]any{"jsonrpc": "2.0", "id": 1, "method": call.method, "params": call.params})
		assert.Equal(t, http.StatusUnauthorized, r.Status, "%s: %s", call.method, r.Raw)
		assert.Equal(t, "unauthorized", r.Body["type"], call.method)
	}
}
