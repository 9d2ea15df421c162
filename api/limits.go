package api

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// DefaultBodyReadTimeout bounds how long a request body may take to arrive
// when Deps.BodyReadTimeout is unset.
const DefaultBodyReadTimeout = 60 * time.Second

func requestTimeout(detail string) *Problem {
	return problem(http.StatusRequestTimeout, "request_timeout", detail)
}

// readBody reads the whole request body, bounded in size by MaxBodyBytes
// and in time by the bodyDeadline middleware.
func (c *clientAPI) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *Problem) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, c.maxBody()))
	if err == nil {
		return body, nil
	}
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return nil, tooLarge(fmt.Sprintf("request body exceeds %d bytes", mbe.Limit))
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, requestTimeout(fmt.Sprintf("request body not received within %s", c.bodyReadTimeout()))
	}
	return nil, badRequest("could not read request body")
}

// bodyDeadline bounds how long a request body may take to arrive, so a
// client trickling bytes cannot hold a connection and a handler forever.
// Unlike http.Server.ReadTimeout it leaves the headers to
// ReadHeaderTimeout and the admin port alone. It does not cut long NDJSON
// responses short: once the body hits EOF, net/http starts the background
// read that watches for the client going away, and that clears the
// connection's read deadline (TestBodyDeadlineSparesRunningHandlers and
// TestSlowBodyIsCutOff pin this).
func bodyDeadline(d time.Duration) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// A bodiless request's background read is already running; a
			// deadline set now would fire in it and cancel the request.
			if r.Body != nil && r.Body != http.NoBody {
				_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(d))
			}
			next.ServeHTTP(w, r)
		})
	}
}
