// Package httpstatus records the status an HTTP handler answered with, for
// middleware that acts on it afterwards (spans, the auth-failure limiter).
package httpstatus

import "net/http"

// Writer records the response status. Flush and Unwrap keep streaming
// and http.ResponseController (read deadlines) working through it.
type Writer struct {
	http.ResponseWriter
	// Status is the status sent, or 0 before anything was.
	Status int
}

// Wrap records the status written to w.
func Wrap(w http.ResponseWriter) *Writer { return &Writer{ResponseWriter: w} }

func (s *Writer) WriteHeader(code int) {
	if s.Status == 0 {
		s.Status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *Writer) Write(b []byte) (int, error) {
	if s.Status == 0 {
		s.Status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *Writer) Flush() {
	if s.Status == 0 {
		s.Status = http.StatusOK
	}
	_ = http.NewResponseController(s.ResponseWriter).Flush()
}

func (s *Writer) Unwrap() http.ResponseWriter { return s.ResponseWriter }
