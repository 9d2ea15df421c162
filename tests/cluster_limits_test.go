package tests

import (
	"net/http"
	"testing"

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
