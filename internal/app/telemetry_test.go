package app

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/config"
	"github.com/bae-go/bae-go/internal/telemetry"
)

// TestPprofOnlyWhenAskedFor: BAE_PPROF serves the goroutine profile beside
// /metrics on the admin port; without it the path falls through to the
// admin API, and the command line is never served.
func TestPprofOnlyWhenAskedFor(t *testing.T) {
	tel, err := telemetry.New(context.Background(), config.Telemetry{}, telemetry.Options{Log: slog.New(slog.DiscardHandler), Prometheus: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	get := func(h http.Handler, path string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		body, _ := io.ReadAll(rec.Result().Body)
		return rec.Code, string(body)
	}
	for _, on := range []bool{false, true} {
		admin := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "admin API", http.StatusUnauthorized)
		})}
		srv, ln, err := serveMetrics(config.MetricsOnAdmin, on, tel, admin, slog.New(slog.DiscardHandler))
		require.NoError(t, err)
		require.Nil(t, srv)
		require.Nil(t, ln)
		code, body := get(admin.Handler, "/debug/pprof/goroutine?debug=2")
		if !on {
			assert.Equal(t, http.StatusUnauthorized, code, "off by default: the admin API answers")
			continue
		}
		require.Equal(t, http.StatusOK, code)
		assert.Contains(t, body, "created by", "every goroutine with the site that started it")
		code, _ = get(admin.Handler, "/debug/pprof/cmdline")
		assert.Equal(t, http.StatusNotFound, code, "the command line is not served")
		code, _ = get(admin.Handler, "/metrics")
		assert.Equal(t, http.StatusOK, code)
	}
}
