package api

import (
	"net/http"
	"strings"
)

// bearer extracts the token of "Authorization: Bearer <token>" (or
// "bearer"). Missing, other schemes and empty tokens are 401s.
func bearer(r *http.Request) (string, *Problem) {
	raw := r.Header.Get("Authorization")
	if raw == "" {
		return "", unauthorized("missing Authorization header")
	}
	var token string
	switch {
	case strings.HasPrefix(raw, "Bearer "):
		token = raw[len("Bearer "):]
	case strings.HasPrefix(raw, "bearer "):
		token = raw[len("bearer "):]
	default:
		return "", unauthorized("Authorization header must be a Bearer token")
	}
	if strings.TrimSpace(token) == "" {
		return "", unauthorized("empty bearer token")
	}
	return token, nil
}
