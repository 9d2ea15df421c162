package adminkey

import (
	"net/http"
	"strings"

	"github.com/bae-go/bae-go/internal/lib/ids"
	"github.com/bae-go/bae-go/store"
)

// Verifier checks admin bearer tokens against the stored admin keys.
type Verifier struct {
	Store *store.Store
}

// Verify implements api.AdminAuth. Argon2id hashes (a BAE or baectl hash
// file) cost one Argon2id per token per process: the store caches what it
// verified and re-reads the key row on every request.
func (v *Verifier) Verify(r *http.Request, token string) bool {
	if !strings.HasPrefix(token, ids.AdminKeyPrefix) {
		return false
	}
	_, err := v.Store.Authenticate(r.Context(), store.RoleAdmin, token)
	return err == nil
}
