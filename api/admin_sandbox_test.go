package api_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/testing/testenv"
)

// A profile's "sandbox" object overrides the [sandbox] bounds; it is
// validated before it is stored, and echoed as stored.
func TestAdminProfileSandboxSettings(t *testing.T) {
	s := testenv.Start(t, testenv.Options{ConfigTOML: providersTOML})
	profile := func(sb any) map[string]any {
		return map[string]any{"name": "p", "primary_provider": "main", "sandbox": sb}
	}

	r := s.Admin(t, http.MethodPost, "/admin/v1/profiles", map[string]any{"name": "plain", "primary_provider": "main"})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Raw))
	plain := r.Body["id"].(string)
	r = s.Admin(t, http.MethodGet, "/admin/v1/profiles/"+plain, nil)
	assert.Equal(t, map[string]any{}, r.Body["sandbox"], "no overrides: an empty object")

	r = s.Admin(t, http.MethodPost, "/admin/v1/profiles", profile(map[string]any{
		"memory_mib": 2048, "cpus": 2, "network": "bridge", "cap_add": []string{"cap_chown"}, "exec_timeout_secs": 30,
	}))
	require.Equal(t, http.StatusCreated, r.Status, string(r.Raw))
	pid := r.Body["id"].(string)
	r = s.Admin(t, http.MethodGet, "/admin/v1/profiles/"+pid, nil)
	require.Equal(t, http.StatusOK, r.Status)
	assert.Equal(t, map[string]any{"memory_mib": 2048.0, "cpus": 2.0, "network": "bridge", "cap_add": []any{"CHOWN"}, "exec_timeout_secs": 30.0}, r.Body["sandbox"])

	for name, tc := range map[string]struct {
		sb     any
		status int
		typ    string
	}{
		"not an object":  {[]int{1}, http.StatusBadRequest, "bad_request"},
		"a string":       {"big", http.StatusBadRequest, "bad_request"},
		"unknown key":    {map[string]any{"memory": "1g"}, http.StatusBadRequest, "bad_request"},
		"wrong type":     {map[string]any{"pids": "many"}, http.StatusBadRequest, "bad_request"},
		"host network":   {map[string]any{"network": "host"}, http.StatusUnprocessableEntity, "invalid_sandbox"},
		"tiny memory":    {map[string]any{"memory_mib": 1}, http.StatusUnprocessableEntity, "invalid_sandbox"},
		"cap_add ALL":    {map[string]any{"cap_add": []string{"ALL"}}, http.StatusUnprocessableEntity, "invalid_sandbox"},
		"long timeout":   {map[string]any{"exec_timeout_secs": 86400}, http.StatusUnprocessableEntity, "invalid_sandbox"},
		"shell in user":  {map[string]any{"user": "$(reboot)"}, http.StatusUnprocessableEntity, "invalid_sandbox"},
		"too many cpus":  {map[string]any{"cpus": 1e9}, http.StatusUnprocessableEntity, "invalid_sandbox"},
		"negative pids":  {map[string]any{"pids": -1}, http.StatusUnprocessableEntity, "invalid_sandbox"},
		"fractional pid": {map[string]any{"pids": 1.5}, http.StatusBadRequest, "bad_request"},
	} {
		t.Run(name, func(t *testing.T) {
			for _, call := range []struct{ method, path string }{{http.MethodPost, "/admin/v1/profiles"}, {http.MethodPut, "/admin/v1/profiles/" + pid}} {
				r := s.Admin(t, call.method, call.path, profile(tc.sb))
				require.Equal(t, tc.status, r.Status, "%s: %s", call.method, r.Raw)
				assert.Equal(t, tc.typ, problemType(r))
				assert.Contains(t, r.Body["detail"], "sandbox")
			}
		})
	}
	// Nothing bad was stored.
	r = s.Admin(t, http.MethodGet, "/admin/v1/profiles/"+pid, nil)
	assert.Equal(t, "bridge", r.Body["sandbox"].(map[string]any)["network"])

	// A replace without "sandbox" clears the overrides (PUT is a full
	// replacement).
	r = s.Admin(t, http.MethodPut, "/admin/v1/profiles/"+pid, map[string]any{"name": "p", "primary_provider": "main"})
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	assert.Equal(t, map[string]any{}, r.Body["sandbox"])
}
