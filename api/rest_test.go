package api_test

import (
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/testing/testenv"
)

const providersTOML = `
[[providers.entries]]
name = "main"
provider = "anthropic"
base_url = "http://127.0.0.1:9"
model = "claude-test"
auth_token = "${BAE_TEST_UNUSED_TOKEN}"
`

func problemType(r testenv.Response) string {
	t, _ := r.Body["type"].(string)
	return t
}

func TestHealthAndMeta(t *testing.T) {
	s := testenv.Start(t, testenv.Options{ConfigTOML: providersTOML})
	r := s.Client(t, http.MethodGet, "/healthz", "", nil)
	assert.Equal(t, http.StatusOK, r.Status)
	assert.Empty(t, r.Raw)
	r = s.Client(t, http.MethodGet, "/api/v1/meta", "", nil)
	require.Equal(t, http.StatusOK, r.Status)
	assert.Equal(t, []any{"v1"}, r.Body["api_versions"])
	assert.NotEmpty(t, r.Body["version"])
}

func TestAuthMatrix(t *testing.T) {
	s := testenv.Start(t, testenv.Options{ConfigTOML: providersTOML})
	pid := s.Profile(t, map[string]any{"name": "main", "primary_provider": "main"})
	keyID, clientKey := s.Key(t, pid)
	sid, sessKey := s.Open(t, clientKey, nil)
	otherSid, otherKey := s.Open(t, clientKey, nil)
	_ = otherSid

	raw := func(method, path, header string) testenv.Response {
		req, err := http.NewRequest(method, s.ClientURL+path, strings.NewReader("{}"))
		require.NoError(t, err)
		if header != "" {
			req.Header.Set("Authorization", header)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		return testenv.Response{Status: resp.StatusCode}
	}
	events := "/api/v1/sessions/" + sid + "/events"
	cases := []struct {
		name, method, path, header string
		want                       int
	}{
		{"missing header", http.MethodGet, events, "", 401},
		{"empty bearer", http.MethodGet, events, "Bearer ", 401},
		{"other scheme", http.MethodGet, events, "Basic abc", 401},
		{"lowercase bearer", http.MethodGet, events, "bearer " + sessKey, 200},
		{"capital bearer", http.MethodGet, events, "Bearer " + sessKey, 200},
		{"client key on session route", http.MethodGet, events, "Bearer " + clientKey, 401},
		{"other session's key", http.MethodGet, events, "Bearer " + otherKey, 401},
		{"session key to open a session", http.MethodPost, "/api/v1/sessions", "Bearer " + sessKey, 401},
		{"admin key on client port", http.MethodPost, "/api/v1/sessions", "Bearer " + s.AdminKey, 401},
		{"garbage", http.MethodPost, "/api/v1/sessions", "Bearer bae_nope", 401},
		{"rpc with other session's key", http.MethodPost, "/api/v1/sessions/" + sid + "/rpc", "Bearer " + otherKey, 401},
		{"participants without key", http.MethodGet, "/api/v1/sessions/" + sid + "/participants", "", 401},
		{"delete without key", http.MethodDelete, "/api/v1/sessions/" + sid, "", 401},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, raw(c.method, c.path, c.header).Status)
		})
	}

	// Admin port: client and session keys never authenticate.
	for _, tok := range []string{"", clientKey, sessKey, "bae_admin_wrong"} {
		r := testenv.Do(t, http.MethodGet, s.AdminURL+"/admin/v1/profiles", tok, nil)
		assert.Equal(t, http.StatusUnauthorized, r.Status)
		assert.Equal(t, "unauthorized", problemType(r))
	}

	// Revoked keys stop working, cascading to their session keys.
	r := s.Admin(t, http.MethodDelete, "/admin/v1/keys/"+keyID, nil)
	require.Equal(t, http.StatusNoContent, r.Status)
	assert.Equal(t, 401, raw(http.MethodGet, events, "Bearer "+sessKey).Status)
	assert.Equal(t, 401, raw(http.MethodPost, "/api/v1/sessions", "Bearer "+clientKey).Status)
	r = s.Admin(t, http.MethodGet, "/admin/v1/sessions/"+sid+"/events", nil)
	require.Equal(t, http.StatusOK, r.Status)
	items := r.Body["items"].([]any)
	last := items[len(items)-1].(map[string]any)
	assert.Equal(t, "session.close", last["event_type"])
	assert.Equal(t, "client_key_revoked", last["payload"].(map[string]any)["reason"])
	r = s.Admin(t, http.MethodGet, "/admin/v1/sessions?state=closed", nil)
	assert.Len(t, r.Body["items"], 2)
}

func TestOpenSessionChecksAndAudit(t *testing.T) {
	s := testenv.Start(t, testenv.Options{ConfigTOML: providersTOML})
	pid := s.Profile(t, map[string]any{"name": "main", "primary_provider": "main", "allowed_tools": []string{"get_time"}, "mcp_servers": []string{"ghost"}})
	_, key := s.Key(t, pid)

	r := s.Client(t, http.MethodPost, "/api/v1/sessions", key, map[string]any{"tools": []any{map[string]any{"name": "rm_rf"}}})
	assert.Equal(t, http.StatusForbidden, r.Status)
	assert.Equal(t, "tool_not_allowed", problemType(r))

	r = s.Client(t, http.MethodPost, "/api/v1/sessions", key, map[string]any{"tools": []any{map[string]any{"name": "remote_subagent_status"}}})
	assert.Equal(t, http.StatusUnprocessableEntity, r.Status)
	assert.Equal(t, "reserved_tool_name", problemType(r))

	r = s.Client(t, http.MethodPost, "/api/v1/sessions", key, map[string]any{"subagent_tools": []any{map[string]any{"name": "launch_subagent", "image": "", "subagents": []any{}}}})
	assert.Equal(t, http.StatusUnprocessableEntity, r.Status)
	assert.Equal(t, "invalid_subagent_tools", problemType(r))

	r = s.Client(t, http.MethodPost, "/api/v1/sessions", key, "{not json")
	assert.Equal(t, http.StatusBadRequest, r.Status)

	r = s.Client(t, http.MethodPost, "/api/v1/sessions", key, map[string]any{"client_version": "1.2.3", "tools": []any{map[string]any{"name": "get_time", "description": "now"}}})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Raw))
	assert.Regexp(t, `^ses_[0-9a-f]{32}$`, r.Body["session_id"])
	assert.Regexp(t, `^bae_ses_[0-9a-f]{48}$`, r.Body["session_key"])
	prof := r.Body["profile"].(map[string]any)
	assert.Equal(t, map[string]any{"provider": "anthropic", "model": "claude-test"}, prof["provider"])
	assert.NotContains(t, string(r.Raw), "auth_token")
	assert.NotContains(t, string(r.Raw), "BAE_TEST_UNUSED_TOKEN")
	sid, sk := r.Body["session_id"].(string), r.Body["session_key"].(string)

	ev := s.Client(t, http.MethodGet, "/api/v1/sessions/"+sid+"/events", sk, nil)
	require.Equal(t, http.StatusOK, ev.Status)
	first := ev.Body["items"].([]any)[0].(map[string]any)
	assert.Equal(t, "session.open", first["event_type"])
	assert.Equal(t, map[string]any{"client_version": "1.2.3", "tools": []any{"get_time"}, "sandbox_tools": []any{}, "subagent_tools": []any{}}, first["payload"])
	assert.Regexp(t, `^evt_[0-9a-f]{32}$`, first["id"])
	assert.Regexp(t, `^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`, first["created_at"])

	// A primary provider missing from the registry: the admin API stores
	// the profile (as BAE does); open and join answer 422 plus an audit
	// row, on every attempt.
	pid2 := s.Profile(t, map[string]any{"name": "broken", "primary_provider": "nope"})
	_, key2 := s.Key(t, pid2)
	for range 2 {
		r = s.Client(t, http.MethodPost, "/api/v1/sessions", key2, nil)
		assert.Equal(t, http.StatusUnprocessableEntity, r.Status)
		assert.Equal(t, "primary_provider_unavailable", problemType(r))
		assert.NotContains(t, r.Body, "session_key")
	}
	// Join: the same check on a session opened while the provider was
	// configured, once its profile points at a missing one.
	r = s.Admin(t, http.MethodPut, "/admin/v1/profiles/"+pid, map[string]any{"name": "main", "primary_provider": "nope", "allowed_tools": []string{"get_time"}})
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	r = s.Client(t, http.MethodPost, "/api/v1/sessions/"+sid+"/join", key, nil)
	assert.Equal(t, http.StatusUnprocessableEntity, r.Status)
	assert.Equal(t, "primary_provider_unavailable", problemType(r))
	errs := s.Admin(t, http.MethodGet, "/admin/v1/sessions?state=error", nil)
	require.Len(t, errs.Body["items"], 3, "one audit session per attempt")
	byProfile := map[string]int{}
	for _, it := range errs.Body["items"].([]any) {
		audit := it.(map[string]any)
		aev := s.Admin(t, http.MethodGet, "/admin/v1/sessions/"+audit["id"].(string)+"/events", nil)
		items := aev.Body["items"].([]any)
		require.Len(t, items, 1)
		ev := items[0].(map[string]any)
		assert.Equal(t, "session.error", ev["event_type"])
		payload := ev["payload"].(map[string]any)
		byProfile[payload["profile_id"].(string)]++
		assert.Equal(t, map[string]any{"reason": "primary_provider_unavailable", "profile_id": payload["profile_id"], "primary_provider": "nope"}, payload)
	}
	assert.Equal(t, map[string]int{pid2: 2, pid: 1}, byProfile)
}

func TestProfileUnavailableAtOpen(t *testing.T) {
	s := testenv.Start(t, testenv.Options{ConfigTOML: providersTOML})
	pid := s.Profile(t, map[string]any{"name": "main", "primary_provider": "main"})
	_, key := s.Key(t, pid)
	// Deleting a profile with active keys is refused...
	r := s.Admin(t, http.MethodDelete, "/admin/v1/profiles/"+pid, nil)
	require.Equal(t, http.StatusConflict, r.Status)
	assert.Equal(t, "profile_in_use", problemType(r))
	// ...so simulate the race the contract describes directly in the store.
	_, err := s.Parts.Store.Pool.Exec(t.Context(), `UPDATE profiles SET deleted_at = now() WHERE id = $1`, pid)
	require.NoError(t, err)
	r = s.Client(t, http.MethodPost, "/api/v1/sessions", key, nil)
	assert.Equal(t, http.StatusUnprocessableEntity, r.Status)
	assert.Equal(t, "profile_unavailable", problemType(r))
	errs := s.Admin(t, http.MethodGet, "/admin/v1/sessions?state=error", nil)
	require.Len(t, errs.Body["items"], 1)
}

func TestJoinCheckOrder(t *testing.T) {
	s := testenv.Start(t, testenv.Options{ConfigTOML: providersTOML})
	pid := s.Profile(t, map[string]any{"name": "main", "primary_provider": "main", "allowed_tools": []string{"a"}})
	other := s.Profile(t, map[string]any{"name": "other", "primary_provider": "main"})
	_, keyA := s.Key(t, pid)
	_, keyB := s.Key(t, pid)
	_, keyOther := s.Key(t, other)
	sid, skA := s.Open(t, keyA, nil)
	join := "/api/v1/sessions/" + sid + "/join"

	// 1. bad key beats everything, even a missing session.
	r := s.Client(t, http.MethodPost, "/api/v1/sessions/ses_missing/join", "bae_bad", nil)
	assert.Equal(t, 401, r.Status)
	// 2. missing session.
	r = s.Client(t, http.MethodPost, "/api/v1/sessions/ses_missing/join", keyB, nil)
	assert.Equal(t, 404, r.Status)
	assert.Equal(t, "not_found", problemType(r))
	// 4. profile mismatch (checked before tools).
	r = s.Client(t, http.MethodPost, join, keyOther, map[string]any{"tools": []any{map[string]any{"name": "zzz"}}})
	assert.Equal(t, 403, r.Status)
	assert.Equal(t, "profile_mismatch", problemType(r))
	// 7. tool not allowed.
	r = s.Client(t, http.MethodPost, join, keyB, map[string]any{"tools": []any{map[string]any{"name": "zzz"}}})
	assert.Equal(t, 403, r.Status)
	assert.Equal(t, "tool_not_allowed", problemType(r))
	// success: a distinct session key bound to B.
	r = s.Client(t, http.MethodPost, join, keyB, map[string]any{"client_version": "2", "tools": []any{map[string]any{"name": "a"}}})
	require.Equal(t, 201, r.Status, string(r.Raw))
	skB := r.Body["session_key"].(string)
	assert.NotEqual(t, skA, skB)
	ev := s.Client(t, http.MethodGet, "/api/v1/sessions/"+sid+"/events", skB, nil)
	items := ev.Body["items"].([]any)
	require.Len(t, items, 2)
	assert.Equal(t, "session.join", items[1].(map[string]any)["event_type"])

	// 3. closed session (after DELETE), checked before the profile match.
	r = s.Client(t, http.MethodDelete, "/api/v1/sessions/"+sid, skA, nil)
	require.Equal(t, 200, r.Status)
	assert.Equal(t, map[string]any{"session_id": sid, "state": "closed"}, r.Body)
	r = s.Client(t, http.MethodPost, join, keyOther, nil)
	assert.Equal(t, 409, r.Status)
	assert.Equal(t, "session_closed", problemType(r))
	assert.Equal(t, "session is already closed", r.Body["detail"])
	r = s.Client(t, http.MethodDelete, "/api/v1/sessions/"+sid, skA, nil)
	assert.Equal(t, 409, r.Status)
	assert.Equal(t, "session_closed", problemType(r))
	// events stay readable after close.
	ev = s.Client(t, http.MethodGet, "/api/v1/sessions/"+sid+"/events", skA, nil)
	assert.Equal(t, 200, ev.Status)
	assert.Len(t, ev.Body["items"], 3)
}

func TestPaginationEdges(t *testing.T) {
	s := testenv.Start(t, testenv.Options{ConfigTOML: providersTOML})
	for i := 0; i < 5; i++ {
		s.Profile(t, map[string]any{"name": "p" + string(rune('a'+i)), "primary_provider": "main"})
	}
	r := s.Admin(t, http.MethodGet, "/admin/v1/profiles?limit=0", nil)
	assert.Equal(t, 400, r.Status)
	assert.Equal(t, "bad_request", problemType(r))
	r = s.Admin(t, http.MethodGet, "/admin/v1/profiles?limit=-1", nil)
	assert.Equal(t, 400, r.Status)
	r = s.Admin(t, http.MethodGet, "/admin/v1/profiles?cursor=abc", nil)
	assert.Equal(t, 400, r.Status)
	r = s.Admin(t, http.MethodGet, "/admin/v1/profiles?limit=201", nil)
	require.Equal(t, 200, r.Status)
	assert.Len(t, r.Body["items"], 5)
	assert.Nil(t, r.Body["next_cursor"])

	var names []string
	cursor := ""
	for page := 0; page < 10; page++ {
		r = s.Admin(t, http.MethodGet, "/admin/v1/profiles?limit=2&cursor="+cursor, nil)
		require.Equal(t, 200, r.Status)
		for _, it := range r.Body["items"].([]any) {
			names = append(names, it.(map[string]any)["name"].(string))
		}
		if r.Body["next_cursor"] == nil {
			break
		}
		cursor = r.Body["next_cursor"].(string)
	}
	assert.Equal(t, []string{"pa", "pb", "pc", "pd", "pe"}, names)

	pid := s.Profile(t, map[string]any{"name": "ev", "primary_provider": "main"})
	_, key := s.Key(t, pid)
	sid, sk := s.Open(t, key, nil)
	r = s.Client(t, http.MethodGet, "/api/v1/sessions/"+sid+"/events?limit=0", sk, nil)
	assert.Equal(t, 400, r.Status)
	r = s.Client(t, http.MethodGet, "/api/v1/sessions/"+sid+"/events?cursor=x", sk, nil)
	assert.Equal(t, 400, r.Status)
	r = s.Client(t, http.MethodGet, "/api/v1/sessions/"+sid+"/events?limit=201", sk, nil)
	assert.Equal(t, 200, r.Status)
	assert.Len(t, r.Body["items"], 1)
}

func TestProfilesAndKeysAdmin(t *testing.T) {
	s := testenv.Start(t, testenv.Options{ConfigTOML: providersTOML})
	bad := []map[string]any{
		{"primary_provider": "main"},
		{"name": "  ", "primary_provider": "main"},
		{"name": "x"},
		{"name": "x", "primary_provider": "main", "fallback_providers": "main"},
		{"name": "x", "primary_provider": "main", "mcp_servers": []any{1}},
		{"name": "x", "primary_provider": "main", "allowed_tools": []any{map[string]any{}}},
	}
	for _, b := range bad {
		r := s.Admin(t, http.MethodPost, "/admin/v1/profiles", b)
		assert.Equal(t, 400, r.Status, "%v", b)
		assert.Equal(t, "bad_request", problemType(r))
	}
	// A provider the registry does not hold is stored, as BAE does, on
	// create and on replace; the answer adds "warnings" naming what is
	// configured and otherwise keeps BAE's shape.
	r := s.Admin(t, http.MethodPost, "/admin/v1/profiles", map[string]any{"name": "newp", "primary_provider": "nosuchprovider", "fallback_providers": []string{"main", "gone", "gone"}})
	require.Equal(t, 201, r.Status, string(r.Raw))
	assert.Equal(t, []any{
		map[string]any{"type": "primary_provider_unavailable", "detail": `primary_provider "nosuchprovider" is not in the provider registry (configured: main); sessions on this profile are refused with 422 primary_provider_unavailable until it is added`},
		map[string]any{"type": "fallback_provider_unavailable", "detail": `fallback provider "gone" is not in the provider registry (configured: main); turns skip it`},
	}, r.Body["warnings"])
	newp := r.Body["id"].(string)
	r = s.Admin(t, http.MethodGet, "/admin/v1/profiles/"+newp, nil)
	assert.Equal(t, "nosuchprovider", r.Body["primary_provider"])
	assert.NotContains(t, r.Body, "warnings")
	require.Equal(t, 204, s.Admin(t, http.MethodDelete, "/admin/v1/profiles/"+newp, nil).Status)

	r = s.Admin(t, http.MethodPost, "/admin/v1/profiles", map[string]any{"name": "main", "primary_provider": "main"})
	require.Equal(t, 201, r.Status, string(r.Raw))
	assert.Equal(t, []string{"created_at", "id", "name"}, slices.Sorted(maps.Keys(r.Body)), "no warnings: BAE's exact shape")
	pid := r.Body["id"].(string)
	r = s.Admin(t, http.MethodPut, "/admin/v1/profiles/"+pid, map[string]any{"name": "main", "primary_provider": "nosuchprovider"})
	require.Equal(t, 200, r.Status, string(r.Raw))
	assert.Equal(t, "nosuchprovider", r.Body["primary_provider"])
	require.Len(t, r.Body["warnings"], 1)
	assert.Equal(t, "primary_provider_unavailable", r.Body["warnings"].([]any)[0].(map[string]any)["type"])
	r = s.Admin(t, http.MethodPut, "/admin/v1/profiles/"+pid, map[string]any{"name": "main", "primary_provider": "main"})
	require.Equal(t, 200, r.Status, string(r.Raw))
	assert.NotContains(t, r.Body, "warnings")
	r = s.Admin(t, http.MethodPost, "/admin/v1/profiles", map[string]any{"name": "main", "primary_provider": "main"})
	assert.Equal(t, 409, r.Status)
	assert.Equal(t, "duplicate_name", problemType(r))

	r = s.Admin(t, http.MethodPut, "/admin/v1/profiles/"+pid, map[string]any{"name": "renamed", "primary_provider": "main", "allowed_tools": []string{"t"}})
	require.Equal(t, 200, r.Status)
	assert.Equal(t, "renamed", r.Body["name"])
	assert.Equal(t, []any{"t"}, r.Body["allowed_tools"])
	assert.Equal(t, []any{}, r.Body["fallback_providers"])
	r = s.Admin(t, http.MethodPut, "/admin/v1/profiles/pro_missing", map[string]any{"name": "x", "primary_provider": "main"})
	assert.Equal(t, 404, r.Status)
	r = s.Admin(t, http.MethodGet, "/admin/v1/profiles/pro_missing", nil)
	assert.Equal(t, 404, r.Status)

	r = s.Admin(t, http.MethodPost, "/admin/v1/keys", map[string]any{"name": "", "profile_id": pid})
	assert.Equal(t, 400, r.Status)
	r = s.Admin(t, http.MethodPost, "/admin/v1/keys", map[string]any{"name": "k", "profile_id": "pro_missing"})
	assert.Equal(t, 422, r.Status)
	assert.Equal(t, "profile_unavailable", problemType(r))
	keyID, plain := s.Key(t, pid)
	assert.Regexp(t, `^bae_[0-9a-f]{48}$`, plain)
	r = s.Admin(t, http.MethodGet, "/admin/v1/keys", nil)
	require.Equal(t, 200, r.Status)
	assert.NotContains(t, string(r.Raw), plain[4:])
	assert.NotContains(t, string(r.Raw), "key_hash")
	item := r.Body["items"].([]any)[0].(map[string]any)
	assert.Equal(t, plain[:8], item["prefix"])
	assert.Nil(t, item["last_used_at"])

	r = s.Admin(t, http.MethodDelete, "/admin/v1/profiles/"+pid, nil)
	assert.Equal(t, 409, r.Status)
	require.Equal(t, 204, s.Admin(t, http.MethodDelete, "/admin/v1/keys/"+keyID, nil).Status)
	assert.Equal(t, 404, s.Admin(t, http.MethodDelete, "/admin/v1/keys/"+keyID, nil).Status)
	require.Equal(t, 204, s.Admin(t, http.MethodDelete, "/admin/v1/profiles/"+pid, nil).Status)
	assert.Equal(t, 404, s.Admin(t, http.MethodGet, "/admin/v1/profiles/"+pid, nil).Status)
	r = s.Admin(t, http.MethodGet, "/admin/v1/profiles", nil)
	assert.Len(t, r.Body["items"], 0)
	r = s.Admin(t, http.MethodGet, "/admin/v1/sessions?state=bogus", nil)
	assert.Equal(t, 400, r.Status)
	assert.Equal(t, 404, s.Admin(t, http.MethodGet, "/admin/v1/sessions/ses_missing/events", nil).Status)
}

func TestAdminConfigRedaction(t *testing.T) {
	s := testenv.Start(t, testenv.Options{ConfigTOML: providersTOML + `
[[providers.entries]]
name = "literal"
provider = "openai"
model = "gpt"
auth_token = "sk-literal-secret"

[[mcp.servers]]
name = "remote"
transport = "http"
url = "http://127.0.0.1:9/mcp"
headers = { Authorization = "Bearer super-secret", X-Empty = "" }
`})
	r := s.Admin(t, http.MethodGet, "/admin/v1/config", nil)
	require.Equal(t, 200, r.Status)
	body := string(r.Raw)
	for _, secret := range []string{"sk-literal-secret", "super-secret", "BAE_TEST_UNUSED_TOKEN"} {
		assert.NotContains(t, body, secret)
	}
	assert.Contains(t, body, "••••••••")
	r = s.Admin(t, http.MethodGet, "/admin/v1/providers", nil)
	require.Equal(t, 200, r.Status)
	items := r.Body["items"].([]any)
	require.Len(t, items, 2)
	assert.Equal(t, "https://api.openai.com", items[0].(map[string]any)["base_url"])
	assert.NotContains(t, string(r.Raw), "auth_token")
	r = s.Admin(t, http.MethodGet, "/admin/v1/mcp-servers", nil)
	assert.Equal(t, []any{map[string]any{"name": "remote", "transport": "http"}}, r.Body["items"])
}
