package adminkey

import (
	"context"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"golang.org/x/crypto/argon2"

	"github.com/bae-go/bae-go/internal/lib/ids"
	"github.com/bae-go/bae-go/store"
)

// Verifier checks admin bearer tokens against the stored admin keys.
type Verifier struct {
	Store *store.Store
	// verified caches tokens proven against an Argon2id hash (by their
	// SHA-256), so the slow KDF runs once per token per process.
	mu       sync.Mutex
	verified map[string]string // sha256(token) -> key id
}

// Verify implements api.AdminAuth.
func (v *Verifier) Verify(r *http.Request, token string) bool {
	if !strings.HasPrefix(token, ids.AdminKeyPrefix) {
		return false
	}
	ctx := r.Context()
	if _, err := v.Store.Authenticate(ctx, store.RoleAdmin, token); err == nil {
		return true
	}
	return v.verifyPHC(ctx, token)
}

func (v *Verifier) verifyPHC(ctx context.Context, token string) bool {
	keys, err := v.Store.ActiveAdminKeys(ctx)
	if err != nil {
		return false
	}
	th := ids.HashSecret(token)
	v.mu.Lock()
	cachedID, cached := v.verified[th]
	v.mu.Unlock()
	for _, k := range keys {
		if !strings.HasPrefix(k.Hash, "$argon2id$") {
			continue
		}
		if cached && k.ID == cachedID {
			return true
		}
		if ok, _ := checkPHC(k.Hash, token); ok {
			v.mu.Lock()
			if v.verified == nil {
				v.verified = map[string]string{}
			}
			v.verified[th] = k.ID
			v.mu.Unlock()
			return true
		}
	}
	return false
}

type phc struct {
	memory  uint32
	time    uint32
	threads uint8
	salt    []byte
	hash    []byte
}

func parsePHC(s string) (phc, error) {
	parts := strings.Split(s, "$")
	// "", "argon2id", "v=19", "m=..,t=..,p=..", salt, hash
	if len(parts) != 6 || parts[1] != "argon2id" || parts[2] != "v=19" {
		return phc{}, errors.New("not an argon2id v19 PHC string")
	}
	var p phc
	var threads uint32
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &p.memory, &p.time, &threads); err != nil {
		return phc{}, fmt.Errorf("bad parameters: %w", err)
	}
	p.threads = uint8(threads)
	var err error
	if p.salt, err = base64.RawStdEncoding.DecodeString(parts[4]); err != nil {
		return phc{}, fmt.Errorf("bad salt: %w", err)
	}
	if p.hash, err = base64.RawStdEncoding.DecodeString(parts[5]); err != nil || len(p.hash) == 0 {
		return phc{}, errors.New("bad hash")
	}
	if p.memory == 0 || p.time == 0 || p.threads == 0 {
		return phc{}, errors.New("bad parameters")
	}
	return p, nil
}

func validPHC(s string) bool { _, err := parsePHC(s); return err == nil }

func checkPHC(encoded, token string) (bool, error) {
	p, err := parsePHC(encoded)
	if err != nil {
		return false, err
	}
	got := argon2.IDKey([]byte(token), p.salt, p.time, p.memory, p.threads, uint32(len(p.hash)))
	return subtle.ConstantTimeCompare(got, p.hash) == 1, nil
}
