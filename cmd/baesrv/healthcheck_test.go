package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/bae-go/bae-go/internal/app"
)

// healthcheck asks the port BAE_ADDR names, /healthz or with --ready
// /readyz, and ignores every other setting (a bad database URL is serve's
// to report, not the probe's).
func TestHealthcheck(t *testing.T) {
	ready := http.StatusServiceUnavailable
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.URL.Path)
		if r.URL.Path == "/readyz" {
			w.WriteHeader(ready)
		}
	}))
	defer srv.Close()
	_, port, _ := strings.Cut(strings.TrimPrefix(srv.URL, "http://"), ":")
	t.Setenv("BAE_ADDR", "0.0.0.0:"+port)
	t.Setenv("BAE_DATABASE_URL", "not a url")

	var stderr bytes.Buffer
	assert.Equal(t, app.ExitOK, execute(context.Background(), []string{"healthcheck"}, io.Discard, &stderr), stderr.String())
	assert.Equal(t, app.ExitError, execute(context.Background(), []string{"healthcheck", "--ready"}, io.Discard, &stderr))
	assert.Contains(t, stderr.String(), "503")
	ready = http.StatusOK
	assert.Equal(t, app.ExitOK, execute(context.Background(), []string{"healthcheck", "--ready"}, io.Discard, &stderr))
	assert.Equal(t, []string{"/healthz", "/readyz", "/readyz"}, paths)

	srv.Close()
	assert.Equal(t, app.ExitError, execute(context.Background(), []string{"healthcheck"}, io.Discard, &stderr), "nothing listening")
}
