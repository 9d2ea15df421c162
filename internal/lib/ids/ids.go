// Package ids mints the identifiers and bearer secrets the server hands out.
//
// Every id and key body comes from crypto/rand: ids are 128-bit (32 hex), key
// bodies 192-bit (48 hex). Keys are high-entropy, so a single SHA-256 is a
// sufficient one-way hash for storage; a slow KDF buys nothing against
// brute force of a 192-bit secret and would cost latency on every request.
package ids

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"strings"
)

// Id and key prefixes, as the wire contract spells them.
const (
	SessionPrefix  = "ses_"
	KeyIDPrefix    = "key_"
	ProfilePrefix  = "pro_"
	EventPrefix    = "evt_"
	SubagentPrefix = "sba_"
	TurnPrefix     = "trn_"
	RewindPrefix   = "rwd_"

	ClientKeyPrefix  = "bae_"
	SessionKeyPrefix = "bae_ses_"
	AdminKeyPrefix   = "bae_admin_"

	// HashScheme prefixes stored SHA-256 key hashes so other schemes
	// (Argon2id PHC strings from a pre-provisioned file) can coexist.
	HashScheme = "sha256:"
)

func randomHex(nBytes int) string {
	b := make([]byte, nBytes)
	if _, err := rand.Read(b); err != nil {
		// crypto/rand never fails on supported platforms; continuing with a
		// zero buffer would mint guessable secrets, so stop hard.
		panic("crypto/rand failed: " + err.Error())
	}
	return hex.EncodeToString(b)
}

// New returns prefix + 32 random hex characters.
func New(prefix string) string { return prefix + randomHex(16) }

// NewSecret returns prefix + 48 random hex characters (192 bits).
func NewSecret(prefix string) string { return prefix + randomHex(24) }

// HashSecret is the stored form of a bearer secret.
func HashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return HashScheme + hex.EncodeToString(sum[:])
}

// DisplayPrefix is the non-secret prefix shown in key listings:
// the type prefix plus the first four characters of the body.
func DisplayPrefix(secret, typePrefix string) string {
	body := strings.TrimPrefix(secret, typePrefix)
	if len(body) > 4 {
		body = body[:4]
	}
	return typePrefix + body
}

// EqualHash compares two stored hashes in constant time.
func EqualHash(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}
