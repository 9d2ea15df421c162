package baectl

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/lib/keyhash"
)

func env(kv ...string) LookupEnv {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestResolveAddr(t *testing.T) {
	cases := []struct {
		name, flag       string
		env              LookupEnv
		wantURL, wantArg string
	}{
		{"default", "", env(), "http://127.0.0.1:8081", "127.0.0.1:8081"},
		{"env", "", env("BAE_ADMIN_ADDR", "10.0.0.1:9"), "http://10.0.0.1:9", "10.0.0.1:9"},
		{"flag beats env", "127.0.0.1:7", env("BAE_ADMIN_ADDR", "10.0.0.1:9"), "http://127.0.0.1:7", "127.0.0.1:7"},
		{"empty env ignored", "", env("BAE_ADMIN_ADDR", " "), "http://127.0.0.1:8081", "127.0.0.1:8081"},
		{"scheme kept verbatim", "https://tunnel.example/", env(), "https://tunnel.example", "https://tunnel.example/"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			u, d := resolveAddr(c.flag, c.env)
			assert.Equal(t, c.wantURL, u)
			assert.Equal(t, c.wantArg, d)
		})
	}
}

func TestResolveToken(t *testing.T) {
	flagFile := writeFile(t, "flag.pem", "from-flag-file\n")
	envFile := writeFile(t, "env.pem", "  from-env-file \n")
	dataDir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dataDir, "admin-key.pem"), []byte("from-default\n"), 0o600))
	missing := filepath.Join(t.TempDir(), "nope.pem")

	cases := []struct {
		name    string
		g       globalOpts
		env     LookupEnv
		want    string
		wantSrc string
		wantErr string
	}{
		{"flag token beats all", globalOpts{adminToken: "tok-flag", adminKeyFile: flagFile},
			env("BAE_ADMIN_TOKEN", "tok-env", "BAE_ADMIN_KEY_FILE", envFile, "BAE_DATA_DIR", dataDir), "tok-flag", "--admin-token", ""},
		{"env token beats key files", globalOpts{adminKeyFile: flagFile},
			env("BAE_ADMIN_TOKEN", "tok-env", "BAE_ADMIN_KEY_FILE", envFile), "tok-env", "BAE_ADMIN_TOKEN", ""},
		{"flag file beats env file", globalOpts{adminKeyFile: flagFile},
			env("BAE_ADMIN_KEY_FILE", envFile, "BAE_DATA_DIR", dataDir), "from-flag-file", "--admin-key-file " + flagFile, ""},
		{"env file beats default, trimmed", globalOpts{},
			env("BAE_ADMIN_KEY_FILE", envFile, "BAE_DATA_DIR", dataDir), "from-env-file", "BAE_ADMIN_KEY_FILE " + envFile, ""},
		{"default under BAE_DATA_DIR", globalOpts{}, env("BAE_DATA_DIR", dataDir), "from-default", "default key file " + filepath.Join(dataDir, "admin-key.pem"), ""},
		{"missing default is no token", globalOpts{}, env("BAE_DATA_DIR", t.TempDir()), "", "", ""},
		{"empty env token falls through", globalOpts{}, env("BAE_ADMIN_TOKEN", "", "BAE_DATA_DIR", dataDir), "from-default", "default key file " + filepath.Join(dataDir, "admin-key.pem"), ""},
		{"missing explicit flag file is an error", globalOpts{adminKeyFile: missing},
			env("BAE_DATA_DIR", dataDir), "", "", "--admin-key-file"},
		{"missing explicit env file is an error", globalOpts{},
			env("BAE_ADMIN_KEY_FILE", missing, "BAE_DATA_DIR", dataDir), "", "", "BAE_ADMIN_KEY_FILE"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, src, err := resolveToken(c.g, c.env)
			if c.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), c.wantErr)
				assert.Contains(t, err.Error(), missing)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.want, got)
			assert.Equal(t, c.wantSrc, src)
		})
	}
}

func TestDefaultKeyFileFollowsDataDir(t *testing.T) {
	assert.Equal(t, filepath.Join("bae-data", "admin-key.pem"), defaultKeyFile(env()))
	assert.Equal(t, filepath.Join("/srv/bae", "admin-key.pem"), defaultKeyFile(env("BAE_DATA_DIR", "/srv/bae")))
}

func TestResolveClientURL(t *testing.T) {
	assert.Equal(t, "http://127.0.0.1:8080", resolveClientURL("", env()))
	assert.Equal(t, "http://127.0.0.1:9090", resolveClientURL("", env("BAE_ADDR", "0.0.0.0:9090")))
	assert.Equal(t, "http://10.1.2.3:80", resolveClientURL("", env("BAE_ADDR", "10.1.2.3:80")))
	assert.Equal(t, "https://bae.example", resolveClientURL("https://bae.example/", env("BAE_ADDR", "0.0.0.0:9090")))
}

func TestUsageErrorsExitTwo(t *testing.T) {
	cases := map[string][]string{
		"no command":       {},
		"unknown verb":     {"frobnicate"},
		"unknown resource": {"list", "widgets"},
		"missing arg":      {"create", "profile", "only-name"},
		"extra arg":        {"get", "profile", "a", "b"},
		"unknown flag":     {"list", "profiles", "--bogus"},
		"bad limit":        {"list", "profiles", "--limit", "zero"},
		"bad state":        {"list", "sessions", "--state", "weird"},
		"blank key name":   {"auth", "create", "key", "--name", " "},
	}
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			// An unreachable address proves no request is needed to fail.
			r := runCLI(t, map[string]string{"BAE_ADMIN_ADDR": "127.0.0.1:1"}, args...)
			assert.Equal(t, ExitUsage, r.code, r.stderr)
			assert.True(t, strings.HasPrefix(r.stderr, "baectl: "), r.stderr)
			assert.Empty(t, r.stdout)
		})
	}
}

func TestHelpExitsZeroOnStdout(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"help"}, {"create", "--help"}, {"create", "profile", "--help"},
		{"help", "create", "profile"}, {"auth", "create", "key", "-h"}} {
		r := runCLI(t, nil, args...)
		assert.Equal(t, ExitOK, r.code, args)
		assert.Contains(t, r.stdout, "Usage:\n  baectl", args)
		assert.Empty(t, r.stderr, args)
	}
	r := runCLI(t, nil, "create", "profile", "--help")
	assert.Contains(t, r.stdout, "baectl create profile <name> <primary_provider> [flags]")
	assert.Contains(t, r.stdout, "--allowed-tool NAME")
	assert.Contains(t, r.stdout, "--admin-addr HOST:PORT")

	r = runCLI(t, nil, "--help")
	for _, want := range []string{"create", "list", "quickstart", "setup", "completion", "--version"} {
		assert.Contains(t, r.stdout, want)
	}
}

func TestVersion(t *testing.T) {
	r := runCLI(t, nil, "--version")
	require.Equal(t, ExitOK, r.code)
	assert.Regexp(t, `^baectl \S+ rev \S+ go1\.\S+\n$`, r.stdout)
	assert.Empty(t, r.stderr)
}

// TestUsageErrorPrintedOnce: the error line, then the usage of the command
// that was being parsed, each exactly once and only on stderr.
func TestUsageErrorPrintedOnce(t *testing.T) {
	cases := map[string]struct {
		args      []string
		first     string
		usageLine string
	}{
		"unknown root flag": {[]string{"--bogus"}, "baectl: unknown flag: --bogus\n", "baectl [flags]"},
		"unknown leaf flag": {[]string{"list", "profiles", "--bogus"}, "baectl: unknown flag: --bogus\n", "baectl list profiles [flags]"},
		"unknown resource":  {[]string{"list", "widgets"}, `baectl: unknown command "widgets" for "baectl list" (want one of: `, "baectl list [flags]"},
		"missing arg": {[]string{"create", "profile", "only-name"},
			"baectl: create profile: expected 2 argument(s) (<name> <primary_provider>), got 1\n", "baectl create profile <name> <primary_provider> [flags]"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			r := runCLI(t, map[string]string{"BAE_ADMIN_ADDR": "127.0.0.1:1"}, c.args...)
			assert.Equal(t, ExitUsage, r.code)
			assert.Empty(t, r.stdout)
			assert.True(t, strings.HasPrefix(r.stderr, c.first), r.stderr)
			assert.Equal(t, 1, strings.Count(r.stderr, "baectl: "), r.stderr)
			assert.Equal(t, 1, strings.Count(r.stderr, "Usage:"), r.stderr)
			assert.Contains(t, r.stderr, c.usageLine)
		})
	}
}

func TestCompletion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		r := runCLI(t, nil, "completion", shell)
		require.Equal(t, ExitOK, r.code, r.stderr)
		assert.Contains(t, r.stdout, "baectl", shell)
	}
	// Cobra's hidden __complete command is what the scripts call.
	r := runCLI(t, nil, "__complete", "list", "")
	require.Equal(t, ExitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "profiles")
	assert.Contains(t, r.stdout, "events")
}

func TestUnreachableServer(t *testing.T) {
	r := runCLI(t, map[string]string{"BAE_ADMIN_ADDR": "127.0.0.1:1"}, "list", "profiles")
	assert.Equal(t, ExitRuntime, r.code)
	assert.Contains(t, r.stderr, "baectl: could not connect to admin API at 127.0.0.1:1 — is baesrv running")
}

func TestExplicitKeyFileUnreadableIsRuntimeError(t *testing.T) {
	r := runCLI(t, map[string]string{"BAE_ADMIN_ADDR": "127.0.0.1:1"},
		"list", "profiles", "--admin-key-file", filepath.Join(t.TempDir(), "absent.pem"))
	assert.Equal(t, ExitRuntime, r.code)
	assert.Contains(t, r.stderr, "read admin key file")
	assert.NotContains(t, r.stderr, "could not connect", "the key file is resolved before any request")
}

var (
	adminKeyRe = regexp.MustCompile(`^bae_admin_[0-9a-f]{48}$`)
	// BAE's PHC form and costs: 64 MiB, 3 passes, 1 lane, 16-byte salt,
	// 32-byte digest.
	hashRe = regexp.MustCompile(`^\$argon2id\$v=19\$m=65536,t=3,p=1\$[A-Za-z0-9+/]{22}\$[A-Za-z0-9+/]{43}$`)
)

// checkKeyPair asserts the files of `auth create key` and returns the key.
func checkKeyPair(t *testing.T, dir, name string) string {
	t.Helper()
	keyPath, hashPath := filepath.Join(dir, "admin-key.pem"), filepath.Join(dir, "admin-key-hash.pem")
	for _, p := range []string{keyPath, hashPath} {
		st, err := os.Stat(p)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), p)
	}
	raw, err := os.ReadFile(keyPath)
	require.NoError(t, err)
	require.True(t, strings.HasSuffix(string(raw), "\n"), "key file ends in a newline")
	key := strings.TrimSpace(string(raw))
	require.Regexp(t, adminKeyRe, key)

	var doc map[string]string
	hraw, err := os.ReadFile(hashPath)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(hraw, &doc))
	assert.Equal(t, map[string]string{
		"key_hash": doc["key_hash"],
		"prefix":   key[:len("bae_admin_")+4],
		"name":     name,
	}, doc)
	assert.Regexp(t, hashRe, doc["key_hash"])
	ok, err := keyhash.VerifyPHC(doc["key_hash"], key)
	require.NoError(t, err)
	assert.True(t, ok, "the hash verifies its key")
	ok, _ = keyhash.VerifyPHC(doc["key_hash"], key+"0")
	assert.False(t, ok)
	return key
}

func TestAuthCreateKeyWritesPair(t *testing.T) {
	dir := t.TempDir()
	r := runCLI(t, nil, "auth", "create", "key", "--name", "shared-admin", "--out-dir", dir)
	require.Equal(t, ExitOK, r.code, r.stderr)
	key := checkKeyPair(t, dir, "shared-admin")
	assert.Equal(t, filepath.Join(dir, "admin-key.pem")+"\n"+filepath.Join(dir, "admin-key-hash.pem")+"\n", r.stdout)
	assert.NotContains(t, r.stdout+r.stderr, key, "the plaintext is only ever in the file")

	// Every run mints fresh material.
	r = runCLI(t, nil, "auth", "create", "key", "--out-dir", dir)
	require.Equal(t, ExitOK, r.code, r.stderr)
	assert.NotEqual(t, key, checkKeyPair(t, dir, "provisioned-admin"))
}

func TestAuthCreateKeySHA256(t *testing.T) {
	dir := t.TempDir()
	r := runCLI(t, nil, "auth", "create", "key", "--hash", "sha256", "--out-dir", dir)
	require.Equal(t, ExitOK, r.code, r.stderr)
	key, err := os.ReadFile(filepath.Join(dir, "admin-key.pem"))
	require.NoError(t, err)
	var doc map[string]string
	hraw, err := os.ReadFile(filepath.Join(dir, "admin-key-hash.pem"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(hraw, &doc))
	sum := sha256.Sum256([]byte(strings.TrimSpace(string(key))))
	assert.Equal(t, "sha256:"+hex.EncodeToString(sum[:]), doc["key_hash"])

	r = runCLI(t, nil, "auth", "create", "key", "--hash", "md5", "--out-dir", dir)
	assert.Equal(t, ExitUsage, r.code)
	assert.Contains(t, r.stderr, `unknown key hash scheme "md5"`)
}

func TestAuthCreateKeyMissingDir(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "absent")
	r := runCLI(t, nil, "auth", "create", "key", "--out-dir", missing)
	assert.Equal(t, ExitRuntime, r.code)
	assert.Contains(t, r.stderr, missing)
	_, err := os.Stat(missing)
	assert.ErrorIs(t, err, os.ErrNotExist, "the directory is not created")
}

func TestAPIErrorMessages(t *testing.T) {
	conn := connection{defaultKeyPath: "bae-data/admin-key.pem"}
	cases := []struct {
		err  apiError
		want []string
	}{
		{apiError{Status: 404, Type: "not_found", Detail: "no profile with id pro_x"}, []string{"no profile with id pro_x (404 not_found)"}},
		{apiError{Status: 409, Type: "profile_in_use", Detail: "in use"}, []string{"in use (409 profile_in_use)", "baectl list keys", "baectl delete key <id>"}},
		{apiError{Status: 422, Type: "profile_unavailable", Detail: "gone"}, []string{"gone (the referenced profile does not exist or was deleted)"}},
		{apiError{Status: 401, Type: "unauthorized", Detail: "invalid admin key", conn: conn}, []string{"invalid admin key (401 unauthorized); no admin token was found", "--admin-token", "--admin-key-file", "bae-data/admin-key.pem"}},
		{apiError{Status: 401, Type: "unauthorized", Detail: "invalid admin key", conn: connection{token: "x", source: "BAE_ADMIN_TOKEN"}}, []string{"the token from BAE_ADMIN_TOKEN was rejected"}},
		{apiError{Status: 502, rawBody: "<html>bad gateway</html>"}, []string{"502 Bad Gateway", "<html>bad gateway</html>"}},
	}
	for _, c := range cases {
		msg := c.err.Error()
		for _, w := range c.want {
			assert.Contains(t, msg, w)
		}
	}
}

func TestEventPayloadCellKeepsFailureReasons(t *testing.T) {
	long := strings.Repeat("x", 200)
	failed := event{EventType: "provider.response", Payload: json.RawMessage(
		`{"attempt":0,"ok":false,"status":401,"error":"provider returned 401: <html>` + long + `</html>","body":{"huge":"` + long + `"}}`)}
	cell := eventPayloadCell(failed, false)
	assert.Contains(t, cell, "provider returned 401: <html>"+long+"</html>", "the reason is whole")
	assert.Contains(t, cell, `"body":"…"`)
	assert.NotContains(t, cell, `"huge"`)

	sessErr := event{EventType: "session.error", Payload: json.RawMessage(`{"reason":"provider_call_failed","detail":"` + long + `"}`)}
	assert.Contains(t, eventPayloadCell(sessErr, false), long)

	ok := event{EventType: "provider.response", Payload: json.RawMessage(`{"ok":true,"body":"` + long + `"}`)}
	assert.Len(t, []rune(eventPayloadCell(ok, false)), payloadWidth)
	assert.Contains(t, eventPayloadCell(ok, true), long)
}
