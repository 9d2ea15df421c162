package api

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/config"
)

func TestAuthFailuresAreRateLimited(t *testing.T) {
	l := newAuthLimiter(3, time.Minute)
	now := time.Unix(1000, 0)
	l.now = func() time.Time { return now }
	status := http.StatusUnauthorized
	h := limitAuthFailures(l, nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(status) }))
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

type tokenAuth string

func (a tokenAuth) Verify(_ *http.Request, token string) bool { return token == string(a) }

// Failures on one port must not lock anyone out of the other.
func TestAuthLimitersArePerPort(t *testing.T) {
	d := &Deps{Log: slog.New(slog.DiscardHandler), AuthFailures: 2}
	client := ClientRouter(d)
	admin := AdminRouter(d, tokenAuth("good"), nil)
	do := func(h http.Handler, path, token string) int {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.RemoteAddr = "10.0.0.1:4000"
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	const clientPath, adminPath = "/api/v1/sessions/ses_x/events", "/admin/v1/sandbox-status"
	for i := 0; i < 2; i++ {
		require.Equal(t, 401, do(client, clientPath, ""))
	}
	require.Equal(t, 429, do(client, clientPath, ""), "the client port is limited")
	assert.Equal(t, 200, do(admin, adminPath, "good"), "a valid admin key still works from the same address")

	for i := 0; i < 2; i++ {
		require.Equal(t, 401, do(admin, adminPath, "bad"))
	}
	assert.Equal(t, 429, do(admin, adminPath, "good"), "the admin port is limited on its own count")
}

func TestClientAddrHonoursTrustedProxies(t *testing.T) {
	trusted, err := config.ParseTrustedProxies("10.0.0.0/8, 192.168.1.7")
	require.NoError(t, err)
	addr := func(remote string, xff ...string) string {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.RemoteAddr = remote
		for _, v := range xff {
			req.Header.Add("X-Forwarded-For", v)
		}
		return clientAddr(req, trusted)
	}
	// Not from a trusted proxy: the header is the client's own claim.
	assert.Equal(t, "203.0.113.9", addr("203.0.113.9:1", "1.2.3.4"))
	// From a proxy: the rightmost hop that is not a trusted proxy.
	assert.Equal(t, "1.2.3.4", addr("10.1.1.1:1", "1.2.3.4"))
	assert.Equal(t, "1.2.3.4", addr("10.1.1.1:1", "9.9.9.9, 1.2.3.4"), "a client cannot pick its address by prepending")
	assert.Equal(t, "1.2.3.4", addr("10.1.1.1:1", "9.9.9.9, 1.2.3.4, 10.2.2.2"), "chained proxies are skipped")
	assert.Equal(t, "1.2.3.4", addr("192.168.1.7:1", "9.9.9.9", "1.2.3.4"), "several header lines form one list")
	assert.Equal(t, "10.1.1.1", addr("10.1.1.1:1"), "no header: the proxy itself")
	assert.Equal(t, "10.1.1.1", addr("10.1.1.1:1", "garbage"), "an unparsable hop stops the walk at the proxy")
	assert.Equal(t, "10.2.2.2", addr("10.1.1.1:1", "10.2.2.2"), "only proxies: the first one")
	assert.Equal(t, "2001:db8::1", addr("10.1.1.1:1", "[2001:db8::1]:443"))
	// Without trusted proxies the header is ignored.
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.RemoteAddr = "10.1.1.1:1"
	req.Header.Set("X-Forwarded-For", "1.2.3.4")
	assert.Equal(t, "10.1.1.1", clientAddr(req, nil))

	for _, bad := range []string{"10.0.0.0/33", "not-an-ip", "10.0.0.1/8/1"} {
		_, err := config.ParseTrustedProxies(bad)
		assert.Error(t, err, bad)
	}
}

// Behind a proxy, one client's failures lock out only that client.
func TestForwardedClientsAreLimitedSeparately(t *testing.T) {
	trusted, err := config.ParseTrustedProxies("10.0.0.0/8")
	require.NoError(t, err)
	d := &Deps{Log: slog.New(slog.DiscardHandler), AuthFailures: 2, TrustedProxies: trusted}
	client := ClientRouter(d)
	do := func(xff string) int {
		req := httptest.NewRequest(http.MethodGet, "/api/v1/sessions/ses_x/events", nil)
		req.RemoteAddr = "10.0.0.2:4000"
		req.Header.Set("X-Forwarded-For", xff)
		rec := httptest.NewRecorder()
		client.ServeHTTP(rec, req)
		return rec.Code
	}
	for i := 0; i < 2; i++ {
		require.Equal(t, 401, do("198.51.100.1"))
	}
	assert.Equal(t, 429, do("198.51.100.1"))
	assert.Equal(t, 401, do("198.51.100.2"), "another client behind the same proxy is not limited")
}
