package api

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAuthFailuresAreRateLimited(t *testing.T) {
	l := newAuthLimiter(3, time.Minute)
	now := time.Unix(1000, 0)
	l.now = func() time.Time { return now }
	status := http.StatusUnauthorized
	h := limitAuthFailures(l)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(status) }))
	call := func(addr string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "/api/v1/sessions/x/events", nil)
		req.RemoteAddr = addr
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	for i := 0; i < 3; i++ {
		assert.Equal(t, 401, call("10.0.0.1:5000").Code)
	}
	rec := call("10.0.0.1:5001")
	require.Equal(t, http.StatusTooManyRequests, rec.Code)
	assert.Contains(t, rec.Body.String(), `"type":"rate_limited"`)
	assert.Equal(t, "61", rec.Header().Get("Retry-After"))
	// Other clients are unaffected; the limited one is refused even with a good key.
	status = http.StatusOK
	assert.Equal(t, 200, call("10.0.0.2:1").Code)
	assert.Equal(t, 429, call("10.0.0.1:1").Code)
	// The window passes.
	now = now.Add(time.Minute)
	assert.Equal(t, 200, call("10.0.0.1:1").Code)
	// Health checks are never limited.
	req := httptest.NewRequest(http.MethodGet, "/healthz", nil)
	req.RemoteAddr = "10.0.0.3:1"
	l.failures["10.0.0.3"] = &failWindow{start: now, count: 99}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	assert.Equal(t, 200, rec.Code)
}
