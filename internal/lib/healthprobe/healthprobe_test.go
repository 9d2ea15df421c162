package healthprobe

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestURLProbesWildcardsOnLoopback(t *testing.T) {
	for addr, want := range map[string]string{
		"0.0.0.0:8080":   "http://127.0.0.1:8080/healthz",
		":9090":          "http://127.0.0.1:9090/healthz",
		"[::]:8080":      "http://[::1]:8080/healthz",
		"10.0.0.5:8080":  "http://10.0.0.5:8080/healthz",
		"127.0.0.1:8081": "http://127.0.0.1:8081/healthz",
	} {
		got, err := URL(addr, "/healthz")
		require.NoError(t, err, addr)
		assert.Equal(t, want, got, addr)
	}
	_, err := URL("no-port", "/healthz")
	assert.Error(t, err)
}

func TestCheckWantsA2xx(t *testing.T) {
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(status) }))
	defer srv.Close()
	require.NoError(t, Check(context.Background(), srv.URL))
	status = http.StatusServiceUnavailable
	assert.ErrorContains(t, Check(context.Background(), srv.URL), "503")
	srv.Close()
	assert.Error(t, Check(context.Background(), srv.URL), "nothing listening")
}
