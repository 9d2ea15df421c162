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
// It is not http.Server.ReadTimeout: the deadline is lifted as soon as the
// body has been read, because the server's background read (which watches
// for a client going away during a long NDJSON response) would otherwise
// hit it and cancel the request mid-stream.
func bodyDeadline(d time.Duration) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// A bodiless request's background read starts at once; a
			// deadline would cancel it once d passed, so none is set.
			if r.Body == nil || r.Body == http.NoBody {
				next.ServeHTTP(w, r)
				return
			}
			rc := http.NewResponseController(w)
			if err := rc.SetReadDeadline(time.Now().Add(d)); err == nil {
				r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
			}
			next.ServeHTTP(w, r)
		})
	}
}

// deadlineBody clears the read deadline once the body reaches EOF.
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) && !b.done {
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}
