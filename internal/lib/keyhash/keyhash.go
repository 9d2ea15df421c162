// Package keyhash is the one home of how bearer-key hashes are written and
// checked: Argon2id PHC strings (what BAE stores, and our default) and the
// older "sha256:<hex>" form, which stays readable.
//
// A PHC string carries its own salt and cost, so a hash written with other
// parameters verifies here (keys carried over from a BAE database work
// unchanged), within bounds: a stored string sets the memory and time a
// request costs, so costs above what BAE or we ever write are refused when
// the string is parsed and never run (see MaxMemoryKiB).
package keyhash

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/crypto/argon2"

	"github.com/bae-go/bae-go/internal/lib/ids"
)

// Argon2idPrefix starts every Argon2id PHC string.
const Argon2idPrefix = "$argon2id$"

// Scheme names, as BAE_KEY_HASH spells them.
const (
	SchemeArgon2id = "argon2id"
	SchemeSHA256   = "sha256"
)

// Params are Argon2id costs.
type Params struct {
	MemoryKiB uint32
	Time      uint32
	Threads   uint8
	KeyLen    uint32
	SaltLen   int
}

// BAEParams are the costs BAE's release builds write: 64 MiB, 3 passes,
// one lane, a 32-byte digest and a 16-byte salt.
var BAEParams = Params{MemoryKiB: 64 * 1024, Time: 3, Threads: 1, KeyLen: 32, SaltLen: 16}

// TestParams are cheap costs for tests (the same BAE's debug builds use):
// never for keys that protect anything.
var TestParams = Params{MemoryKiB: 64, Time: 1, Threads: 1, KeyLen: 32, SaltLen: 16}

// Bounds on every Argon2id parameter a stored PHC string may carry. The
// highest costs are BAE's release costs (and ours) with one pass and three
// lanes of headroom; the lowest accept BAE's debug-build costs. A stored
// string sets what a request presenting a key of its prefix costs, so one
// outside the bounds is refused by Valid and VerifyPHC before any hashing.
const (
	MaxMemoryKiB = 64 * 1024
	MaxTime      = 4
	MaxThreads   = 4
	MinSaltLen   = 8
	MaxSaltLen   = 64
	MinDigestLen = 16
	MaxDigestLen = 64
)

// Hasher writes the stored form of new keys and verifies presented keys
// against stored PHC strings. Tests wrap one to count the slow calls.
type Hasher interface {
	// Hash returns the stored form of secret.
	Hash(secret string) (string, error)
	// VerifyPHC reports whether secret matches an Argon2id PHC string; an
	// unparsable string is an error.
	VerifyPHC(stored, secret string) (bool, error)
}

// Argon2id writes Argon2id PHC strings with Params.
type Argon2id struct{ Params Params }

// Hash implements Hasher.
func (a Argon2id) Hash(secret string) (string, error) {
	p := a.Params
	salt := make([]byte, p.SaltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("argon2id salt: %w", err)
	}
	sum := argon2.IDKey([]byte(secret), salt, p.Time, p.MemoryKiB, p.Threads, p.KeyLen)
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, p.MemoryKiB, p.Time, p.Threads,
		base64.RawStdEncoding.EncodeToString(salt), base64.RawStdEncoding.EncodeToString(sum)), nil
}

// VerifyPHC implements Hasher.
func (Argon2id) VerifyPHC(stored, secret string) (bool, error) { return VerifyPHC(stored, secret) }

// SHA256 writes "sha256:<hex>" (one SHA-256 of the 192-bit secret), the
// form bae-go wrote before Argon2id became the default.
type SHA256 struct{}

// Hash implements Hasher.
func (SHA256) Hash(secret string) (string, error) { return ids.HashSecret(secret), nil }

// VerifyPHC implements Hasher.
func (SHA256) VerifyPHC(stored, secret string) (bool, error) { return VerifyPHC(stored, secret) }

// ForScheme returns the hasher BAE_KEY_HASH names ("" is the default,
// Argon2id with BAE's costs).
func ForScheme(name string) (Hasher, error) {
	switch strings.ToLower(strings.TrimSpace(name)) {
	case "", SchemeArgon2id:
		return Argon2id{Params: BAEParams}, nil
	case SchemeSHA256:
		return SHA256{}, nil
	}
	return nil, fmt.Errorf("unknown key hash scheme %q (want %s or %s)", name, SchemeArgon2id, SchemeSHA256)
}

// IsArgon2id reports whether stored looks like an Argon2id PHC string.
func IsArgon2id(stored string) bool { return strings.HasPrefix(stored, Argon2idPrefix) }

// Valid accepts "sha256:<64 hex>" and well-formed Argon2id PHC strings
// within the cost bounds.
func Valid(stored string) bool { return Check(stored) == nil }

// Check says why stored is not a hash this server verifies (nil if it is).
func Check(stored string) error {
	if h, ok := strings.CutPrefix(stored, ids.HashScheme); ok {
		if len(h) != 64 {
			return errors.New("not 64 hex digits after sha256:")
		}
		for _, c := range h {
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return errors.New("not 64 hex digits after sha256:")
			}
		}
		return nil
	}
	_, err := parse(stored)
	return err
}

// Verify checks secret against either stored form, in constant time.
func Verify(stored, secret string) (bool, error) {
	if strings.HasPrefix(stored, ids.HashScheme) {
		return ids.EqualHash(stored, ids.HashSecret(secret)), nil
	}
	return VerifyPHC(stored, secret)
}

// VerifyPHC recomputes the digest with the salt and costs stored in the
// PHC string and compares in constant time.
func VerifyPHC(stored, secret string) (bool, error) {
	p, err := parse(stored)
	if err != nil {
		return false, err
	}
	got := argon2.IDKey([]byte(secret), p.salt, p.time, p.memory, p.threads, uint32(len(p.hash)))
	return subtle.ConstantTimeCompare(got, p.hash) == 1, nil
}

type phc struct {
	memory, time uint32
	threads      uint8
	salt, hash   []byte
}

// parse reads "$argon2id$v=19$m=…,t=…,p=…$salt$hash" (the version segment
// may be absent, meaning 0x13 as in the reference encoder).
func parse(s string) (phc, error) {
	parts := strings.Split(s, "$")
	if len(parts) == 5 {
		parts = append(parts[:2], append([]string{"v=19"}, parts[2:]...)...)
	}
	if len(parts) != 6 || parts[0] != "" || parts[1] != "argon2id" {
		return phc{}, errors.New("not an Argon2id PHC string")
	}
	if parts[2] != "v=19" {
		return phc{}, fmt.Errorf("unsupported Argon2 version %q", parts[2])
	}
	var p phc
	seen := map[string]bool{}
	for _, kv := range strings.Split(parts[3], ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || seen[k] {
			return phc{}, fmt.Errorf("bad Argon2 parameter %q", kv)
		}
		seen[k] = true
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return phc{}, fmt.Errorf("bad Argon2 parameter %q", kv)
		}
		switch k {
		case "m":
			p.memory = uint32(n)
		case "t":
			p.time = uint32(n)
		case "p":
			if n > 255 {
				return phc{}, fmt.Errorf("bad Argon2 parameter %q", kv)
			}
			p.threads = uint8(n)
		default:
			return phc{}, fmt.Errorf("unknown Argon2 parameter %q", kv)
		}
	}
	// argon2 requires m ≥ 8·p; refuse what it would panic on, and costs
	// above the bounds, which a request would pay for.
	if p.time == 0 || p.threads == 0 || p.memory < 8*uint32(p.threads) {
		return phc{}, errors.New("bad Argon2 parameters")
	}
	if p.memory > MaxMemoryKiB {
		return phc{}, fmt.Errorf("Argon2 memory cost m=%d KiB is above the %d KiB this server verifies", p.memory, MaxMemoryKiB)
	}
	if p.time > MaxTime {
		return phc{}, fmt.Errorf("Argon2 time cost t=%d is above the %d this server verifies", p.time, MaxTime)
	}
	if p.threads > MaxThreads {
		return phc{}, fmt.Errorf("Argon2 parallelism p=%d is above the %d this server verifies", p.threads, MaxThreads)
	}
	// Lengths are checked on the encoded form first: decoding a huge
	// string would already cost memory.
	if n := b64Len(parts[4]); n > MaxSaltLen {
		return phc{}, fmt.Errorf("Argon2 salt of %d bytes is longer than the %d this server verifies", n, MaxSaltLen)
	}
	if n := b64Len(parts[5]); n > MaxDigestLen {
		return phc{}, fmt.Errorf("Argon2 digest of %d bytes is longer than the %d this server verifies", n, MaxDigestLen)
	}
	var err error
	if p.salt, err = base64.RawStdEncoding.DecodeString(parts[4]); err != nil || len(p.salt) < MinSaltLen {
		return phc{}, errors.New("bad Argon2 salt")
	}
	if p.hash, err = base64.RawStdEncoding.DecodeString(parts[5]); err != nil || len(p.hash) < MinDigestLen {
		return phc{}, errors.New("bad Argon2 digest")
	}
	return p, nil
}

// b64Len is how many bytes an unpadded base64 string of this length holds.
func b64Len(s string) int { return len(s) * 3 / 4 }
