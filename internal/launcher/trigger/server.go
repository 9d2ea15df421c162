package trigger

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"go.temporal.io/sdk/client"

	"github.com/bae-go/bae-go/internal/launcher"
)

// maxBody bounds a trigger's request body.
const maxBody = 1 << 20

// triggerStartWithin: the run's activity is on this process's own queue, so
// a worker that does not pick it up this fast is not coming.
const triggerStartWithin = 30 * time.Second

// Server serves baeapi's routes.
type Server struct {
	agents    []*Agent
	byName    map[string]*Agent
	token     string
	client    client.Client
	taskQueue string
	heartbeat time.Duration
	lookup    func(string) (string, bool)
	log       *slog.Logger
	webapp    http.Handler // nil: no UI at /

	mu      sync.Mutex
	pending map[string]*invocation
	// children counts the triggers' children from spawn until reaped, so
	// that shutdown returns only once the ones it killed are gone.
	children sync.WaitGroup
}

// invocation is a trigger's prepared child, waiting in this process for the
// RunAgent activity that the trigger's Launch workflow schedules here.
type invocation struct {
	spec    launcher.Spec
	ctx     context.Context // the caller's request: gone, and the child is killed
	lines   chan launcher.Line
	started chan error
	done    chan launcher.Exit
}

// Prepare is the RunAgent activity's lookup for triggers.
func (s *Server) Prepare(_ context.Context, in launcher.LaunchInput) (launcher.Prepared, error) {
	s.mu.Lock()
	inv := s.pending[in.Handle]
	s.mu.Unlock()
	if inv == nil {
		return launcher.Prepared{}, &launcher.SkipError{Reason: "the request that triggered this run is gone"}
	}
	s.children.Add(1) // RunAgent always calls Done once Prepare succeeded
	return launcher.Prepared{
		Spec: inv.spec,
		Ctx:  inv.ctx,
		Emit: func(l launcher.Line) {
			select {
			case inv.lines <- l:
			case <-inv.ctx.Done():
			}
		},
		Started: func(err error) { inv.started <- err },
		Done: func(e launcher.Exit, _ error) {
			inv.done <- e
			s.children.Done()
		},
	}, nil
}

// Handler is baeapi's router.
func (s *Server) Handler() http.Handler {
	r := chi.NewRouter()
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	r.Get("/_launcher/agents", s.listAgents)
	r.Get("/_launcher/agents/{name}", s.getAgent)
	r.With(sameOriginOnly, s.requireToken).Post("/agents/{name}/trigger", s.trigger)
	if s.webapp != nil {
		r.NotFound(s.webapp.ServeHTTP)
	}
	return r
}

// requireToken checks the bearer token on /agents/* when one is set, in
// constant time.
func (s *Server) requireToken(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.token == "" {
			next.ServeHTTP(w, r)
			return
		}
		raw := r.Header.Get("Authorization")
		if raw == "" {
			problem(w, http.StatusUnauthorized, "missing Authorization header")
			return
		}
		tok, ok := strings.CutPrefix(raw, "Bearer ")
		if !ok {
			tok, ok = strings.CutPrefix(raw, "bearer ")
		}
		if !ok {
			problem(w, http.StatusUnauthorized, "Authorization header must be a Bearer token")
			return
		}
		if tok == "" {
			problem(w, http.StatusUnauthorized, "empty bearer token")
			return
		}
		if subtle.ConstantTimeCompare([]byte(tok), []byte(s.token)) != 1 {
			problem(w, http.StatusUnauthorized, "invalid bearer token")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// sameOriginOnly refuses a trigger a web page of another origin makes a
// browser send (a form or a no-cors fetch needs no token when none is set,
// and sends text/plain or a form body): a request carrying a browser's
// Origin or Sec-Fetch-Site must come from baeapi's own pages (the web app)
// and say Content-Type: application/json. A client that is no browser (curl,
// an SDK) sends neither header and is served as BAE serves it, whatever its
// Content-Type (BAE's own tests post with curl --data).
func sameOriginOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin, hasOrigin := r.Header["Origin"]
		site := r.Header.Get("Sec-Fetch-Site")
		if !hasOrigin && site == "" {
			next.ServeHTTP(w, r)
			return
		}
		if site != "" && site != "same-origin" && site != "none" {
			problem(w, http.StatusForbidden, "cross-site request refused (Sec-Fetch-Site: "+site+"): trigger from baeapi's own pages, or from a client that is not a browser")
			return
		}
		if hasOrigin && !sameOrigin(origin[0], r) {
			problem(w, http.StatusForbidden, fmt.Sprintf("cross-site request refused: Origin %q is not this server", origin[0]))
			return
		}
		if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
			problem(w, http.StatusUnsupportedMediaType, "a trigger from a browser must have Content-Type: application/json")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// sameOrigin reports whether origin (an Origin header) names the host the
// request was sent to: its Host, or the X-Forwarded-Host a reverse proxy
// set (a page cannot set that header on a cross-site request without a
// CORS preflight, which baeapi never answers).
func sameOrigin(origin string, r *http.Request) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return false // "null" included: a sandboxed or opaque origin
	}
	hosts := []string{r.Host}
	if fwd := r.Header.Get("X-Forwarded-Host"); fwd != "" {
		first, _, _ := strings.Cut(fwd, ",")
		hosts = append(hosts, strings.TrimSpace(first))
	}
	for _, h := range hosts {
		if strings.EqualFold(withPort(u.Host, u.Scheme), withPort(h, u.Scheme)) {
			return true
		}
	}
	return false
}

// withPort is host with the scheme's default port when it names none.
func withPort(host, scheme string) string {
	if _, _, err := net.SplitHostPort(host); err == nil {
		return host
	}
	if scheme == "https" {
		return net.JoinHostPort(strings.Trim(host, "[]"), "443")
	}
	return net.JoinHostPort(strings.Trim(host, "[]"), "80")
}

// agentView is an agent as the introspection routes show it: never its
// command, args, working directory, env or templates.
type agentView struct {
	Name           string         `json:"name"`
	DisplayName    *string        `json:"display_name"`
	Description    *string        `json:"description"`
	Icon           *string        `json:"icon"`
	RequestSchema  map[string]any `json:"request_schema"`
	ChatInputField string         `json:"chat_input_field"`
	Prompts        []Prompt       `json:"prompts"`
}

func view(a *Agent) agentView {
	p := a.Prompts
	if p == nil {
		p = []Prompt{}
	}
	return agentView{Name: a.Name, DisplayName: a.DisplayName, Description: a.Description, Icon: a.Icon,
		RequestSchema: a.RequestSchema, ChatInputField: a.chatInputField(), Prompts: p}
}

func (s *Server) listAgents(w http.ResponseWriter, _ *http.Request) {
	out := make([]agentView, 0, len(s.agents))
	for _, a := range s.agents {
		out = append(out, view(a))
	}
	writeJSON(w, out)
}

func (s *Server) getAgent(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "name")
	a := s.byName[name]
	if a == nil {
		problem(w, http.StatusNotFound, fmt.Sprintf("no agent named %q", name))
		return
	}
	writeJSON(w, view(a))
}

func (s *Server) trigger(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "name")
	a := s.byName[name]
	if a == nil {
		problem(w, http.StatusNotFound, fmt.Sprintf("no agent named %q", name))
		return
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		problem(w, http.StatusBadRequest, "request body: "+err.Error())
		return
	}
	body, err := a.parseBody(raw)
	if err != nil {
		problem(w, http.StatusBadRequest, err.Error())
		return
	}
	spec, err := a.spec(body, s.lookup)
	if err != nil {
		s.log.Error("trigger not spawned", "agent", name, "err", err)
		problem(w, http.StatusInternalServerError, err.Error())
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	handle := newHandle()
	inv := &invocation{spec: spec, ctx: ctx, lines: make(chan launcher.Line, 256), started: make(chan error, 1), done: make(chan launcher.Exit, 1)}
	s.mu.Lock()
	s.pending[handle] = inv
	s.mu.Unlock()
	defer func() { s.mu.Lock(); delete(s.pending, handle); s.mu.Unlock() }()

	run, err := s.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:        "baeapi-" + name + "-" + handle,
		TaskQueue: s.taskQueue,
	}, launcher.WorkflowName, launcher.LaunchInput{
		Agent: name, Kind: launcher.KindTrigger, TaskQueue: s.taskQueue, Handle: handle,
		StartWithin: triggerStartWithin, HeartbeatTimeout: s.heartbeat,
	})
	if err != nil {
		problem(w, http.StatusInternalServerError, "start run: "+err.Error())
		return
	}
	ended := make(chan launcher.LaunchResult, 1)
	go func() {
		var res launcher.LaunchResult
		if err := run.Get(ctx, &res); err != nil {
			res = launcher.LaunchResult{Outcome: launcher.OutcomeLost, Detail: err.Error()}
		}
		ended <- res
	}()
	select {
	case err := <-inv.started:
		if err != nil {
			problem(w, http.StatusInternalServerError, fmt.Sprintf("failed to start agent %q: %v", name, err))
			return
		}
	case res := <-ended:
		problem(w, http.StatusInternalServerError, fmt.Sprintf("agent %q did not run: %s %s", name, res.Outcome, res.Detail))
		return
	case <-ctx.Done():
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	flush := func() {
		if flusher != nil {
			flusher.Flush()
		}
	}
	flush()
	write := func(l launcher.Line) {
		_, _ = io.WriteString(w, l.Text+"\n")
	}
	for {
		select {
		case l := <-inv.lines:
			write(l)
			flush()
		case e := <-inv.done:
			for drained := false; !drained; {
				select {
				case l := <-inv.lines:
					write(l)
				default:
					drained = true
				}
			}
			b, _ := json.Marshal(map[string]*int{"exit_code": e.ExitCode})
			_, _ = w.Write(append(b, '\n'))
			flush()
			return
		case <-ctx.Done():
			return
		}
	}
}

// problem writes an RFC 7807 body with BAE's launcher slugs.
func problem(w http.ResponseWriter, status int, detail string) {
	slug := map[int]string{400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found", 415: "unsupported_media_type"}[status]
	if slug == "" {
		slug = "internal"
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": slug, "title": http.StatusText(status), "status": status, "detail": detail})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func newHandle() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
