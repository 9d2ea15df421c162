package store_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/internal/lib/keyhash"
	"github.com/bae-go/bae-go/internal/testing/testdb"
	"github.com/bae-go/bae-go/store"
)

// countingHasher counts the Argon2id verifications a store asks for.
type countingHasher struct {
	keyhash.Hasher
	verifies atomic.Int64
	hashes   atomic.Int64
}

func (c *countingHasher) Hash(secret string) (string, error) {
	c.hashes.Add(1)
	return c.Hasher.Hash(secret)
}

func (c *countingHasher) VerifyPHC(stored, secret string) (bool, error) {
	c.verifies.Add(1)
	return c.Hasher.VerifyPHC(stored, secret)
}

func replica(t *testing.T, url string, h keyhash.Hasher, cacheSize int) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), url, store.Options{KeyHasher: h, VerifiedKeyCacheSize: cacheSize})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	return st
}

// Keys are written as Argon2id PHC strings; the replica that minted a key
// never verifies it with Argon2id, another replica does once, and a
// revocation on either ends the key on both at once.
func TestArgon2idKeysCacheAndRevocation(t *testing.T) {
	ctx := context.Background()
	url := testdb.New(t)
	ha := &countingHasher{Hasher: keyhash.Argon2id{Params: keyhash.TestParams}}
	hb := &countingHasher{Hasher: keyhash.Argon2id{Params: keyhash.TestParams}}
	a, b := replica(t, url, ha, 0), replica(t, url, hb, 0)

	p, err := a.CreateProfile(ctx, store.ProfileInput{Name: "p", PrimaryProvider: "x"})
	require.NoError(t, err)
	ck, clientKey, err := a.NewClientKey(ctx, "k", p.ID)
	require.NoError(t, err)
	assert.True(t, keyhash.IsArgon2id(ck.Hash), ck.Hash)
	require.True(t, keyhash.Valid(ck.Hash))

	// The minting replica knows its key.
	got, err := a.Authenticate(ctx, store.RoleClient, clientKey)
	require.NoError(t, err)
	assert.Equal(t, ck.ID, got.ID)
	assert.EqualValues(t, 0, ha.verifies.Load())

	// Another replica verifies once, then answers from its cache.
	for i := 0; i < 3; i++ {
		got, err = b.Authenticate(ctx, store.RoleClient, clientKey)
		require.NoError(t, err)
		assert.Equal(t, ck.ID, got.ID)
	}
	assert.EqualValues(t, 1, hb.verifies.Load(), "one Argon2id for three requests")

	// A wrong secret sharing the display prefix is verified and refused;
	// one with another prefix costs nothing.
	_, err = b.Authenticate(ctx, store.RoleClient, clientKey[:len(clientKey)-1]+"x")
	assert.ErrorIs(t, err, store.ErrNotFound)
	assert.EqualValues(t, 2, hb.verifies.Load())
	_, err = b.Authenticate(ctx, store.RoleClient, "bae_zzzz"+clientKey[8:])
	assert.ErrorIs(t, err, store.ErrNotFound)
	assert.EqualValues(t, 2, hb.verifies.Load())
	// A client key is not a session key, nor an admin key.
	_, err = b.Authenticate(ctx, store.RoleAdmin, clientKey)
	assert.ErrorIs(t, err, store.ErrNotFound)

	// Session keys minted here are random secrets hashed once with SHA-256:
	// an open costs no Argon2id, and neither does any request (imported
	// BAE session keys keep Argon2id; the import tests cover them).
	beforeHash := ha.hashes.Load()
	sess, sessKey, err := a.CreateSession(ctx, p.ID, store.ClientDecl{ClientKeyID: ck.ID}, events.Declarations{}, store.Caps{})
	require.NoError(t, err)
	assert.Equal(t, beforeHash, ha.hashes.Load(), "a session open ran the slow hash")
	auth, err := a.AuthenticateSession(ctx, sessKey, sess.ID)
	require.NoError(t, err)
	assert.Equal(t, sess.ID, auth.Session.ID)
	assert.True(t, auth.DeclFound)
	assert.Regexp(t, `^sha256:[0-9a-f]{64}$`, auth.Key.Hash)
	assert.EqualValues(t, 0, ha.verifies.Load())
	before := hb.verifies.Load()
	for i := 0; i < 3; i++ {
		auth, err = b.AuthenticateSession(ctx, sessKey, sess.ID)
		require.NoError(t, err)
		assert.Equal(t, sess.ID, auth.Session.ID)
		assert.Equal(t, ck.ID, auth.Decl.ClientKeyID)
	}
	assert.EqualValues(t, before, hb.verifies.Load())
	other, _, err := a.CreateSession(ctx, p.ID, store.ClientDecl{ClientKeyID: ck.ID}, events.Declarations{}, store.Caps{})
	require.NoError(t, err)
	_, err = b.AuthenticateSession(ctx, sessKey, other.ID)
	assert.ErrorIs(t, err, store.ErrNotFound, "a session key is bound to its session")

	// Revocation on A: B's cached proofs stop working on the next request.
	_, err = a.RevokeClientKey(ctx, ck.ID)
	require.NoError(t, err)
	_, err = b.Authenticate(ctx, store.RoleClient, clientKey)
	assert.ErrorIs(t, err, store.ErrNotFound)
	_, err = b.AuthenticateSession(ctx, sessKey, sess.ID)
	assert.ErrorIs(t, err, store.ErrNotFound)
	_, err = a.Authenticate(ctx, store.RoleClient, clientKey)
	assert.ErrorIs(t, err, store.ErrNotFound)
}

func TestVerifiedKeyCacheIsBounded(t *testing.T) {
	ctx := context.Background()
	url := testdb.New(t)
	a := replica(t, url, keyhash.Argon2id{Params: keyhash.TestParams}, 0)
	hb := &countingHasher{Hasher: keyhash.Argon2id{Params: keyhash.TestParams}}
	b := replica(t, url, hb, 1)
	p, err := a.CreateProfile(ctx, store.ProfileInput{Name: "p", PrimaryProvider: "x"})
	require.NoError(t, err)
	_, k1, err := a.NewClientKey(ctx, "1", p.ID)
	require.NoError(t, err)
	_, k2, err := a.NewClientKey(ctx, "2", p.ID)
	require.NoError(t, err)
	for _, k := range []string{k1, k1, k2, k2, k1} {
		_, err := b.Authenticate(ctx, store.RoleClient, k)
		require.NoError(t, err)
	}
	assert.EqualValues(t, 3, hb.verifies.Load(), "one entry: k1, k2, then k1 again")
}

// BAE_KEY_HASH=sha256 writes the older form, found by its hash alone.
func TestSHA256KeysNeedNoArgon2id(t *testing.T) {
	ctx := context.Background()
	h := &countingHasher{Hasher: keyhash.SHA256{}}
	st := replica(t, testdb.New(t), h, 0)
	p, err := st.CreateProfile(ctx, store.ProfileInput{Name: "p", PrimaryProvider: "x"})
	require.NoError(t, err)
	ck, key, err := st.NewClientKey(ctx, "k", p.ID)
	require.NoError(t, err)
	assert.Regexp(t, `^sha256:[0-9a-f]{64}$`, ck.Hash)
	sess, sk, err := st.CreateSession(ctx, p.ID, store.ClientDecl{ClientKeyID: ck.ID}, events.Declarations{}, store.Caps{})
	require.NoError(t, err)
	_, err = st.Authenticate(ctx, store.RoleClient, key)
	require.NoError(t, err)
	_, err = st.AuthenticateSession(ctx, sk, sess.ID)
	require.NoError(t, err)
	assert.EqualValues(t, 0, h.verifies.Load())
}

// Rows planted under the prefix of a key (a hostile import did it before
// prefixes were kept unique) made one request with that prefix verify
// every row. A live prefix now names one Argon2id client key: the index
// refuses a second, and an upgrade marks rows that already share one
// instead of failing. Those keep working (a BAE deployment of a few
// hundred keys likely holds a pair), for at most four verifications a
// request; a prefix shared by more costs none and verifies none.
func TestClientKeyPrefixNamesOneKey(t *testing.T) {
	ctx := context.Background()
	url := testdb.New(t)
	a := replica(t, url, keyhash.Argon2id{Params: keyhash.TestParams}, 0)
	p, err := a.CreateProfile(ctx, store.ProfileInput{Name: "p", PrimaryProvider: "x"})
	require.NoError(t, err)
	ck, secret, err := a.NewClientKey(ctx, "k", p.ID)
	require.NoError(t, err)
	plant := func(i int) error {
		h, err := keyhash.Argon2id{Params: keyhash.TestParams}.Hash(secret[:8] + "planted" + string(rune('a'+i)))
		require.NoError(t, err)
		_, err = a.Pool.Exec(ctx, `INSERT INTO keys (id, role, name, prefix, key_hash, profile_id) VALUES ($1, 'client', 'planted', $2, $3, $4)`,
			"key_planted"+string(rune('a'+i)), ck.Prefix, h, p.ID)
		return err
	}
	require.ErrorContains(t, plant(0), "keys_client_prefix", "a second live key under one prefix is refused")

	// A deployment from before the rule, holding two keys under one prefix.
	_, err = a.Pool.Exec(ctx, `DROP INDEX keys_client_prefix; ALTER TABLE keys DROP COLUMN shared_prefix;
		DELETE FROM schema_migrations WHERE version = 14`)
	require.NoError(t, err)
	require.NoError(t, plant(0))
	require.NoError(t, a.Migrate(ctx), "the upgrade does not fail on rows that share a prefix")
	var shared int
	require.NoError(t, a.Pool.QueryRow(ctx, `SELECT count(*) FROM keys WHERE shared_prefix`).Scan(&shared))
	assert.Equal(t, 2, shared)

	h := &countingHasher{Hasher: keyhash.Argon2id{Params: keyhash.TestParams}}
	b := replica(t, url, h, 0)
	for _, s := range []string{secret, secret[:8] + "planteda"} {
		_, err = b.Authenticate(ctx, store.RoleClient, s)
		require.NoError(t, err, "keys that shared a prefix before the upgrade keep working")
	}
	assert.LessOrEqual(t, h.verifies.Load(), int64(4))
	sharedIDs, err := b.SharedPrefixKeys(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{ck.ID, "key_planteda"}, sharedIDs)

	// Rows planted past four under the prefix cost no Argon2id at all.
	_, err = a.Pool.Exec(ctx, `DROP INDEX keys_client_prefix; ALTER TABLE keys DROP COLUMN shared_prefix;
		DELETE FROM schema_migrations WHERE version = 14`)
	require.NoError(t, err)
	for i := 1; i <= 3; i++ {
		require.NoError(t, plant(i))
	}
	require.NoError(t, a.Migrate(ctx))
	h2 := &countingHasher{Hasher: keyhash.Argon2id{Params: keyhash.TestParams}}
	c := replica(t, url, h2, 0)
	for _, s := range []string{secret, secret[:8] + "plantedb", secret[:8] + strings.Repeat("0", len(secret)-8)} {
		_, err = c.Authenticate(ctx, store.RoleClient, s)
		assert.ErrorIs(t, err, store.ErrNotFound)
	}
	assert.EqualValues(t, 0, h2.verifies.Load(), "a prefix shared by five keys costs no Argon2id")

	// Revoking the others makes the remaining key cost one verification.
	_, err = a.Pool.Exec(ctx, `UPDATE keys SET deleted_at = now() WHERE name = 'planted'`)
	require.NoError(t, err)
	got, err := c.Authenticate(ctx, store.RoleClient, secret)
	require.NoError(t, err)
	assert.Equal(t, ck.ID, got.ID)
	assert.EqualValues(t, 1, h2.verifies.Load())
	sharedIDs, err = c.SharedPrefixKeys(ctx)
	require.NoError(t, err)
	assert.Empty(t, sharedIDs)
	// New keys keep clear of every live prefix, marked ones included.
	for range 20 {
		k, _, err := a.NewClientKey(ctx, "more", p.ID)
		require.NoError(t, err)
		assert.NotEqual(t, ck.Prefix, k.Prefix)
	}
}
