package api_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/testing/testenv"
)

// TestConflictAndMethodSlugs: the slugs of docs/api.md's errors table that
// no other test looked for: a wrong method on either port, and the admin
// interrupt on a session that is not open or naming a turn that is not
// running.
func TestConflictAndMethodSlugs(t *testing.T) {
	s := testenv.Start(t, testenv.Options{ConfigTOML: providersTOML})
	r := s.Client(t, http.MethodPut, "/healthz", "", nil)
	assert.Equal(t, http.StatusMethodNotAllowed, r.Status)
	assert.Equal(t, "method_not_allowed", problemType(r), string(r.Raw))
	r = s.Admin(t, http.MethodPatch, "/admin/v1/profiles", nil)
	assert.Equal(t, http.StatusMethodNotAllowed, r.Status)
	assert.Equal(t, "method_not_allowed", problemType(r), string(r.Raw))

	pid := s.Profile(t, map[string]any{"name": "slugs", "primary_provider": "main"})
	_, key := s.Key(t, pid)
	sid, sk := s.Open(t, key, nil)
	r = s.Admin(t, http.MethodPost, "/admin/v1/sessions/"+sid+"/interrupt", map[string]any{"turnId": "trn_nope"})
	assert.Equal(t, http.StatusConflict, r.Status)
	assert.Equal(t, "turn_not_running", problemType(r), string(r.Raw))

	require.Equal(t, http.StatusOK, s.Client(t, http.MethodDelete, "/api/v1/sessions/"+sid, sk, nil).Status)
	r = s.Admin(t, http.MethodPost, "/admin/v1/sessions/"+sid+"/interrupt", nil)
	assert.Equal(t, http.StatusConflict, r.Status)
	assert.Equal(t, "session_not_open", problemType(r), string(r.Raw))
}
