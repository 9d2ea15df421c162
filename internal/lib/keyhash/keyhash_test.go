package keyhash

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/lib/ids"
)

func TestArgon2idRoundTrip(t *testing.T) {
	secret := ids.NewSecret(ids.ClientKeyPrefix)
	h, err := Argon2id{Params: TestParams}.Hash(secret)
	require.NoError(t, err)
	assert.Regexp(t, regexp.MustCompile(`^\$argon2id\$v=19\$m=64,t=1,p=1\$[A-Za-z0-9+/]{22}\$[A-Za-z0-9+/]{43}$`), h)
	assert.True(t, Valid(h))
	ok, err := Verify(h, secret)
	require.NoError(t, err)
	assert.True(t, ok)
	ok, err = Verify(h, secret+"0")
	require.NoError(t, err)
	assert.False(t, ok)
	again, _ := Argon2id{Params: TestParams}.Hash(secret)
	assert.NotEqual(t, h, again, "a fresh salt every time")
}

// Verification takes the costs from the stored string, whatever the
// hasher that wrote it used.
func TestVerifiesForeignEncoding(t *testing.T) {
	secret := "bae_" + strings.Repeat("0", 48)
	h, err := Argon2id{Params: Params{MemoryKiB: 256, Time: 2, Threads: 2, KeyLen: 32, SaltLen: 16}}.Hash(secret)
	require.NoError(t, err)
	ok, err := VerifyPHC(h, secret)
	require.NoError(t, err)
	assert.True(t, ok, "costs come from the string, not the hasher")
	noVersion := strings.Replace(h, "$v=19", "", 1)
	ok, err = VerifyPHC(noVersion, secret)
	require.NoError(t, err)
	assert.True(t, ok, "the version segment is optional")
}

func TestSHA256Form(t *testing.T) {
	h, err := SHA256{}.Hash("bae_x")
	require.NoError(t, err)
	assert.Equal(t, ids.HashSecret("bae_x"), h)
	ok, err := Verify(h, "bae_x")
	require.NoError(t, err)
	assert.True(t, ok)
	ok, _ = Verify(h, "bae_y")
	assert.False(t, ok)
}

func TestRejectsMalformed(t *testing.T) {
	for _, s := range []string{
		"", "md5:abc", "sha256:abc", "sha256:" + strings.Repeat("G", 64),
		"$argon2i$v=19$m=64,t=1,p=1$MDEyMzQ1Njc4OWFiY2RlZg$" + strings.Repeat("A", 43),
		"$argon2id$v=16$m=64,t=1,p=1$MDEyMzQ1Njc4OWFiY2RlZg$" + strings.Repeat("A", 43),
		"$argon2id$v=19$m=0,t=1,p=1$MDEyMzQ1Njc4OWFiY2RlZg$" + strings.Repeat("A", 43),
		"$argon2id$v=19$m=64,t=0,p=1$MDEyMzQ1Njc4OWFiY2RlZg$" + strings.Repeat("A", 43),
		"$argon2id$v=19$m=64,t=1,p=1,x=2$MDEyMzQ1Njc4OWFiY2RlZg$" + strings.Repeat("A", 43),
		"$argon2id$v=19$m=64,t=1,p=1$!!$" + strings.Repeat("A", 43),
		"$argon2id$v=19$m=64,t=1,p=1$MDEyMzQ1Njc4OWFiY2RlZg$AA",
	} {
		assert.False(t, Valid(s), s)
		_, err := VerifyPHC(s, "x")
		assert.Error(t, err, s)
	}
	_, err := ForScheme("bcrypt")
	assert.ErrorContains(t, err, `unknown key hash scheme "bcrypt"`)
}

// A stored string sets the cost of every request presenting a key of its
// prefix: costs above the bounds are refused before any hashing (a hash of
// m=4 GiB would otherwise take the process down), and the costs BAE and we
// write stay accepted.
func TestBoundsCosts(t *testing.T) {
	salt, digest := "MDEyMzQ1Njc4OWFiY2RlZg", strings.Repeat("A", 43)
	for _, tc := range []struct{ params, salt, digest, err string }{
		{"m=4294967295,t=1,p=1", salt, digest, "memory cost m=4294967295 KiB is above the 65536 KiB"},
		{"m=1048576,t=1,p=1", salt, digest, "memory cost m=1048576 KiB"},
		{"m=65537,t=1,p=1", salt, digest, "memory cost m=65537 KiB"},
		{"m=64,t=5,p=1", salt, digest, "time cost t=5 is above the 4"},
		{"m=4294967295,t=4294967295,p=255", salt, digest, "is above"},
		{"m=256,t=1,p=5", salt, digest, "parallelism p=5 is above the 4"},
		{"m=64,t=1,p=1", strings.Repeat("A", 88), digest, "salt of 66 bytes is longer than the 64"},
		{"m=64,t=1,p=1", salt, strings.Repeat("A", 1<<20), "digest of 786432 bytes is longer than the 64"},
		{"m=64,t=1,p=1", "AAAAAAAA", digest, "bad Argon2 salt"},
	} {
		s := "$argon2id$v=19$" + tc.params + "$" + tc.salt + "$" + tc.digest
		assert.False(t, Valid(s), tc.params)
		assert.ErrorContains(t, Check(s), tc.err, tc.params)
		_, err := VerifyPHC(s, "bae_x")
		assert.ErrorContains(t, err, tc.err, tc.params)
	}
	secret := "bae_" + strings.Repeat("1", 48)
	for _, p := range []Params{BAEParams, TestParams,
		{MemoryKiB: MaxMemoryKiB, Time: MaxTime, Threads: MaxThreads, KeyLen: MaxDigestLen, SaltLen: MaxSaltLen},
		{MemoryKiB: 32, Time: 1, Threads: 4, KeyLen: MinDigestLen, SaltLen: MinSaltLen}} {
		h, err := Argon2id{Params: p}.Hash(secret)
		require.NoError(t, err)
		require.NoError(t, Check(h), "%+v", p)
		ok, err := VerifyPHC(h, secret)
		require.NoError(t, err)
		assert.True(t, ok, "%+v", p)
	}
}
