package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/bae-go/bae-go/api/wire"
	"github.com/bae-go/bae-go/cmdtemplate"
	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/store"
	"github.com/bae-go/bae-go/tooldecl"
	"github.com/bae-go/bae-go/workflows"
)

// clientAPI serves the client port.
type clientAPI struct {
	*Deps
	// opens bounds the session opens and joins doing their work at once.
	opens *admission
	// streams counts and re-checks the live subscribe streams.
	streams *streamWatch
	// deltaWriters writes each session's deltas to its opted-in streams.
	deltaWriters *deltaWriters
}

// ClientRouter builds the client-port handler.
func ClientRouter(d *Deps) http.Handler {
	c := &clientAPI{Deps: d, opens: newAdmission(d.MaxConcurrentOpens, d.AdmissionWait, d.Log), deltaWriters: newDeltaWriters()}
	c.streams = newStreamWatch(c)
	r := chi.NewRouter()
	r.Use(middleware.Recoverer)
	r.Use(requestLog(d.Log))
	r.Use(limitAuthFailures(d.newAuthLimiter("client"), d.TrustedProxies))
	r.Use(bodyDeadline(d.bodyReadTimeout()))
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	r.Get("/readyz", d.readyz)
	r.Get("/api/v1/meta", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"version": d.Version, "api_versions": []string{"v1"}})
	})
	r.Post("/api/v1/sessions", handle(c.createSession))
	r.Route("/api/v1/sessions/{id}", func(r chi.Router) {
		r.Post("/join", handle(c.joinSession))
		r.Get("/participants", handle(c.participants))
		r.Get("/events", handle(c.events))
		r.Delete("/", handle(c.closeSession))
		r.Post("/rpc", c.rpc)
	})
	unroutedProblems(r)
	return r
}

// clientToolDef is a declared client-side (or Auto-mode sandbox) tool.
type clientToolDef = wire.ToolDecl

type subagentToolDef = tooldecl.SubagentTool

// openBody is the body of POST /sessions and POST /sessions/{id}/join.
type openBody struct {
	ClientVersion *string           `json:"client_version"`
	Tools         []clientToolDef   `json:"tools"`
	SandboxTools  []clientToolDef   `json:"sandbox_tools"`
	SubagentTools []subagentToolDef `json:"subagent_tools"`
}

func (b openBody) names() (tools, sandbox, subagent []string) {
	tools, sandbox, subagent = []string{}, []string{}, []string{}
	for _, t := range b.Tools {
		tools = append(tools, t.Name)
	}
	for _, t := range b.SandboxTools {
		sandbox = append(sandbox, t.Name)
	}
	for _, t := range b.SubagentTools {
		subagent = append(subagent, t.Name)
	}
	return
}

func (b openBody) payload() events.Declarations {
	tools, sandbox, subagent := b.names()
	return events.Declarations{ClientVersion: b.ClientVersion, Tools: tools, SandboxTools: sandbox, SubagentTools: subagent}
}

func (b openBody) decl(clientKeyID string) store.ClientDecl {
	m := func(v any) json.RawMessage { r, _ := json.Marshal(v); return r }
	tools := b.Tools
	if tools == nil {
		tools = []clientToolDef{}
	}
	sb := b.SandboxTools
	if sb == nil {
		sb = []clientToolDef{}
	}
	sub := b.SubagentTools
	if sub == nil {
		sub = []subagentToolDef{}
	}
	return store.ClientDecl{ClientKeyID: clientKeyID, ClientVersion: b.ClientVersion, Tools: m(tools), SandboxTools: m(sb), SubagentTools: m(sub)}
}

// decodeBody reads a JSON object body bounded by readBody's limits. An empty
// body decodes as {}.
func (c *clientAPI) decodeBody(w http.ResponseWriter, r *http.Request, into any) *Problem {
	body, p := c.readBody(w, r)
	if p != nil {
		return p
	}
	if strings.TrimSpace(string(body)) == "" {
		body = []byte("{}")
	}
	if err := json.Unmarshal(body, into); err != nil {
		return badRequest("invalid JSON body: " + err.Error())
	}
	return nil
}

func (c *clientAPI) authClient(r *http.Request) (store.Key, *Problem) {
	token, p := bearer(r)
	if p != nil {
		return store.Key{}, p
	}
	k, err := c.Store.Authenticate(r.Context(), store.RoleClient, token)
	if errors.Is(err, store.ErrNotFound) {
		return store.Key{}, unauthorized("invalid or revoked client key")
	}
	if err != nil {
		return store.Key{}, internalError(c.Log, err)
	}
	return k, nil
}

// authSession authenticates the session key bound to the path's session.
func (c *clientAPI) authSession(r *http.Request) (store.Session, store.Key, *Problem) {
	a, p := c.authSessionFull(r)
	return a.Session, a.Key, p
}

// authSessionFull is authSession with what the same query also read: the
// acting client's declarations and the log's head.
func (c *clientAPI) authSessionFull(r *http.Request) (store.SessionAuth, *Problem) {
	a, _, p := c.authSessionReads(r, false, false)
	return a, p
}

// authSessionReads is authSessionFull that, with send, also reads in the
// same round trip what a send is checked against before it is stored, the
// turn gate only with gate (nil without send or on failure).
func (c *clientAPI) authSessionReads(r *http.Request, send, gate bool) (store.SessionAuth, *store.SendReads, *Problem) {
	token, p := bearer(r)
	if p != nil {
		return store.SessionAuth{}, nil, p
	}
	id := chi.URLParam(r, "id")
	var (
		a     store.SessionAuth
		reads *store.SendReads
		err   error
	)
	if send {
		a, reads, err = c.Store.AuthenticateSessionForSend(r.Context(), token, id, gate)
	} else {
		a, err = c.Store.AuthenticateSession(r.Context(), token, id)
	}
	if errors.Is(err, store.ErrNotFound) {
		return store.SessionAuth{}, nil, unauthorized("invalid or revoked session key")
	}
	if err != nil {
		return store.SessionAuth{}, nil, internalError(c.Log, err)
	}
	if a.Session.ID == "" {
		return store.SessionAuth{}, nil, notFound("no session " + id)
	}
	return a, reads, nil
}

// allowedTools is the profile's client-tool allowlist as a set.
func allowedTools(profile store.Profile) map[string]bool {
	allowed := make(map[string]bool, len(profile.AllowedTools))
	for _, n := range profile.AllowedTools {
		allowed[n] = true
	}
	return allowed
}

// validateDecl runs the declaration checks shared by open and join, in the
// order the contract gives: reserved names, the allowlist, subagent tools.
func validateDecl(b openBody, profile store.Profile) *Problem {
	for _, t := range append(append([]clientToolDef{}, b.Tools...), b.SandboxTools...) {
		if t.Name == tooldecl.StatusTool {
			return unprocessable("reserved_tool_name", "remote_subagent_status is reserved")
		}
	}
	allowed := allowedTools(profile)
	for _, t := range b.Tools {
		if !allowed[t.Name] {
			return forbidden("tool_not_allowed", fmt.Sprintf("tool %q is not in the profile's allowlist", t.Name))
		}
	}
	if p := validateSubagentTools(b.SubagentTools); p != nil {
		return p
	}
	// The shape checks come last so the contract's slugs keep their order.
	if err := wire.CheckToolDecls(b.Tools, b.SandboxTools, subagentDecls(b.SubagentTools)); err != nil {
		return badRequest(err.Error())
	}
	return checkClientVersion(b.ClientVersion)
}

func checkClientVersion(v *string) *Problem {
	if v != nil && (len(*v) > wire.MaxClientVersionBytes || strings.ContainsRune(*v, 0)) {
		return badRequest(fmt.Sprintf("client_version must be at most %d bytes with no NUL characters", wire.MaxClientVersionBytes))
	}
	return nil
}

// subagentDecls is what the provider sees of subagent tool declarations.
func subagentDecls(tools []subagentToolDef) []wire.ToolDecl {
	out := make([]wire.ToolDecl, 0, len(tools))
	for _, t := range tools {
		out = append(out, t.Decl)
	}
	return out
}

func validateSubagentTools(tools []subagentToolDef) *Problem {
	bad := func(d string) *Problem { return unprocessable("invalid_subagent_tools", d) }
	for _, t := range tools {
		if strings.TrimSpace(t.Name) == "" {
			return bad("tool name must be a non-empty string")
		}
		if t.Name == tooldecl.StatusTool {
			return unprocessable("reserved_tool_name", "remote_subagent_status is reserved")
		}
		if err := wire.CheckTool(t.Name, t.Description, t.InputSchema); err != nil {
			return bad(err.Error())
		}
		if strings.TrimSpace(t.Image) == "" || len(t.Subagents) == 0 {
			return bad("image and non-empty subagents are required")
		}
		seen := map[string]bool{}
		for _, s := range t.Subagents {
			if strings.TrimSpace(s.Harness) == "" || seen[s.Harness] {
				return bad("harness must be non-empty and unique")
			}
			seen[s.Harness] = true
			if strings.TrimSpace(s.CommandTemplate) == "" {
				return bad(fmt.Sprintf("harness %q: command_template must not be empty", s.Harness))
			}
			if _, err := cmdtemplate.ParseSubagent(s.CommandTemplate, s.PromptVia); err != nil {
				return bad(fmt.Sprintf("harness %q: %v", s.Harness, err))
			}
			if s.TimeoutSecs != nil && *s.TimeoutSecs <= 0 {
				return bad("timeout_secs must be a positive integer")
			}
		}
	}
	return nil
}

// publicProfile is the sanitized profile returned to clients.
func (c *clientAPI) publicProfile(p store.Profile) map[string]any {
	prov := map[string]any{"provider": nil, "model": nil}
	if e, ok := c.Config.Provider(p.PrimaryProvider); ok {
		prov = map[string]any{"provider": e.Kind, "model": e.Model}
	}
	return map[string]any{"id": p.ID, "name": p.Name, "allowed_tools": p.AllowedTools, "mcp_servers": p.MCPServers, "provider": prov}
}

// profileChecks resolves the profile and its primary provider for open and
// join, recording the documented audit session on failure.
func (c *clientAPI) profileChecks(r *http.Request, key store.Key, profileID string, b openBody) (store.Profile, *Problem) {
	ctx := r.Context()
	profile, err := c.Store.GetProfile(ctx, profileID)
	if errors.Is(err, store.ErrNotFound) {
		if aerr := c.Store.CreateAuditErrorSession(ctx, profileID, key.ID, b.ClientVersion, events.SessionErrorPayload{Reason: events.ReasonProfileUnavailable, ProfileID: profileID}); aerr != nil {
			c.Log.Error("record profile_unavailable audit session", "err", aerr)
		}
		return store.Profile{}, unprocessable("profile_unavailable", "the profile bound to this client key is no longer available")
	}
	if err != nil {
		return store.Profile{}, internalError(c.Log, err)
	}
	if _, ok := c.Config.Provider(profile.PrimaryProvider); !ok {
		c.Log.Error("profile's primary provider not found in bae-config.toml; refusing to open a session",
			"profile_id", profile.ID, "profile_name", profile.Name, "primary_provider", profile.PrimaryProvider)
		if aerr := c.Store.CreateAuditErrorSession(ctx, profile.ID, key.ID, b.ClientVersion, events.SessionErrorPayload{
			Reason: events.ReasonPrimaryProviderUnavailable, ProfileID: profile.ID, PrimaryProvider: profile.PrimaryProvider,
		}); aerr != nil {
			c.Log.Error("record primary_provider_unavailable audit session", "err", aerr)
		}
		return store.Profile{}, unprocessable("primary_provider_unavailable",
			fmt.Sprintf("the profile's primary provider %q is not configured in bae-config.toml", profile.PrimaryProvider))
	}
	return profile, nil
}

func (c *clientAPI) createSession(w http.ResponseWriter, r *http.Request) *Problem {
	key, p := c.authClient(r)
	if p != nil {
		return p
	}
	var body openBody
	if p := c.decodeBody(w, r, &body); p != nil {
		return p
	}
	// Authenticated and with its whole body read, the open waits its turn
	// for the database work (admission.go).
	release, key, p := c.admitOpen(w, r, key)
	if p != nil {
		return p
	}
	sess, secret, profile, p := c.openSession(r, key, body)
	release()
	if p != nil {
		return p
	}
	ctx := r.Context()
	if c.MCP != nil && len(profile.MCPServers) > 0 {
		tools, derr := c.MCP.DiscoverTools(ctx, sess.ID, profile.MCPServers)
		if derr != nil {
			c.Log.Error("mcp tool discovery failed", "session_id", sess.ID, "err", derr)
		} else if err := c.Store.SetMCPTools(ctx, sess.ID, tools); err != nil {
			c.MCP.CloseSession(sess.ID)
			_, _, _ = c.Store.EndSession(ctx, sess.ID, store.StateError)
			return internalError(c.Log, err)
		}
	}
	// The session's workflow starts with its first message (or its close):
	// an idle session costs Temporal nothing.
	writeJSON(w, http.StatusCreated, map[string]any{"session_id": sess.ID, "session_key": secret, "profile": c.publicProfile(profile)})
	return nil
}

// openSession checks the profile and the declarations and stores the new
// session with its session key.
func (c *clientAPI) openSession(r *http.Request, key store.Key, body openBody) (store.Session, string, store.Profile, *Problem) {
	profile, p := c.profileChecks(r, key, key.ProfileID, body)
	if p != nil {
		return store.Session{}, "", store.Profile{}, p
	}
	if p := validateDecl(body, profile); p != nil {
		return store.Session{}, "", store.Profile{}, p
	}
	ctx := r.Context()
	sess, secret, err := c.Store.CreateSession(ctx, profile.ID, body.decl(key.ID), body.payload(), c.Caps)
	if p := openRefusal(err); p != nil {
		return store.Session{}, "", store.Profile{}, p
	}
	if err != nil {
		return store.Session{}, "", store.Profile{}, internalError(c.Log, err)
	}
	// The bae.session span is emitted when the session ends (by whichever
	// replica runs its cleanup); its identity is kept with the session.
	if ref := c.Spans.ChildRef(ctx); ref != "" {
		if err := c.Store.SetSessionSpan(ctx, sess.ID, ref); err != nil {
			c.Log.Warn("store session span", "session_id", sess.ID, "err", err)
		}
	}
	return sess, secret, profile, nil
}

// openRefusal is the problem for an open or join the store refused: its
// client key was revoked while the request was under way, or a cap is
// reached. nil for any other outcome.
func openRefusal(err error) *Problem {
	var quota *store.QuotaError
	switch {
	case errors.Is(err, store.ErrClientKeyRevoked):
		return unauthorized("invalid or revoked client key")
	case errors.As(err, &quota):
		return quotaExceeded(quota)
	}
	return nil
}

func (c *clientAPI) joinSession(w http.ResponseWriter, r *http.Request) *Problem {
	key, p := c.authClient(r)
	if p != nil {
		return p
	}
	ctx := r.Context()
	id := chi.URLParam(r, "id")
	sess, err := c.Store.GetSession(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return notFound("no session " + id)
	}
	if err != nil {
		return internalError(c.Log, err)
	}
	if sess.State != store.StateOpen {
		return conflict("session_closed", "session is already "+sess.State)
	}
	if key.ProfileID != sess.ProfileID {
		return forbidden("profile_mismatch", "the client key's profile does not match this session's profile")
	}
	var body openBody
	if p := c.decodeBody(w, r, &body); p != nil {
		return p
	}
	release, key, p := c.admitOpen(w, r, key)
	if p != nil {
		return p
	}
	defer release()
	profile, p := c.profileChecks(r, key, sess.ProfileID, body)
	if p != nil {
		return p
	}
	if p := validateDecl(body, profile); p != nil {
		return p
	}
	secret, err := c.Store.JoinSession(ctx, sess.ID, profile.ID, body.decl(key.ID), body.payload(), c.Caps)
	if p := openRefusal(err); p != nil {
		return p
	}
	var notOpen *store.NotOpenError
	if errors.As(err, &notOpen) {
		return conflict("session_closed", "session is already "+notOpen.State)
	}
	if err != nil {
		return internalError(c.Log, err)
	}
	writeJSON(w, http.StatusCreated, map[string]any{"session_id": sess.ID, "session_key": secret, "profile": c.publicProfile(profile)})
	return nil
}

func (c *clientAPI) participants(w http.ResponseWriter, r *http.Request) *Problem {
	sess, _, p := c.authSession(r)
	if p != nil {
		return p
	}
	drivers, err := c.Store.Drivers(r.Context(), sess.ID)
	if err != nil {
		return internalError(c.Log, err)
	}
	writeJSON(w, http.StatusOK, map[string]any{"drivers": drivers})
	return nil
}

func (c *clientAPI) events(w http.ResponseWriter, r *http.Request) *Problem {
	sess, _, p := c.authSession(r)
	if p != nil {
		return p
	}
	return writeEventsPage(w, r, c.Deps, sess.ID)
}

func writeEventsPage(w http.ResponseWriter, r *http.Request, d *Deps, sessionID string) *Problem {
	after, limit, p := pageParams(r)
	if p != nil {
		return p
	}
	items, next, err := d.Store.EncodedEventsPage(r.Context(), sessionID, after, limit, wire.MaxEventsPageBytes)
	if err != nil {
		return internalError(d.Log, err)
	}
	// {"items":[...],"next_cursor":...}, written piece by piece: payloads
	// are copied as stored and a provider.request's conversation straight
	// from the cache (see store.EncodedEvent).
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	write := func(b []byte) bool {
		_, err := w.Write(b)
		return err == nil
	}
	if !write([]byte(`{"items":[`)) {
		return nil
	}
	for i, e := range items {
		if i > 0 && !write([]byte{','}) {
			return nil
		}
		for _, p := range e.Parts {
			if !write(p) {
				return nil
			}
		}
	}
	cursor, _ := json.Marshal(next)
	write(append(append([]byte(`],"next_cursor":`), cursor...), "}\n"...))
	return nil
}

func (c *clientAPI) closeSession(w http.ResponseWriter, r *http.Request) *Problem {
	sess, _, p := c.authSession(r)
	if p != nil {
		return p
	}
	ctx := r.Context()
	ended, _, err := c.Store.EndSession(ctx, sess.ID, store.StateClosed, store.NewEvent{
		ClientKeyID: sess.ClientKeyID, Payload: events.SessionClosePayload{Reason: events.CloseClientClose},
	})
	if err != nil {
		return internalError(c.Log, err)
	}
	// Release server resources even for an already terminal session; the
	// workflow's cleanup is idempotent.
	if cerr := c.Engine.CloseSession(ctx, sessionRef(sess), workflows.CloseInput{State: store.StateClosed, Reason: "session_close", ClientKeyID: sess.ClientKeyID}); cerr != nil {
		c.Log.Warn("close session workflow", "session_id", sess.ID, "err", cerr)
	}
	if !ended {
		current, err := c.Store.GetSession(ctx, sess.ID)
		if err != nil {
			return internalError(c.Log, err)
		}
		return conflict("session_closed", "session is already "+current.State)
	}
	writeJSON(w, http.StatusOK, map[string]any{"session_id": sess.ID, "state": store.StateClosed})
	return nil
}
