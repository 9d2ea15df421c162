package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/testing/testenv"
)

// Every admin create/update field is bounded and checked before it reaches
// PostgreSQL: an oversized or NUL-carrying value is a 400, never a 500.
func TestAdminRejectsOversizedAndUnstorableFields(t *testing.T) {
	s := testenv.Start(t, testenv.Options{ConfigTOML: providersTOML})
	pid := s.Profile(t, map[string]any{"name": "main", "primary_provider": "main"})
	huge := strings.Repeat("n", 3<<20)
	long := strings.Repeat("n", 1000)
	many := make([]string, 5000)
	for i := range many {
		many[i] = "t" + strings.Repeat("x", i%7)
	}
	profile := func(overrides map[string]any) map[string]any {
		b := map[string]any{"name": "p", "primary_provider": "main"}
		for k, v := range overrides {
			b[k] = v
		}
		return b
	}
	bad := map[string]map[string]any{
		"3 MiB name":               profile(map[string]any{"name": huge}),
		"long name":                profile(map[string]any{"name": long}),
		"NUL in name":              profile(map[string]any{"name": "a\x00b"}),
		"long primary_provider":    profile(map[string]any{"primary_provider": long}),
		"long fallback entry":      profile(map[string]any{"fallback_providers": []string{long}}),
		"NUL in allowed_tools":     profile(map[string]any{"allowed_tools": []string{"a\x00"}}),
		"too many allowed_tools":   profile(map[string]any{"allowed_tools": many}),
		"long mcp server":          profile(map[string]any{"mcp_servers": []string{long}}),
		"long sandbox image":       profile(map[string]any{"available_sandboxes": []string{huge[:5000]}}),
		"blank allowed_tools item": profile(map[string]any{"allowed_tools": []string{" "}}),
	}
	for name, body := range bad {
		t.Run("create "+name, func(t *testing.T) {
			r := s.Admin(t, http.MethodPost, "/admin/v1/profiles", body)
			require.Equal(t, http.StatusBadRequest, r.Status, string(r.Raw[:min(len(r.Raw), 300)]))
			assert.Equal(t, "bad_request", problemType(r))
		})
		t.Run("replace "+name, func(t *testing.T) {
			r := s.Admin(t, http.MethodPut, "/admin/v1/profiles/"+pid, body)
			require.Equal(t, http.StatusBadRequest, r.Status, string(r.Raw[:min(len(r.Raw), 300)]))
			assert.Equal(t, "bad_request", problemType(r))
		})
	}
	for name, body := range map[string]map[string]any{
		"3 MiB key name":  {"name": huge, "profile_id": pid},
		"NUL in key name": {"name": "k\x00", "profile_id": pid},
		"long profile_id": {"name": "k", "profile_id": long},
	} {
		t.Run("key "+name, func(t *testing.T) {
			r := s.Admin(t, http.MethodPost, "/admin/v1/keys", body)
			require.Equal(t, http.StatusBadRequest, r.Status, string(r.Raw[:min(len(r.Raw), 300)]))
			assert.Equal(t, "bad_request", problemType(r))
		})
	}
	// Nothing was stored; the profile is as it was and still usable.
	r := s.Admin(t, http.MethodGet, "/admin/v1/profiles/"+pid, nil)
	require.Equal(t, http.StatusOK, r.Status)
	assert.Equal(t, "main", r.Body["name"])
	r = s.Admin(t, http.MethodGet, "/admin/v1/profiles", nil)
	assert.Len(t, r.Body["items"], 1)
	s.Key(t, pid)
}
