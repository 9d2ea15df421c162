package tests

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/testenv"
)

// TestAuthFailuresCountAcrossReplicas: with a limit of 4 failed
// authentications a minute, a client that alternates between two replicas
// is refused (429) once its failures on both together reach 4, not 4 on
// each: the count is PostgreSQL's. The replica that did not see the 4th
// failure blocks at its next one. Red with per-replica counts.
func TestAuthFailuresCountAcrossReplicas(t *testing.T) {
	fake := fakeprovider.New(t)
	a, b := startReplicaPairEnv(t, fake.URL(), "authlimit", map[string]string{"BAE_AUTH_FAILURE_LIMIT": "4"})
	bad := func(s *testenv.Server) int {
		return testenv.Do(t, http.MethodGet, s.ClientURL+"/api/v1/sessions/ses_x/events", "sk_wrong", nil).Status
	}
	for i := 0; i < 2; i++ {
		require.Equal(t, http.StatusUnauthorized, bad(a), "failure %d on A", 2*i+1)
		require.Equal(t, http.StatusUnauthorized, bad(b), "failure %d on B", 2*i+2)
	}
	assert.Equal(t, http.StatusTooManyRequests, bad(b), "B counted A's failures too")
	assert.Equal(t, http.StatusUnauthorized, bad(a), "A learns the count with its next failure")
	assert.Equal(t, http.StatusTooManyRequests, bad(a))
	// The admin port counts on its own.
	assert.Equal(t, http.StatusUnauthorized, testenv.Do(t, http.MethodGet, a.AdminURL+"/admin/v1/profiles", "wrong", nil).Status)
}

// TestStreamCapsCountAcrossReplicas: with at most 2 live streams per
// session, a stream held on replica A and one on replica B fill the cap:
// a third on A is refused once A has read B's count (its next sharing
// period), and a stream that ends on B gives its place back on A. Red
// with per-replica counts (A alone holds one of 2).
func TestStreamCapsCountAcrossReplicas(t *testing.T) {
	fake := fakeprovider.New(t)
	a, b := startReplicaPairEnv(t, fake.URL(), "streamcap", map[string]string{"BAE_MAX_STREAMS_PER_SESSION": "2"})
	pid := a.Profile(t, map[string]any{"name": "main", "primary_provider": "primary"})
	_, key := a.Key(t, pid)
	sid, sk := a.Open(t, key, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a.Call(t, sid, sk, "session.registerDriver", nil)
	r := a.Client(t, http.MethodGet, "/api/v1/sessions/"+sid+"/events?limit=10", sk, nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	items := r.Body["items"].([]any)
	require.GreaterOrEqual(t, len(items), 2)
	first := items[0].(map[string]any)["id"].(string)
	sub := map[string]any{"jsonrpc": "2.0", "id": 1, "method": "session.subscribe", "params": map[string]any{}}
	onA := a.RPCStream(t, ctx, sid, sk, sub)
	defer onA.Close()
	onB := b.RPCStream(t, ctx, sid, sk, sub)
	// A refused subscribe ends with the error; an admitted one relays the
	// session's events after its first.
	probe := map[string]any{"jsonrpc": "2.0", "id": 1, "method": "session.subscribe", "params": map[string]any{"since_event_id": first}}
	refused := func(s *testenv.Server) bool {
		st := s.RPCStream(t, ctx, sid, sk, probe)
		defer st.Close()
		m := st.Next(10 * time.Second)
		require.NotNil(t, m, "the probe stream stayed silent")
		e, _ := m["error"].(map[string]any)
		if e == nil {
			require.Equal(t, "session.event", m["method"], "%v", m)
			return false
		}
		require.Contains(t, e["message"], "quota_exceeded: this session already has 2 live streams")
		return true
	}
	pool := a.Parts.Store.Pool
	repA, repB := a.Parts.Deps.StreamCounts.Replica(), b.Parts.Deps.StreamCounts.Replica()
	// afterA waits until B's row for the session is there (or gone), then
	// until A has shared its counts since, and so read B's as they are.
	afterA := func(bHasRow bool) {
		var since time.Time
		require.Eventually(t, func() bool {
			var has bool
			require.NoError(t, pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM stream_counts WHERE replica = $1 AND subject = $2), clock_timestamp()`, repB, sid).Scan(&has, &since))
			return has == bHasRow
		}, 15*time.Second, 20*time.Millisecond, "B's count of the session")
		require.Eventually(t, func() bool {
			var seen time.Time
			err := pool.QueryRow(ctx, `SELECT seen_at FROM stream_counts WHERE replica = $1 AND subject = $2`, repA, sid).Scan(&seen)
			return err == nil && seen.After(since)
		}, 15*time.Second, 20*time.Millisecond, "A shares its counts")
	}
	afterA(true)
	assert.True(t, refused(a), "A counts B's stream")
	onB.Close()
	afterA(false)
	assert.False(t, refused(a), "B's ended stream gives its place back")
}
