package console

import (
	"bytes"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

type pageTemplate struct{ t *template.Template }

var pageNames = []string{"login", "error", "sessions", "session", "profiles", "profile", "keys", "config", "usage", "approvals"}

var funcs = template.FuncMap{
	"short": func(id string) string {
		if len(id) <= 12 {
			return id
		}
		return id[:12] + "…"
	},
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"clock": func(t time.Time) string { return t.UTC().Format("15:04:05.000") },
	"join":  func(s []string) string { return strings.Join(s, ", ") },
	"has":   func(s []string, v string) bool { return slices.Contains(s, v) },
	"lines": func(s []string) string { return strings.Join(s, "\n") },
	"ts": func(s string) string { // admin API timestamps, shortened
		if t, err := time.Parse("2006-01-02T15:04:05.000Z", s); err == nil {
			return t.UTC().Format("2006-01-02 15:04Z")
		}
		return s
	},
	"deref": func(s *string) string {
		if s == nil {
			return ""
		}
		return *s
	},
	"seq": func(n int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = i
		}
		return out
	},
	"inc": func(i int) int { return i + 1 },
	// num shows an amount (tokens, USD) without an exponent.
	"num": func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) },
	"at": func(s []string, i int) string {
		if i < len(s) {
			return s[i]
		}
		return ""
	},
}

func parsePages() (map[string]*pageTemplate, error) {
	out := map[string]*pageTemplate{}
	for _, name := range pageNames {
		t, err := template.New(name).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/partials.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("console templates: %w", err)
		}
		out[name] = &pageTemplate{t: t}
	}
	return out, nil
}

// render draws page with data plus what every page needs: the CSRF token
// of the current login and the active tab.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, page string, data map[string]any) {
	if data == nil {
		data = map[string]any{}
	}
	data["Page"] = page
	data["Version"] = c.o.Version
	if l := loginFrom(r.Context()); l.ID != "" {
		data["LoggedIn"] = true
		data["CSRF"] = c.auth.csrfToken(l)
	}
	var buf bytes.Buffer
	if err := c.pages[page].t.ExecuteTemplate(&buf, "layout", data); err != nil {
		c.log.Error("console render", "page", page, "err", err)
		http.Error(w, "render error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fragment renders one named template of the session page to a string.
func (c *Console) fragment(name string, data any) (string, error) {
	return c.pageFragment("session", name, data)
}

// pageFragment renders one named template of page to a string.
func (c *Console) pageFragment(page, name string, data any) (string, error) {
	var buf bytes.Buffer
	if err := c.pages[page].t.ExecuteTemplate(&buf, name, data); err != nil {
		return "", err
	}
	return buf.String(), nil
}
