package api

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBodyDeadlineSparesRunningHandlers: the body deadline must not cancel
// a handler that outlives it, with or without a request body.
func TestBodyDeadlineSparesRunningHandlers(t *testing.T) {
	const d = 100 * time.Millisecond
	srv := httptest.NewServer(bodyDeadline(d)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		require.NoError(t, err)
		w.WriteHeader(http.StatusOK)
		select {
		case <-r.Context().Done():
			_, _ = io.WriteString(w, "cancelled")
		case <-time.After(5 * d): // outlive the deadline: the property under test
			_, _ = io.WriteString(w, "survived")
		}
	})))
	defer srv.Close()

	for _, body := range []string{"", `{"a":1}`} {
		req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(body))
		require.NoError(t, err)
		req.Close = true // a fresh connection each, so the cases cannot interfere
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		assert.Equal(t, "survived", string(got), "body %q", body)
	}
}
