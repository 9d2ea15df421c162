package api_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/testing/testenv"
)

// A profile's "context" (compaction policy) is on by default, can be turned
// off, and is validated before it is stored: 400 when malformed, 422
// invalid_context when out of range, both naming the field.
func TestAdminProfileContextPolicy(t *testing.T) {
	s := testenv.Start(t, testenv.Options{ConfigTOML: providersTOML})
	r := s.Admin(t, http.MethodPost, "/admin/v1/profiles", map[string]any{"name": "plain", "primary_provider": "main"})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Raw))
	pid := r.Body["id"].(string)
	r = s.Admin(t, http.MethodGet, "/admin/v1/profiles/"+pid, nil)
	assert.Equal(t, map[string]any{"enabled": true, "keep_turns": 4.0, "clear_tool_results": true, "summarize": true, "summarizer_provider": "", "trigger": 0.8},
		r.Body["context"], "the default policy, on")

	r = s.Admin(t, http.MethodPut, "/admin/v1/profiles/"+pid, map[string]any{"name": "plain", "primary_provider": "main", "context": map[string]any{"enabled": false, "keep_turns": 2}})
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	r = s.Admin(t, http.MethodGet, "/admin/v1/profiles/"+pid, nil)
	ctx := r.Body["context"].(map[string]any)
	assert.Equal(t, false, ctx["enabled"], "turned off")
	assert.Equal(t, 2.0, ctx["keep_turns"])
	assert.Equal(t, true, ctx["summarize"], "fields left out keep their defaults")

	for name, tc := range map[string]struct {
		ctx    any
		status int
		typ    string
		field  string
	}{
		"not an object":   {[]int{1}, http.StatusBadRequest, "bad_request", "context"},
		"unknown key":     {map[string]any{"keep": 3}, http.StatusBadRequest, "bad_request", "context.keep"},
		"wrong type":      {map[string]any{"enabled": "yes"}, http.StatusBadRequest, "bad_request", "context.enabled"},
		"no turns kept":   {map[string]any{"keep_turns": 0}, http.StatusUnprocessableEntity, "invalid_context", "context.keep_turns"},
		"trigger over 1":  {map[string]any{"trigger": 2}, http.StatusUnprocessableEntity, "invalid_context", "context.trigger"},
		"unknown summary": {map[string]any{"summarizer_provider": "nope"}, http.StatusUnprocessableEntity, "invalid_context", "context.summarizer_provider"},
	} {
		t.Run(name, func(t *testing.T) {
			for _, call := range []struct{ method, path string }{{http.MethodPost, "/admin/v1/profiles"}, {http.MethodPut, "/admin/v1/profiles/" + pid}} {
				r := s.Admin(t, call.method, call.path, map[string]any{"name": "p2", "primary_provider": "main", "context": tc.ctx})
				require.Equal(t, tc.status, r.Status, "%s: %s", call.method, r.Raw)
				assert.Equal(t, tc.typ, problemType(r))
				assert.Contains(t, r.Body["detail"], tc.field)
			}
		})
	}
	r = s.Admin(t, http.MethodGet, "/admin/v1/profiles/"+pid, nil)
	assert.Equal(t, 2.0, r.Body["context"].(map[string]any)["keep_turns"], "a refused update stored nothing")
}
