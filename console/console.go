// Package console serves the operator console: server-rendered pages over
// the admin API (keys, profiles, config) and the session event log, on a
// listener of its own behind a password login. The browser holds only a
// signed login cookie; writes go through the admin API's handler in
// process, so validation, side effects and redaction stay in one place.
package console

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"go.temporal.io/sdk/client"

	"github.com/bae-go/bae-go/internal/lib/live"
	"github.com/bae-go/bae-go/store"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Options configure a console.
type Options struct {
	Store *store.Store
	Hub   *live.Hub
	// Admin is the admin API's handler, built without admin authentication
	// and reachable only through the console.
	Admin http.Handler
	Log   *slog.Logger // required

	// Password unlocks the console; Salt (the deployment id) salts the
	// cookie keys derived from it, so replicas of one deployment agree.
	Password string
	Salt     string
	// Secure marks cookies Secure (HTTPS in front of the console).
	Secure     bool
	SessionTTL time.Duration

	// TemporalUIURL links sessions and turns to the Temporal Web UI ("" =
	// no links); Temporal resolves a turn to its update's history event.
	TemporalUIURL string
	Namespace     string
	Temporal      client.Client

	Version string
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
	// RecheckEvery is how often a live stream re-checks the login while no
	// events arrive (default 10s).
	RecheckEvery time.Duration
}

// Console is the console's HTTP handler.
type Console struct {
	o       Options
	log     *slog.Logger
	auth    *authenticator
	limiter *loginLimiter
	admin   adminClient
	links   temporalLinks
	pages   map[string]*pageTemplate
	handler http.Handler
}

// New builds the console handler.
func New(o Options) (*Console, error) {
	if o.Store == nil || o.Admin == nil || o.Hub == nil {
		return nil, errors.New("console: Store, Hub and Admin are required")
	}
	if o.Password == "" {
		return nil, errors.New("console: empty password")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.SessionTTL <= 0 {
		o.SessionTTL = 12 * time.Hour
	}
	if o.RecheckEvery <= 0 {
		o.RecheckEvery = 10 * time.Second
	}
	log := o.Log
	if log == nil {
		return nil, errors.New("console: Options.Log is required")
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	c := &Console{
		o: o, log: log.With("component", "console"),
		auth:    newAuthenticator(o.Password, o.Salt, o.Secure, o.SessionTTL, o.Store, o.Now),
		limiter: newLoginLimiter(o.Now),
		admin:   adminClient{h: o.Admin},
		links:   temporalLinks{base: trimBase(o.TemporalUIURL), namespace: o.Namespace, client: o.Temporal},
		pages:   pages,
	}
	c.handler = c.routes()
	return c, nil
}

func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) { c.handler.ServeHTTP(w, r) }

// EndOtherPasswordLogins ends every login made with another password than
// this console's: run at start, it makes a password change end them all,
// for good.
func (c *Console) EndOtherPasswordLogins(ctx context.Context) (int64, error) {
	return c.auth.records.EndConsoleLoginsExcept(ctx, c.auth.recordKey)
}

func (c *Console) routes() http.Handler {
	r := chi.NewRouter()
	r.Use(middleware.Recoverer)
	r.Use(securityHeaders)
	static, _ := fs.Sub(staticFS, "static")
	r.Handle("/static/*", http.StripPrefix("/static/", staticHandler(static)))
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	r.Get("/login", c.loginPage)
	r.Post("/login", c.loginSubmit)
	r.Group(func(r chi.Router) {
		r.Use(c.requireLogin)
		r.Use(c.requireCSRF)
		r.Post("/logout", c.logout)
		r.Get("/", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/sessions", http.StatusSeeOther) })
		r.Get("/sessions", c.sessionsPage)
		r.Get("/sessions/{id}", c.sessionPage)
		r.Get("/sessions/{id}/stream", c.sessionStream)
		r.Get("/sessions/{id}/turns/{turn}/temporal", c.turnTemporal)
		r.Post("/sessions/{id}/turns/{turn}/stop", c.turnStop)
		r.Post("/sessions/{id}/turns/{turn}/rewind", c.turnRewind)
		r.Post("/sessions/{id}/fork", c.sessionFork)
		r.Get("/sessions/{id}/events", c.compactionOriginals)
		r.Get("/profiles", c.profilesPage)
		r.Get("/profiles/new", c.profileNew)
		r.Post("/profiles", c.profileCreate)
		r.Get("/profiles/{id}", c.profileEdit)
		r.Post("/profiles/{id}", c.profileReplace)
		r.Post("/profiles/{id}/delete", c.profileDelete)
		r.Get("/keys", c.keysPage)
		r.Post("/keys", c.keyCreate)
		r.Post("/keys/{id}/revoke", c.keyRevoke)
		r.Get("/approvals", c.approvalsPage)
		r.Get("/approvals/stream", c.approvalsStream)
		r.Post("/approvals/{id}/decision", c.approvalDecide)
		r.Get("/config", c.configPage)
		r.Get("/usage", c.usagePage)
		r.Post("/budgets", c.budgetSet)
		r.Post("/budgets/change", c.budgetChange)
	})
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		c.renderError(w, r, http.StatusNotFound, "Not found", "No page at "+r.URL.Path+".")
	})
	// Cross-origin POSTs (a form on another site) are refused before any
	// handler runs, the login form included; SameSite=Strict and the
	// per-login CSRF token cover older browsers.
	cop := http.NewCrossOriginProtection()
	return cop.Handler(r)
}

func staticHandler(root fs.FS) http.Handler {
	fsrv := http.FileServerFS(root)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=300")
		fsrv.ServeHTTP(w, r)
	})
}

// securityHeaders: scripts and styles only from the console itself, no
// framing, no referrer to links out (the Temporal UI), nothing cached.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'; object-src 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		if !strings.HasPrefix(r.URL.Path, "/static/") {
			h.Set("Cache-Control", "no-store")
		}
		next.ServeHTTP(w, r)
	})
}

// requireLogin sends pages without a valid login to the login form and
// answers streams with 401.
func (c *Console) requireLogin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l, err := c.auth.verify(r)
		if err != nil && !errors.Is(err, errNoLogin) {
			c.log.Error("console login check", "err", err)
			http.Error(w, "the login could not be checked; try again", http.StatusServiceUnavailable)
			return
		}
		if err != nil {
			if strings.HasSuffix(r.URL.Path, "/stream") || r.Method != http.MethodGet {
				http.Error(w, "login required", http.StatusUnauthorized)
				return
			}
			http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		next.ServeHTTP(w, r.WithContext(withLogin(r.Context(), l)))
	})
}

// maxFormBytes bounds every console form.
const maxFormBytes = 256 << 10

// requireCSRF checks the per-login token on every state-changing request.
func (c *Console) requireCSRF(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			next.ServeHTTP(w, r)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		if err := r.ParseForm(); err != nil {
			c.renderError(w, r, http.StatusBadRequest, "Bad form", "The form could not be read: "+err.Error())
			return
		}
		if !c.auth.checkCSRF(loginFrom(r.Context()), r.PostForm.Get("csrf")) {
			c.renderError(w, r, http.StatusForbidden, "Form expired", "The form's security token did not match your login. Reload the page and try again.")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	if _, err := c.auth.verify(r); err == nil {
		http.Redirect(w, r, safeNext(r.URL.Query().Get("next")), http.StatusSeeOther)
		return
	}
	c.render(w, r, http.StatusOK, "login", map[string]any{"Next": safeNext(r.URL.Query().Get("next"))})
}

func (c *Console) loginSubmit(w http.ResponseWriter, r *http.Request) {
	next := safeNext(r.URL.Query().Get("next"))
	if ok, wait := c.limiter.allow(remoteAddr(r)); !ok {
		secs := int(wait/time.Second) + 1
		w.Header().Set("Retry-After", fmt.Sprint(secs))
		c.render(w, r, http.StatusTooManyRequests, "login", map[string]any{
			"Next": next, "Error": fmt.Sprintf("Too many login attempts from your address. Try again in %d seconds.", secs),
		})
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	if err := r.ParseForm(); err != nil {
		c.render(w, r, http.StatusBadRequest, "login", map[string]any{"Next": next, "Error": "The form could not be read."})
		return
	}
	if r.PostForm.Has("next") {
		next = safeNext(r.PostForm.Get("next"))
	}
	if !c.auth.checkPassword(r.PostForm.Get("password")) {
		c.log.Warn("console login failed", "remote", remoteAddr(r))
		c.render(w, r, http.StatusUnauthorized, "login", map[string]any{"Next": next, "Error": "Wrong password."})
		return
	}
	if err := c.auth.issue(r.Context(), w); err != nil {
		c.internal(w, r, err)
		return
	}
	c.log.Info("console login", "remote", remoteAddr(r))
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	if err := c.auth.end(r.Context(), w, loginFrom(r.Context())); err != nil {
		c.internal(w, r, err)
		return
	}
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// safeNext keeps post-login redirects on the console.
func safeNext(next string) string {
	if next == "" || !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return "/sessions"
	}
	return next
}

func (c *Console) internal(w http.ResponseWriter, r *http.Request, err error) {
	c.log.Error("console error", "path", r.URL.Path, "err", err)
	c.renderError(w, r, http.StatusInternalServerError, "Something went wrong", "The server logged the cause.")
}

func (c *Console) renderError(w http.ResponseWriter, r *http.Request, status int, title, detail string) {
	c.render(w, r, status, "error", map[string]any{"Title": title, "Detail": detail})
}
