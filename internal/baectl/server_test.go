package baectl

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/testing/testenv"
)

// Two providers so "first entry" is observable: the registry is sorted by
// name, so alpha-provider comes first.
const serverConfig = `
[[mcp.servers]]
name = "echo-tools"
transport = "stdio"
command = "true"

[[mcp.servers]]
name = "remote-search"
transport = "http"
url = "https://mcp.example.com/mcp"
headers = { Authorization = "Bearer super-secret-header" }

[[providers.entries]]
name = "zulu-provider"
provider = "anthropic"
model = "zulu-model"
auth_token = "super-secret-token"
base_url = "http://127.0.0.1:1"

[[providers.entries]]
name = "alpha-provider"
provider = "anthropic"
model = "alpha-model"
auth_token = "super-secret-token"
base_url = "http://127.0.0.1:1"
`

var idRe = func(prefix string) *regexp.Regexp { return regexp.MustCompile(prefix + `[0-9a-f]{32}`) }

// cli runs baectl against s with the admin key passed through the
// environment, plus extra environment on top.
type cli struct {
	t   *testing.T
	s   *testenv.Server
	env map[string]string
}

func newCLI(t *testing.T, s *testenv.Server) cli {
	return cli{t: t, s: s, env: map[string]string{
		"BAE_ADMIN_ADDR":  strings.TrimPrefix(s.AdminURL, "http://"),
		"BAE_ADMIN_TOKEN": s.AdminKey,
	}}
}

func (c cli) run(args ...string) result {
	c.t.Helper()
	return runCLI(c.t, c.env, args...)
}

// ok runs and requires success.
func (c cli) ok(args ...string) result {
	c.t.Helper()
	r := c.run(args...)
	require.Equal(c.t, ExitOK, r.code, "baectl %v\nstdout: %s\nstderr: %s", args, r.stdout, r.stderr)
	return r
}

// okJSON runs with --json and decodes stdout.
func okJSON[T any](c cli, args ...string) T {
	c.t.Helper()
	r := c.ok(append(args, "--json")...)
	var v T
	require.NoError(c.t, json.Unmarshal([]byte(r.stdout), &v), r.stdout)
	return v
}

func TestAgainstServer(t *testing.T) {
	s := testenv.Start(t, testenv.Options{ConfigTOML: serverConfig})
	c := newCLI(t, s)
	addr := c.env["BAE_ADMIN_ADDR"]

	t.Run("discovery", func(t *testing.T) {
		good := writeFile(t, "good.pem", s.AdminKey+"\n")
		bad := writeFile(t, "bad.pem", "bae_admin_"+strings.Repeat("0", 48)+"\n")
		goodDir := filepath.Dir(good)
		require.NoError(t, os.Rename(good, filepath.Join(goodDir, "admin-key.pem")))
		good = filepath.Join(goodDir, "admin-key.pem")
		wrong := "bae_admin_" + strings.Repeat("1", 48)

		cases := []struct {
			name string
			env  map[string]string
			args []string
			ok   bool
		}{
			{"flag addr beats env addr", map[string]string{"BAE_ADMIN_ADDR": "127.0.0.1:1", "BAE_ADMIN_TOKEN": s.AdminKey},
				[]string{"--admin-addr", addr}, true},
			{"flag addr after the command", map[string]string{"BAE_ADMIN_TOKEN": s.AdminKey},
				[]string{"list", "profiles", "--admin-addr", addr}, true},
			{"full URL addr", map[string]string{"BAE_ADMIN_TOKEN": s.AdminKey}, []string{"--admin-addr", s.AdminURL}, true},
			{"flag token beats env token", map[string]string{"BAE_ADMIN_ADDR": addr, "BAE_ADMIN_TOKEN": wrong},
				[]string{"--admin-token", s.AdminKey}, true},
			{"flag token beats env token (wrong flag)", map[string]string{"BAE_ADMIN_ADDR": addr, "BAE_ADMIN_TOKEN": s.AdminKey},
				[]string{"--admin-token", wrong}, false},
			{"env token beats key files", map[string]string{"BAE_ADMIN_ADDR": addr, "BAE_ADMIN_TOKEN": s.AdminKey, "BAE_ADMIN_KEY_FILE": bad},
				[]string{"--admin-key-file", bad}, true},
			{"flag file beats env file", map[string]string{"BAE_ADMIN_ADDR": addr, "BAE_ADMIN_KEY_FILE": bad},
				[]string{"--admin-key-file", good}, true},
			{"flag file beats env file (wrong flag)", map[string]string{"BAE_ADMIN_ADDR": addr, "BAE_ADMIN_KEY_FILE": good},
				[]string{"--admin-key-file", bad}, false},
			{"env file beats default", map[string]string{"BAE_ADMIN_ADDR": addr, "BAE_ADMIN_KEY_FILE": good, "BAE_DATA_DIR": filepath.Dir(bad)},
				nil, true},
			{"default file under BAE_DATA_DIR", map[string]string{"BAE_ADMIN_ADDR": addr, "BAE_DATA_DIR": goodDir}, nil, true},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				args := tc.args
				if len(args) == 0 || args[0] != "list" {
					args = append(append([]string{}, args...), "list", "profiles")
				}
				r := runCLI(t, tc.env, args...)
				if tc.ok {
					assert.Equal(t, ExitOK, r.code, r.stderr)
				} else {
					assert.Equal(t, ExitRuntime, r.code)
					assert.Contains(t, r.stderr, "401 unauthorized")
				}
			})
		}
	})

	t.Run("no token prints guidance", func(t *testing.T) {
		r := runCLI(t, map[string]string{"BAE_ADMIN_ADDR": addr}, "list", "profiles")
		assert.Equal(t, ExitRuntime, r.code)
		assert.Contains(t, r.stderr, "baectl: admin API rejected the request")
		assert.Contains(t, r.stderr, "(401 unauthorized)")
		assert.Contains(t, r.stderr, "--admin-token <token>")
		assert.Contains(t, r.stderr, "admin-key.pem")
		assert.Empty(t, r.stdout)
	})

	t.Run("profiles", func(t *testing.T) {
		r := c.ok("create", "profile", "prof-a", "alpha-provider", "--allowed-tool", "get_current_time",
			"--fallback", "zulu-provider", "--mcp-server", "echo-tools")
		assert.Contains(t, r.stdout, "created profile\n")
		idA := idRe("pro_").FindString(r.stdout)
		require.NotEmpty(t, idA, r.stdout)
		assert.Regexp(t, `name:\s+prof-a`, r.stdout)

		created := okJSON[map[string]any](c, "create", "profile", "prof-b", "zulu-provider")
		idB, _ := created["id"].(string)
		require.Regexp(t, idRe("pro_"), idB)
		assert.Equal(t, "prof-b", created["name"])
		assert.NotEmpty(t, created["created_at"])

		// Human get shows every field, (none) for empty lists.
		r = c.ok("get", "profile", idA)
		for _, want := range []string{"id:", idA, "primary_provider:", "alpha-provider", "fallback_providers:", "zulu-provider",
			"mcp_servers:", "echo-tools", "allowed_tools:", "get_current_time", "created_at:", "updated_at:"} {
			assert.Contains(t, r.stdout, want)
		}
		assert.Regexp(t, `available_sandboxes:\s+\(none\)`, r.stdout)
		assert.Regexp(t, `sandbox:\s+\(server defaults\)`, r.stdout)

		got := okJSON[map[string]any](c, "get", "profile", idA)
		assert.Equal(t, []any{"get_current_time"}, got["allowed_tools"])
		assert.Equal(t, []any{"zulu-provider"}, got["fallback_providers"])

		// Table output: header and one row per profile.
		r = c.ok("list", "profiles")
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		assert.Regexp(t, `^ID\s+NAME\s+PRIMARY_PROVIDER$`, lines[0])
		assert.Contains(t, r.stdout, idA)
		assert.Regexp(t, regexp.MustCompile(idB+`\s+prof-b\s+zulu-provider`), r.stdout)

		// --json auto-paginated: a flat array of everything.
		all := okJSON[[]map[string]any](c, "list", "profiles")
		ids := map[string]bool{}
		for _, p := range all {
			ids[p["id"].(string)] = true
		}
		assert.True(t, ids[idA] && ids[idB], "%v", all)

		// --limit: one raw page with a cursor, which --cursor then follows.
		page := okJSON[map[string]any](c, "list", "profiles", "--limit", "1")
		items := page["items"].([]any)
		require.Len(t, items, 1)
		cursor, ok := page["next_cursor"].(string)
		require.True(t, ok, "next_cursor should be set: %v", page)
		r = c.ok("list", "profiles", "--limit", "1")
		assert.Contains(t, r.stderr, "--cursor "+cursor, "the table mode points at the next page")
		next := okJSON[map[string]any](c, "list", "profiles", "--cursor", cursor, "--limit", "1")
		require.Len(t, next["items"].([]any), 1)
		assert.NotEqual(t, items[0].(map[string]any)["id"], next["items"].([]any)[0].(map[string]any)["id"])

		// update without --name keeps the name and clears unset lists.
		r = c.ok("update", "profile", idA, "zulu-provider")
		assert.Regexp(t, `name:\s+prof-a`, r.stdout)
		upd := okJSON[map[string]any](c, "get", "profile", idA)
		assert.Equal(t, "prof-a", upd["name"])
		assert.Equal(t, "zulu-provider", upd["primary_provider"])
		assert.Equal(t, []any{}, upd["allowed_tools"])
		assert.Equal(t, []any{}, upd["fallback_providers"])

		upd = okJSON[map[string]any](c, "update", "profile", idA, "alpha-provider", "--name", "prof-a2", "--allowed-tool", "t1", "--allowed-tool", "t2")
		assert.Equal(t, "prof-a2", upd["name"])
		assert.Equal(t, []any{"t1", "t2"}, upd["allowed_tools"])

		// Sandbox limits: shown on one line, cleared by an update without them.
		r = c.ok("update", "profile", idA, "alpha-provider", "--sandbox-limits", `{"network":"bridge","memory_mib":1024}`)
		assert.Regexp(t, `sandbox:\s+\{"memory_mib":1024,"network":"bridge"\}`, r.stdout)
		r = c.run("update", "profile", idA, "alpha-provider", "--sandbox-limits", `{"network":"host"}`)
		assert.Equal(t, ExitRuntime, r.code)
		assert.Contains(t, r.stderr, "(422 invalid_sandbox)")
		r = c.run("update", "profile", idA, "alpha-provider", "--sandbox-limits", `{network`)
		assert.Equal(t, ExitUsage, r.code)
		assert.Contains(t, r.stderr, "--sandbox-limits: not valid JSON")
		upd = okJSON[map[string]any](c, "update", "profile", idA, "alpha-provider", "--name", "prof-a2")
		assert.Equal(t, map[string]any{}, upd["sandbox"])

		// Context policy: shown on one line, validated by the server.
		r = c.ok("update", "profile", idA, "alpha-provider", "--name", "prof-a2", "--context", `{"keep_turns":6}`)
		assert.Regexp(t, `context:\s+\{"enabled":true,"keep_turns":6,`, r.stdout)
		r = c.run("update", "profile", idA, "alpha-provider", "--name", "prof-a2", "--context", `{"keep_turns":0}`)
		assert.Equal(t, ExitRuntime, r.code)
		assert.Contains(t, r.stderr, "(422 invalid_context)")
		assert.Contains(t, r.stderr, "context.keep_turns")
		r = c.run("update", "profile", idA, "alpha-provider", "--context", `{keep`)
		assert.Equal(t, ExitUsage, r.code)

		// Model settings: shown on one line, validated by the server.
		r = c.ok("update", "profile", idA, "alpha-provider", "--name", "prof-a2", "--model-settings", `{"alpha-provider":{"temperature":0.2}}`)
		assert.Regexp(t, `model_settings:\s+\{"alpha-provider":\{"temperature":0.2\}\}`, r.stdout)
		r = c.run("update", "profile", idA, "alpha-provider", "--name", "prof-a2", "--model-settings", `{"alpha-provider":{"top_k":0}}`)
		assert.Equal(t, ExitRuntime, r.code)
		assert.Contains(t, r.stderr, "(422 invalid_model_settings)")
		assert.Contains(t, r.stderr, "model_settings.alpha-provider.top_k")
		r = c.run("update", "profile", idA, "alpha-provider", "--model-settings", `{x`)
		assert.Equal(t, ExitUsage, r.code)
		r = c.ok("update", "profile", idA, "alpha-provider", "--name", "prof-a2")
		assert.Contains(t, r.stdout, "(none: the provider entries' own)")

		// Duplicate name: readable 409, exit 1.
		r = c.run("create", "profile", "prof-b", "alpha-provider")
		assert.Equal(t, ExitRuntime, r.code)
		assert.Contains(t, r.stderr, "(409 duplicate_name)")

		r = c.ok("delete", "profile", idB)
		assert.Equal(t, "deleted profile "+idB+"\n", r.stdout)

		// 404 after delete: readable detail + type, non-zero exit, no stdout.
		r = c.run("get", "profile", idB)
		assert.Equal(t, ExitRuntime, r.code)
		assert.Regexp(t, `^baectl: .*`+idB+`.* \(404 not_found\)\n$`, r.stderr)
		assert.Empty(t, r.stdout)
		r = c.run("delete", "profile", idB)
		assert.Equal(t, ExitRuntime, r.code)
		assert.Contains(t, r.stderr, "(404 not_found)")
	})

	t.Run("keys", func(t *testing.T) {
		prof := okJSON[map[string]any](c, "create", "profile", "keyed", "alpha-provider")
		pid := prof["id"].(string)

		r := c.ok("create", "key", "agent-1", pid)
		assert.Contains(t, r.stdout, "created key\n")
		keyID := idRe("key_").FindString(r.stdout)
		require.NotEmpty(t, keyID)
		assert.Regexp(t, `key:\s+bae_[0-9a-f]{48}\n`, r.stdout)
		assert.Contains(t, r.stderr, "baectl: copy the key now — it cannot be retrieved again")

		k2 := okJSON[map[string]any](c, "create", "key", "agent-2", pid)
		assert.Regexp(t, `^bae_[0-9a-f]{48}$`, k2["key"])
		key2ID := k2["id"].(string)

		r = c.ok("list", "keys")
		assert.Regexp(t, `^ID\s+NAME\s+PREFIX\s+PROFILE_ID\n`, r.stdout)
		assert.Regexp(t, regexp.MustCompile(keyID+`\s+agent-1\s+bae_[0-9a-f]{4}\s+`+pid), r.stdout)
		keys := okJSON[[]map[string]any](c, "list", "keys")
		assert.NotContains(t, keys[0], "key_hash")
		assert.NotContains(t, keys[0], "key", "plaintext is never listed")

		// A profile with keys cannot go; the message says what to do.
		r = c.run("delete", "profile", pid)
		assert.Equal(t, ExitRuntime, r.code)
		assert.Contains(t, r.stderr, "(409 profile_in_use)")
		assert.Contains(t, r.stderr, "baectl list keys")

		r = c.run("create", "key", "orphan", "pro_"+strings.Repeat("0", 32))
		assert.Equal(t, ExitRuntime, r.code)
		assert.Contains(t, r.stderr, "(the referenced profile does not exist or was deleted)")
		assert.Contains(t, r.stderr, "422 profile_unavailable")

		r = c.ok("delete", "key", keyID)
		assert.Equal(t, "revoked key "+keyID+"\n", r.stdout)
		r = c.ok("revoke", "key", key2ID)
		assert.Equal(t, "revoked key "+key2ID+"\n", r.stdout)
		r = c.run("delete", "key", keyID)
		assert.Equal(t, ExitRuntime, r.code)
		assert.Contains(t, r.stderr, "(404 not_found)")
		c.ok("delete", "profile", pid)
	})

	t.Run("sessions and events", func(t *testing.T) {
		pid := s.Profile(t, map[string]any{"name": "sessions", "primary_provider": "alpha-provider"})
		_, clientKey := s.Key(t, pid)
		openID, _ := s.Open(t, clientKey, map[string]any{"client_version": "baectl-test"})
		closedID, closedKey := s.Open(t, clientKey, nil)
		resp := s.Client(t, http.MethodDelete, "/api/v1/sessions/"+closedID, closedKey, nil)
		require.Less(t, resp.Status, 300, string(resp.Raw))

		r := c.ok("list", "sessions")
		assert.Regexp(t, `^ID\s+PROFILE_ID\s+STATE\s+CLIENT_VERSION\s+CREATED_AT\s+CLOSED_AT\n`, r.stdout)
		assert.Regexp(t, regexp.MustCompile(openID+`\s+`+pid+`\s+open\s+baectl-test`), r.stdout)
		assert.Contains(t, r.stdout, closedID)

		open := okJSON[[]map[string]any](c, "list", "sessions", "--state", "open")
		closed := okJSON[[]map[string]any](c, "list", "sessions", "--state", "closed")
		idsOf := func(items []map[string]any) []string {
			var out []string
			for _, it := range items {
				out = append(out, it["id"].(string))
			}
			return out
		}
		assert.Contains(t, idsOf(open), openID)
		assert.NotContains(t, idsOf(open), closedID)
		assert.Contains(t, idsOf(closed), closedID)
		assert.NotContains(t, idsOf(closed), openID)

		// A closed session's history is still readable on the admin port.
		r = c.ok("list", "events", closedID)
		assert.Regexp(t, `^ID\s+CREATED_AT\s+EVENT_TYPE\s+PAYLOAD\n`, r.stdout)
		assert.Contains(t, r.stdout, "session.open")
		assert.Contains(t, r.stdout, "session.close")

		evs := okJSON[[]map[string]any](c, "list", "events", closedID)
		require.GreaterOrEqual(t, len(evs), 2)
		assert.Equal(t, "session.open", evs[0]["event_type"])

		// Single-page mode walks the same events one at a time.
		var walked []any
		args := []string{"list", "events", closedID, "--limit", "1"}
		for range len(evs) + 1 {
			p := okJSON[map[string]any](c, args...)
			walked = append(walked, p["items"].([]any)...)
			cur, ok := p["next_cursor"].(string)
			if !ok {
				break
			}
			args = []string{"list", "events", closedID, "--limit", "1", "--cursor", cur}
		}
		require.Len(t, walked, len(evs))
		for i := range evs {
			assert.Equal(t, evs[i]["id"], walked[i].(map[string]any)["id"])
		}

		r = c.run("list", "events", "ses_"+strings.Repeat("0", 32))
		assert.Equal(t, ExitRuntime, r.code)
		assert.Contains(t, r.stderr, "(404 not_found)")
	})

	t.Run("registries and config", func(t *testing.T) {
		r := c.ok("list", "providers")
		assert.Regexp(t, `^NAME\s+PROVIDER\s+MODEL\s+BASE_URL\nalpha-provider\s+anthropic\s+alpha-model\s+http://127.0.0.1:1\nzulu-provider`, r.stdout)
		assert.NotContains(t, r.stdout, "super-secret")
		doc := okJSON[map[string][]map[string]any](c, "list", "providers")
		require.Len(t, doc["items"], 2)
		assert.Equal(t, "alpha-provider", doc["items"][0]["name"])

		r = c.ok("list", "mcp-servers")
		assert.Regexp(t, `^NAME\s+TRANSPORT\necho-tools\s+stdio\nremote-search\s+http\n$`, r.stdout)
		mdoc := okJSON[map[string][]map[string]any](c, "list", "mcp-servers")
		require.Len(t, mdoc["items"], 2)

		r = c.ok("get", "config")
		for _, want := range []string{"mcp servers:", "echo-tools", "https://mcp.example.com/mcp", "providers:", "zulu-model", "telemetry:", "enabled:"} {
			assert.Contains(t, r.stdout, want)
		}
		assert.NotContains(t, r.stdout, "super-secret")
		cfg := okJSON[map[string]any](c, "get", "config")
		assert.Contains(t, cfg, "telemetry")
		raw, _ := json.Marshal(cfg)
		assert.NotContains(t, string(raw), "super-secret")

		r = c.ok("get", "sandbox-status")
		assert.Equal(t, "no sandbox images declared by any profile\n", r.stdout)
		sdoc := okJSON[map[string]any](c, "list", "sandbox-status")
		assert.Equal(t, []any{}, sdoc["items"])
	})

	t.Run("quickstart", func(t *testing.T) {
		r := c.ok("quickstart", "--profile-name", "qs")
		assert.Contains(t, r.stdout, "created profile qs")
		assert.Contains(t, r.stdout, "primary_provider alpha-provider", "defaults to the first registry entry")
		key := regexp.MustCompile(`export BAE_CLIENT_KEY=(bae_[0-9a-f]{48})\n`).FindStringSubmatch(r.stdout)
		require.Len(t, key, 2, r.stdout)
		assert.Contains(t, r.stdout, `bin/assistant -prompt "hello"`)
		assert.Contains(t, r.stdout, `bin/assistant -prompt "What time is it?"`)
		assert.Contains(t, r.stdout, `GOTOOLCHAIN=go1.27.3 go run ./examples/assistant`, "go run needs the toolchain named in a new shell")
		assert.NotContains(t, r.stdout, "BAE_SERVER_URL", "the default URL needs no export")
		assert.Contains(t, r.stdout, "curl -fsS -X POST http://127.0.0.1:8080/api/v1/sessions")
		assert.Contains(t, r.stderr, "copy the key now")

		// The key works on the client port: the profile is usable as-is.
		sid, _ := s.Open(t, key[1], map[string]any{"client_version": "quickstart", "tools": []any{}})
		assert.Regexp(t, idRe("ses_"), sid)

		// A second run reuses the profile and mints a new key.
		res := okJSON[map[string]any](c, "quickstart", "--profile-name", "qs", "--provider", "zulu-provider", "--tools", "get_current_time,other")
		assert.Equal(t, false, res["profile_created"])
		prof := res["profile"].(map[string]any)
		assert.Equal(t, "alpha-provider", prof["primary_provider"], "a reused profile is left unchanged")
		k := res["key"].(map[string]any)
		assert.NotEqual(t, key[1], k["key"])
		assert.Equal(t, prof["id"], k["profile_id"])

		r = c.ok("quickstart", "--profile-name", "qs", "--provider", "zulu-provider")
		assert.Contains(t, r.stdout, "reused profile qs")
		assert.Contains(t, r.stderr, "primary_provider is alpha-provider, not zulu-provider")

		profiles := okJSON[[]map[string]any](c, "list", "profiles")
		n := 0
		for _, p := range profiles {
			if p["name"] == "qs" {
				n++
			}
		}
		assert.Equal(t, 1, n, "quickstart never duplicates the profile")

		// Explicit provider, explicit tools, custom client URL.
		res = okJSON[map[string]any](c, "quickstart", "--profile-name", "qs-zulu", "--provider", "zulu-provider", "--tools", "a, b,a")
		assert.Equal(t, true, res["profile_created"])
		prof = res["profile"].(map[string]any)
		assert.Equal(t, "zulu-provider", prof["primary_provider"])
		assert.Equal(t, []any{"a", "b"}, prof["allowed_tools"])

		r = c.ok("quickstart", "--profile-name", "qs-zulu", "--client-url", "http://bae.test:9000")
		assert.Contains(t, r.stdout, "http://bae.test:9000/api/v1/sessions")
		assert.Contains(t, r.stdout, "export BAE_SERVER_URL=http://bae.test:9000\n")

		// MCP servers: validated against the registry, then enabled.
		res = okJSON[map[string]any](c, "quickstart", "--profile-name", "qs-mcp", "--mcp-server", "echo-tools")
		assert.Equal(t, []any{"echo-tools"}, res["profile"].(map[string]any)["mcp_servers"])
		r = c.ok("quickstart", "--profile-name", "qs-mcp", "--mcp-server", "echo-tools")
		assert.Contains(t, r.stdout, "MCP server echo-tools")
		r = c.ok("quickstart", "--profile-name", "qs-mcp", "--mcp-server", "remote-search")
		assert.Contains(t, r.stderr, "does not enable MCP server(s) remote-search")
		r = c.run("quickstart", "--profile-name", "qs-nomcp", "--mcp-server", "ghost")
		assert.Equal(t, ExitRuntime, r.code)
		assert.Contains(t, r.stderr, `MCP server "ghost" is not configured on the server (configured: echo-tools, remote-search)`)

		// create profile stores a provider the registry does not hold, as
		// BAE does, and says so, naming what is configured.
		r = c.ok("create", "profile", "newp", "nosuchprovider")
		assert.Contains(t, r.stderr, `baectl: warning: primary_provider "nosuchprovider" is not in the provider registry (configured: alpha-provider, zulu-provider)`)
		r = c.ok("create", "profile", "newp-ok", "zulu-provider", "--fallback", "alpha-provider")
		assert.NotContains(t, r.stderr, "warning", "a profile whose providers are all configured gets no warning")

		r = c.run("quickstart", "--provider", "nope")
		assert.Equal(t, ExitRuntime, r.code)
		assert.Contains(t, r.stderr, `provider "nope" is not configured on the server (configured: alpha-provider, zulu-provider)`)
	})
}

// TestAuthCreateKeyPairAcceptedByServer boots a server that ingests the
// hash file baectl wrote and checks the paired plaintext authenticates.
func TestAuthCreateKeyPairAcceptedByServer(t *testing.T) {
	dir := t.TempDir()
	r := runCLI(t, nil, "auth", "create", "key", "--name", "shared-admin", "--out-dir", dir)
	require.Equal(t, ExitOK, r.code, r.stderr)
	key := checkKeyPair(t, dir, "shared-admin")
	keyPath, hashPath := filepath.Join(dir, "admin-key.pem"), filepath.Join(dir, "admin-key-hash.pem")

	// The server never writes the key file in hash-file mode; pointing
	// BAE_ADMIN_KEY_FILE at ours lets testenv read the plaintext back, and a
	// server that ignored the hash file would overwrite it with a new key.
	s := testenv.Start(t, testenv.Options{Env: map[string]string{
		"BAE_ADMIN_KEY_HASH_FILE": hashPath,
		"BAE_ADMIN_KEY_FILE":      keyPath,
	}})
	require.Equal(t, key, s.AdminKey, "the server must not mint its own key when a hash file is provisioned")

	addr := strings.TrimPrefix(s.AdminURL, "http://")
	r = runCLI(t, map[string]string{"BAE_ADMIN_ADDR": addr}, "--admin-key-file", keyPath, "list", "profiles")
	require.Equal(t, ExitOK, r.code, r.stderr)
	assert.Equal(t, "no profiles found\n", r.stdout)

	r = runCLI(t, map[string]string{"BAE_ADMIN_ADDR": addr, "BAE_ADMIN_TOKEN": "bae_admin_" + strings.Repeat("f", 48)}, "list", "profiles")
	assert.Equal(t, ExitRuntime, r.code)
	assert.Contains(t, r.stderr, "401 unauthorized")

	// This server has no config file: empty registries render plainly and
	// quickstart says what is missing.
	c := cli{t: t, s: s, env: map[string]string{"BAE_ADMIN_ADDR": addr, "BAE_ADMIN_KEY_FILE": keyPath}}
	assert.Equal(t, "no providers configured\n", c.ok("list", "providers").stdout)
	assert.Equal(t, "no MCP servers configured\n", c.ok("list", "mcp-servers").stdout)
	assert.Equal(t, "no keys found\n", c.ok("list", "keys").stdout)
	assert.Equal(t, "no sessions found\n", c.ok("list", "sessions").stdout)
	assert.Equal(t, []any{}, okJSON[[]any](c, "list", "profiles"))
	cfg := c.ok("get", "config").stdout
	assert.Contains(t, cfg, "mcp servers:\n  (none)\n")
	assert.Contains(t, cfg, "providers:\n  (none)\n")

	r = c.run("quickstart")
	assert.Equal(t, ExitRuntime, r.code)
	assert.Contains(t, r.stderr, "baectl: the server has no providers configured")
	assert.Equal(t, "no profiles found\n", c.ok("list", "profiles").stdout, "a failed quickstart creates nothing")

	// As in BAE, a profile may name a provider the registry does not hold
	// (yet): it is stored, with a warning; sessions on it are refused at
	// open with 422 primary_provider_unavailable and an audit row, every time.
	r = c.ok("create", "profile", "early", "anything", "--fallback", "later")
	assert.Contains(t, r.stdout, "created profile")
	assert.Contains(t, r.stderr, `baectl: warning: primary_provider "anything" is not in the provider registry (none: bae-config.toml has no [[providers.entries]]); sessions on this profile are refused with 422 primary_provider_unavailable until it is added (primary_provider_unavailable)`)
	assert.Contains(t, r.stderr, `baectl: warning: fallback provider "later" is not in the provider registry`)
	created := okJSON[map[string]any](c, "create", "profile", "early-json", "anything")
	warns, _ := created["warnings"].([]any)
	require.Len(t, warns, 1, "--json prints the server's document, warnings included: %v", created)
	assert.Equal(t, "primary_provider_unavailable", warns[0].(map[string]any)["type"])
	profiles := okJSON[[]map[string]any](c, "list", "profiles")
	require.Len(t, profiles, 2)
	i := slices.IndexFunc(profiles, func(p map[string]any) bool { return p["name"] == "early" })
	require.GreaterOrEqual(t, i, 0, "%v", profiles)
	assert.Equal(t, "anything", profiles[i]["primary_provider"])
	assert.Equal(t, []any{"later"}, profiles[i]["fallback_providers"])
	assert.NotContains(t, profiles[i], "warnings", "list items keep BAE's shape")
	pid := profiles[i]["id"].(string)
	r = c.ok("update", "profile", pid, "still-missing")
	assert.Contains(t, r.stderr, `baectl: warning: primary_provider "still-missing" is not in the provider registry`)
	assert.Regexp(t, `(?m)^primary_provider:\s+still-missing$`, r.stdout)
	clientKey := okJSON[map[string]any](c, "create", "key", "early-key", pid)["key"].(string)
	for range 2 {
		res := s.Client(t, http.MethodPost, "/api/v1/sessions", clientKey, map[string]any{"client_version": "t"})
		require.Equal(t, http.StatusUnprocessableEntity, res.Status, string(res.Raw))
		assert.Equal(t, "primary_provider_unavailable", res.Body["type"])
	}
	audits := okJSON[[]map[string]any](c, "list", "sessions", "--state", "error")
	require.Len(t, audits, 2, "logged on every attempt, never deduplicated")
	for _, a := range audits {
		evs := okJSON[[]map[string]any](c, "list", "events", a["id"].(string))
		require.Len(t, evs, 1)
		assert.Equal(t, "session.error", evs[0]["event_type"])
		assert.Equal(t, map[string]any{"reason": "primary_provider_unavailable", "profile_id": pid, "primary_provider": "still-missing"}, evs[0]["payload"])
	}
}
