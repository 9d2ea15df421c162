package trigger

import (
	"embed"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed webapp
var webappFiles embed.FS

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"isURL": func(s *string) bool {
		return s != nil && (strings.HasPrefix(*s, "https://") || strings.HasPrefix(*s, "http://"))
	},
	"title": func(a *Agent) string {
		if a.DisplayName != nil && *a.DisplayName != "" {
			return *a.DisplayName
		}
		return a.Name
	},
}).ParseFS(webappFiles, "webapp/*.html"))

// newWebApp is the built-in web app: a card per agent at /, a chat page per
// agent at /agents/{name}. It keeps nothing: a conversation lives in the
// page, the token (when the launcher asks for one) in the page's memory.
func newWebApp(s *Server) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(mustSub(webappFiles, "webapp"))))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		renderPage(w, "home.html", s.agents)
	})
	mux.HandleFunc("GET /agents/{name}", func(w http.ResponseWriter, r *http.Request) {
		a := s.byName[r.PathValue("name")]
		if a == nil {
			http.NotFound(w, r)
			return
		}
		renderPage(w, "agent.html", struct {
			*Agent
			Field string
		}{a, a.chatInputField()})
	})
	return mux
}

func renderPage(w http.ResponseWriter, name string, data any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' http: https: data:; style-src 'self'")
	if err := pages.ExecuteTemplate(w, name, data); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

func mustSub(f embed.FS, dir string) fs.FS {
	s, err := fs.Sub(f, dir)
	if err != nil {
		panic(err) // the directory is embedded above
	}
	return s
}
