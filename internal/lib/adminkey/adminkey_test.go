package adminkey

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/lib/keyhash"
	"github.com/bae-go/bae-go/internal/testing/testdb"
	"github.com/bae-go/bae-go/store"
)

func setup(t *testing.T) (*store.Store, string) {
	t.Helper()
	st, err := store.Open(context.Background(), testdb.New(t), store.Options{KeyHasher: keyhash.Argon2id{Params: keyhash.TestParams}})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	return st, t.TempDir()
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func verify(t *testing.T, st *store.Store, token string) bool {
	v := &Verifier{Store: st}
	return v.Verify(httptest.NewRequest("GET", "/", nil), token)
}

func TestBootstrapWritesKeyOnceAndRotates(t *testing.T) {
	st, dir := setup(t)
	ctx := context.Background()
	opts := Options{KeyFile: filepath.Join(dir, "admin-key.pem"), HashFile: filepath.Join(dir, "admin-key-hash.pem")}
	require.NoError(t, Bootstrap(ctx, st, opts, quiet))
	key, err := ReadKeyFile(opts.KeyFile)
	require.NoError(t, err)
	assert.Regexp(t, `^bae_admin_[0-9a-f]{48}$`, key)
	info, err := os.Stat(opts.KeyFile)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm())
	assert.True(t, verify(t, st, key))
	assert.False(t, verify(t, st, key+"0"))

	// A restart leaves the key alone.
	require.NoError(t, Bootstrap(ctx, st, opts, quiet))
	again, _ := ReadKeyFile(opts.KeyFile)
	assert.Equal(t, key, again)

	// Rotation revokes the old key and mints a new one.
	opts.Rotate = true
	require.NoError(t, Bootstrap(ctx, st, opts, quiet))
	rotated, _ := ReadKeyFile(opts.KeyFile)
	assert.NotEqual(t, key, rotated)
	assert.False(t, verify(t, st, key))
	assert.True(t, verify(t, st, rotated))
	// Only hashes are stored.
	keys, err := st.ActiveAdminKeys(ctx)
	require.NoError(t, err)
	require.Len(t, keys, 1)
	assert.NotContains(t, keys[0].Hash, rotated[len("bae_admin_"):])
}

func TestPreProvisionedHashFile(t *testing.T) {
	st, dir := setup(t)
	ctx := context.Background()
	secret, hf, err := NewPair("shared", keyhash.Argon2id{Params: keyhash.TestParams})
	require.NoError(t, err)
	require.True(t, keyhash.IsArgon2id(hf.KeyHash))
	b, _ := json.Marshal(hf)
	hashPath := filepath.Join(dir, "admin-key-hash.pem")
	require.NoError(t, os.WriteFile(hashPath, b, 0o600))
	opts := Options{KeyFile: filepath.Join(dir, "admin-key.pem"), HashFile: hashPath}
	require.NoError(t, Bootstrap(ctx, st, opts, quiet))
	_, err = os.Stat(opts.KeyFile)
	assert.ErrorIs(t, err, os.ErrNotExist, "the server never learns the plaintext")
	assert.True(t, verify(t, st, secret))

	// Malformed hash files are usage errors.
	for _, body := range []string{"not json", `{"prefix":"bae_admin_x"}`, `{"key_hash":"md5:abc","prefix":"p"}`} {
		st2, dir2 := setup(t)
		p := filepath.Join(dir2, "h.pem")
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		err := Bootstrap(ctx, st2, Options{KeyFile: filepath.Join(dir2, "k.pem"), HashFile: p}, quiet)
		var ue *UsageError
		assert.ErrorAs(t, err, &ue, body)
	}
}

func TestDisabledAuthRefusesRotation(t *testing.T) {
	st, dir := setup(t)
	err := Bootstrap(context.Background(), st, Options{KeyFile: filepath.Join(dir, "k"), Rotate: true, Disabled: true}, quiet)
	var ue *UsageError
	require.ErrorAs(t, err, &ue)
	require.NoError(t, Bootstrap(context.Background(), st, Options{KeyFile: filepath.Join(dir, "k"), Disabled: true}, quiet))
	_, err = os.Stat(filepath.Join(dir, "k"))
	assert.ErrorIs(t, err, os.ErrNotExist, "no key is generated when auth is disabled")
}

func TestArgon2PHCHashes(t *testing.T) {
	// A PHC string produced by a standard Argon2id implementation
	// (m=64 KiB keeps the test fast) verifies its plaintext.
	token := "bae_admin_000000000000000000000000000000000000000000000000"
	salt := []byte("0123456789abcdef")
	hash := phcFor(token, salt)
	require.True(t, ValidHash(hash))
	ok, err := keyhash.VerifyPHC(hash, token)
	require.NoError(t, err)
	assert.True(t, ok)
	ok, _ = keyhash.VerifyPHC(hash, token+"x")
	assert.False(t, ok)
	assert.False(t, ValidHash("$argon2id$v=19$m=0,t=1,p=1$AAAA$AAAA"))
}

// A hash file written by BAE's tooling stores the first eight characters
// as the prefix ("bae_admi"); its key authenticates all the same.
func TestBAEHashFileAuthenticates(t *testing.T) {
	st, dir := setup(t)
	token := "bae_admin_" + strings.Repeat("ab", 24)
	b, _ := json.Marshal(HashFile{KeyHash: phcFor(token, []byte("fedcba9876543210")), Prefix: token[:8], Name: "from-bae"})
	hashPath := filepath.Join(dir, "admin-key-hash.pem")
	require.NoError(t, os.WriteFile(hashPath, b, 0o600))
	require.NoError(t, Bootstrap(context.Background(), st, Options{KeyFile: filepath.Join(dir, "k.pem"), HashFile: hashPath}, quiet))
	assert.True(t, verify(t, st, token))
	assert.True(t, verify(t, st, token), "again, from the verified-key cache")
	assert.False(t, verify(t, st, token[:len(token)-1]+"c"))
}
