package store

import (
	"crypto/sha256"
	"sync"

	"github.com/bae-go/bae-go/internal/lib/ids"
	"github.com/bae-go/bae-go/internal/lib/keyhash"
)

// DefaultVerifiedKeyCacheSize bounds the verified-key cache.
const DefaultVerifiedKeyCacheSize = 10000

// verifiedKeys remembers which presented secrets were proven against an
// Argon2id hash, by the secret's SHA-256: a request then costs a hash, not
// an Argon2id. An entry names the key row and the hash it was proven
// against, and is only a shortcut for "this secret matches that hash": the
// row is still read on every request and must be unrevoked and carry the
// same hash, so a revocation (by any replica) ends the key at once.
type verifiedKeys struct {
	mu    sync.Mutex
	max   int
	byTok map[[sha256.Size]byte]verifiedKey
}

type verifiedKey struct {
	id   string
	hash string
}

func newVerifiedKeys(max int) *verifiedKeys {
	if max <= 0 {
		max = DefaultVerifiedKeyCacheSize
	}
	return &verifiedKeys{max: max, byTok: map[[sha256.Size]byte]verifiedKey{}}
}

func tokenDigest(secret string) [sha256.Size]byte { return sha256.Sum256([]byte(secret)) }

func (c *verifiedKeys) get(d [sha256.Size]byte) (verifiedKey, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.byTok[d]
	return v, ok
}

// put remembers a verified secret; when full it drops an arbitrary entry
// (map order), which costs that key one more Argon2id later.
func (c *verifiedKeys) put(d [sha256.Size]byte, v verifiedKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byTok[d]; !ok && len(c.byTok) >= c.max {
		for k := range c.byTok {
			delete(c.byTok, k)
			break
		}
	}
	c.byTok[d] = v
}

func (c *verifiedKeys) drop(d [sha256.Size]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.byTok, d)
}

// KeyHasher is the hasher new keys are written with.
func (s *Store) KeyHasher() keyhash.Hasher { return s.hasher }

// hashNewKey hashes a freshly minted client or admin key: long-lived keys
// people copy around get the configured hasher (Argon2id, as BAE writes).
func (s *Store) hashNewKey(secret string) (string, error) {
	return s.hasher.Hash(secret)
}

// hashSessionKey hashes a freshly minted session key with one SHA-256. A
// session key is a random 192-bit secret nobody types: a slow hash defends
// guessable secrets, not these, and Argon2id at BAE's costs would make
// every open and join pay about half a second and 64 MiB (a lever for
// anyone holding a client key). Session keys imported from BAE keep their
// Argon2id hashes and are verified (once per process) like any other.
func hashSessionKey(secret string) (string, error) {
	return keyhash.SHA256{}.Hash(secret)
}

// remember records a key this process minted (so its first use costs no
// Argon2id either) or verified.
func (s *Store) remember(secret string, k Key) {
	if keyhash.IsArgon2id(k.Hash) {
		s.verified.put(tokenDigest(secret), verifiedKey{id: k.ID, hash: k.Hash})
	}
}

// lookupPrefixes are the display prefixes a key of role may be stored
// under: ours (type prefix and four characters; for client keys the same
// as BAE's first eight characters) and, for admin keys, BAE's eight.
func lookupPrefixes(role, secret string) []string {
	switch role {
	case RoleClient:
		return []string{ids.DisplayPrefix(secret, ids.ClientKeyPrefix)}
	case RoleSession:
		return []string{ids.DisplayPrefix(secret, ids.SessionKeyPrefix)}
	case RoleAdmin:
		p := []string{ids.DisplayPrefix(secret, ids.AdminKeyPrefix)}
		if len(secret) >= baePrefixLen {
			p = append(p, secret[:baePrefixLen])
		}
		return p
	}
	return nil
}

// baePrefixLen is how many leading characters BAE stores as a key's prefix.
const baePrefixLen = 8
