package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"unicode"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/bae-go/bae-go/api/wire"
	"github.com/bae-go/bae-go/internal/compaction"
	"github.com/bae-go/bae-go/internal/config"
	"github.com/bae-go/bae-go/internal/lib/live"
	"github.com/bae-go/bae-go/internal/provider"
	"github.com/bae-go/bae-go/internal/sandbox"
	"github.com/bae-go/bae-go/store"
	"github.com/bae-go/bae-go/workflows"
)

// AdminAuth verifies admin bearer tokens.
type AdminAuth interface {
	Verify(r *http.Request, token string) bool
}

// SandboxStatus reports per-profile image provisioning status.
type SandboxStatus interface {
	Status() []map[string]any
}

type adminAPI struct {
	*Deps
	auth   AdminAuth // nil disables authentication
	status SandboxStatus
}

// AdminRouter builds the admin-port handler. A nil auth serves without
// authentication (--dangerously-disable-admin-auth).
func AdminRouter(d *Deps, auth AdminAuth, status SandboxStatus) http.Handler {
	a := &adminAPI{Deps: d, auth: auth, status: status}
	r := chi.NewRouter()
	r.Use(middleware.Recoverer)
	r.Use(requestLog(d.Log))
	r.Use(limitAuthFailures(d.newAuthLimiter("admin"), d.TrustedProxies))
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	r.Get("/readyz", d.readyz)
	r.Route("/admin/v1", func(r chi.Router) {
		r.Use(a.requireAdmin)
		r.Post("/profiles", handle(a.createProfile))
		r.Get("/profiles", handle(a.listProfiles))
		r.Get("/profiles/{id}", handle(a.getProfile))
		r.Put("/profiles/{id}", handle(a.replaceProfile))
		r.Delete("/profiles/{id}", handle(a.deleteProfile))
		r.Post("/keys", handle(a.createKey))
		r.Get("/keys", handle(a.listKeys))
		r.Delete("/keys/{id}", handle(a.revokeKey))
		r.Get("/sessions", handle(a.listSessions))
		r.Get("/sessions/{id}/events", handle(a.sessionEvents))
		r.Post("/sessions/{id}/interrupt", handle(a.adminInterrupt))
		r.Get("/sessions/{id}/usage", handle(a.sessionUsage))
		r.Get("/usage", handle(a.usage))
		r.Get("/budgets", handle(a.listBudgets))
		r.Get("/budgets/changes", handle(a.budgetChanges))
		r.Get("/budgets/{scope}/{subject}", handle(a.getBudget))
		r.Put("/budgets/{scope}/{subject}", handle(a.putBudget))
		r.Post("/budgets/{scope}/{subject}/reset", handle(a.resetBudget))
		r.Delete("/budgets/{scope}/{subject}", handle(a.deleteBudget))
		r.Post("/sessions/{id}/fork", handle(a.adminFork))
		r.Post("/sessions/{id}/rewind", handle(a.adminRewind))
		r.Get("/sessions/{id}/lineage", handle(a.sessionLineage))
		r.Get("/approvals", handle(a.listApprovals))
		r.Get("/approvals/{id}", handle(a.getApproval))
		r.Post("/approvals/{id}/decision", handle(a.decideApprovalAdmin))
		r.Get("/mcp-servers", func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, http.StatusOK, map[string]any{"items": d.Config.MCPServersView()})
		})
		r.Get("/providers", func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, http.StatusOK, map[string]any{"items": d.Config.ProvidersView()})
		})
		r.Get("/config", func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, http.StatusOK, d.Config.ConfigView())
		})
		r.Get("/sandbox-status", func(w http.ResponseWriter, _ *http.Request) {
			items := []map[string]any{}
			if a.status != nil {
				items = a.status.Status()
			}
			writeJSON(w, http.StatusOK, map[string]any{"items": items})
		})
	})
	unroutedProblems(r)
	return r
}

func (a *adminAPI) requireAdmin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.auth != nil {
			token, p := bearer(r)
			if p != nil {
				writeProblem(w, unauthorized("missing or malformed admin bearer token"))
				return
			}
			if !a.auth.Verify(r, token) {
				writeProblem(w, unauthorized("invalid admin key"))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// profileBody is the body of profile create and replace. Lists are decoded
// loosely first so a non-string element gets a clear 400.
type profileBody struct {
	Name               *string         `json:"name"`
	PrimaryProvider    *string         `json:"primary_provider"`
	FallbackProviders  json.RawMessage `json:"fallback_providers"`
	MCPServers         json.RawMessage `json:"mcp_servers"`
	AllowedTools       json.RawMessage `json:"allowed_tools"`
	AvailableSandboxes json.RawMessage `json:"available_sandboxes"`
	Sandbox            json.RawMessage `json:"sandbox"`
	Context            json.RawMessage `json:"context"`
	ModelSettings      json.RawMessage `json:"model_settings"`
	Approvals          json.RawMessage `json:"approvals"`
}

// Admin-supplied fields are bounded (wire.MaxNameBytes and the list
// bounds) before anything is stored: an index row has a size limit and
// PostgreSQL text cannot hold NUL, and either would otherwise surface as a
// 500.

// adminString checks a required name-like field.
func adminString(field string, v *string) (string, *Problem) {
	if v == nil || strings.TrimSpace(*v) == "" {
		return "", badRequest(field + " must be a non-blank string")
	}
	if p := boundedText(field, *v, wire.MaxNameBytes); p != nil {
		return "", p
	}
	return *v, nil
}

func boundedText(field, v string, limit int) *Problem {
	if len(v) > limit {
		return badRequest(fmt.Sprintf("%s must be at most %d bytes", field, limit))
	}
	if strings.IndexFunc(v, unicode.IsControl) >= 0 {
		return badRequest(field + " must not contain control characters")
	}
	return nil
}

func stringList(field string, raw json.RawMessage) ([]string, *Problem) {
	if len(raw) == 0 || string(raw) == "null" {
		return []string{}, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, badRequest(field + " must be an array of strings")
	}
	if len(items) > wire.MaxListItems {
		return nil, badRequest(fmt.Sprintf("%s may hold at most %d entries", field, wire.MaxListItems))
	}
	out := make([]string, 0, len(items))
	for _, it := range items {
		var s string
		if err := json.Unmarshal(it, &s); err != nil {
			return nil, badRequest(field + " must contain only strings")
		}
		if strings.TrimSpace(s) == "" {
			return nil, badRequest(field + " must not contain blank entries")
		}
		if p := boundedText(field+" entries", s, wire.MaxListItemBytes); p != nil {
			return nil, p
		}
		out = append(out, s)
	}
	return out, nil
}

func (a *adminAPI) profileInput(w http.ResponseWriter, r *http.Request) (store.ProfileInput, *Problem) {
	var b profileBody
	c := &clientAPI{Deps: a.Deps}
	if p := c.decodeBody(w, r, &b); p != nil {
		return store.ProfileInput{}, p
	}
	var in store.ProfileInput
	var p *Problem
	if in.Name, p = adminString("name", b.Name); p != nil {
		return in, p
	}
	if in.PrimaryProvider, p = adminString("primary_provider", b.PrimaryProvider); p != nil {
		return in, p
	}
	if in.FallbackProviders, p = stringList("fallback_providers", b.FallbackProviders); p != nil {
		return in, p
	}
	if in.MCPServers, p = stringList("mcp_servers", b.MCPServers); p != nil {
		return in, p
	}
	if in.AllowedTools, p = stringList("allowed_tools", b.AllowedTools); p != nil {
		return in, p
	}
	if in.AvailableSandboxes, p = stringList("available_sandboxes", b.AvailableSandboxes); p != nil {
		return in, p
	}
	if in.Sandbox, p = sandboxSettings(b.Sandbox); p != nil {
		return in, p
	}
	if in.Context, p = a.contextPolicy(b.Context); p != nil {
		return in, p
	}
	if in.ModelSettings, p = a.modelSettings(b.ModelSettings); p != nil {
		return in, p
	}
	if in.Approvals, p = approvalPolicy(b.Approvals); p != nil {
		return in, p
	}
	return in, nil
}

// modelSettings reads a profile's "model_settings" (overrides of provider
// entries' model settings, by entry name): malformed (not an object, an
// unknown key, a wrong type) is 400; a name not in the provider registry or
// a setting the entry's model refuses, once laid over the entry's own, is
// 422 invalid_model_settings, naming the field, as is a header's ${VAR}
// token naming a variable unset in the server's environment. Absent, null
// or {} stores nothing.
func (a *adminAPI) modelSettings(raw json.RawMessage) (json.RawMessage, *Problem) {
	over, err := provider.ParseOverrides(raw)
	var se *provider.SettingError
	if errors.As(err, &se) {
		return nil, badRequest("model_settings." + se.Error())
	}
	if err != nil {
		return nil, badRequest("model_settings: " + err.Error())
	}
	if len(over) == 0 {
		return nil, nil
	}
	names := make([]string, 0, len(over))
	for name := range over {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		entry, ok := a.Config.Provider(name)
		if !ok {
			return nil, unprocessable("invalid_model_settings", fmt.Sprintf("model_settings.%s: %q is not in the provider registry", name, name))
		}
		merged := entry.Settings.Merge(over[name])
		if err := merged.Validate(entry.Kind, entry.Model, entry.MaxTokens); err != nil {
			return nil, unprocessable("invalid_model_settings", fmt.Sprintf("model_settings.%s.%s", name, err))
		}
		// Header tokens resolve against this server's environment at each
		// call; one unset here would fail every call. The row keeps the
		// tokens, never what they resolve to.
		if _, err := config.ResolveHeaders(merged, os.LookupEnv); err != nil {
			return nil, unprocessable("invalid_model_settings", fmt.Sprintf("model_settings.%s.%s", name, err))
		}
	}
	enc, err := json.Marshal(over)
	if err != nil {
		return nil, badRequest("model_settings: " + err.Error())
	}
	return enc, nil
}

// sandboxSettings reads a profile's "sandbox" object: a malformed object
// (not an object, an unknown key, a wrong type) is 400; a value out of range
// is 422 invalid_sandbox, naming the field.
func sandboxSettings(raw json.RawMessage) (sandbox.Settings, *Problem) {
	if len(raw) == 0 || string(raw) == "null" {
		return sandbox.Settings{}, nil
	}
	if trimmed := bytes.TrimSpace(raw); len(trimmed) == 0 || trimmed[0] != '{' {
		return sandbox.Settings{}, badRequest("sandbox must be an object")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var s sandbox.Settings
	if err := dec.Decode(&s); err != nil {
		return sandbox.Settings{}, badRequest("sandbox: " + err.Error())
	}
	s, err := s.Normalize()
	if err != nil {
		return sandbox.Settings{}, unprocessable("invalid_sandbox", "sandbox."+err.Error())
	}
	return s, nil
}

// contextPolicy reads a profile's "context" (compaction policy): malformed
// is 400, a value out of range or an unknown summarizer is 422
// invalid_context, naming the field. Absent or null keeps the default,
// stored as NULL so later defaults apply.
func (a *adminAPI) contextPolicy(raw json.RawMessage) (json.RawMessage, *Problem) {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return nil, nil
	}
	pol, err := compaction.ParsePolicy(raw)
	var fe *compaction.FieldError
	if errors.As(err, &fe) {
		if fe.Malformed {
			return nil, badRequest(fe.Error())
		}
		return nil, unprocessable("invalid_context", fe.Error())
	}
	if pol.SummarizerProvider != "" {
		if _, ok := a.Config.Provider(pol.SummarizerProvider); !ok {
			return nil, unprocessable("invalid_context", fmt.Sprintf("context.summarizer_provider: %q is not in the provider registry", pol.SummarizerProvider))
		}
	}
	return pol.JSON(), nil
}

// profileWarnings checks a stored profile's provider names against the
// registry. As in BAE, a name the registry does not hold is stored (the
// provider may be rolled out later, or this replica's file be behind);
// the session open answers 422 primary_provider_unavailable. The operator
// hears of it now: a log line and the answer's "warnings".
func (a *adminAPI) profileWarnings(op string, prof store.Profile) []wire.Warning {
	var names []string
	for _, p := range a.Config.ProvidersView() {
		names = append(names, p.Name)
	}
	warns := wire.ProfileWarnings(names, prof.PrimaryProvider, prof.FallbackProviders)
	for _, w := range warns {
		a.Log.Warn("profile "+op+" with a provider the registry does not hold",
			"profile_id", prof.ID, "profile", prof.Name, "warning", w.Type, "detail", w.Detail)
	}
	return warns
}

// replacedProfile is PUT's answer: the profile, plus warnings when any.
type replacedProfile struct {
	wire.Profile
	Warnings []wire.Warning `json:"warnings,omitempty"`
}

// policyOf is a stored policy with its defaults (stored ones were
// validated on the way in).
func policyOf(raw json.RawMessage) compaction.Policy {
	p, err := compaction.ParsePolicy(raw)
	if err != nil {
		return compaction.DefaultPolicy()
	}
	return p
}

func profileView(p store.Profile) wire.Profile {
	sandbox, err := json.Marshal(p.Sandbox)
	if err != nil {
		sandbox = json.RawMessage(`{}`)
	}
	return wire.Profile{
		ID: p.ID, Name: p.Name, PrimaryProvider: p.PrimaryProvider, FallbackProviders: p.FallbackProviders,
		MCPServers: p.MCPServers, AllowedTools: p.AllowedTools, AvailableSandboxes: p.AvailableSandboxes,
		Sandbox: sandbox, Context: policyOf(p.Context).JSON(), ModelSettings: p.ModelSettings, Approvals: approvalPolicyView(p.Approvals),
		CreatedAt: store.FormatTime(p.CreatedAt), UpdatedAt: store.FormatTime(p.UpdatedAt),
	}
}

func (a *adminAPI) createProfile(w http.ResponseWriter, r *http.Request) *Problem {
	in, p := a.profileInput(w, r)
	if p != nil {
		return p
	}
	prof, err := a.Store.CreateProfile(r.Context(), in)
	if errors.Is(err, store.ErrDuplicateName) {
		return conflict("duplicate_name", "a profile named "+in.Name+" already exists")
	}
	if err != nil {
		return internalError(a.Log, err)
	}
	if a.OnProfileWritten != nil {
		a.OnProfileWritten(prof)
	}
	body := map[string]any{"id": prof.ID, "name": prof.Name, "created_at": store.FormatTime(prof.CreatedAt)}
	if warns := a.profileWarnings("created", prof); len(warns) > 0 {
		body["warnings"] = warns
	}
	writeJSON(w, http.StatusCreated, body)
	return nil
}

func (a *adminAPI) listProfiles(w http.ResponseWriter, r *http.Request) *Problem {
	after, limit, p := pageParams(r)
	if p != nil {
		return p
	}
	page, err := a.Store.ListProfiles(r.Context(), after, limit)
	if err != nil {
		return internalError(a.Log, err)
	}
	items := make([]wire.Profile, 0, len(page.Items))
	for _, pr := range page.Items {
		items = append(items, profileView(pr))
	}
	writeJSON(w, http.StatusOK, pageBody[wire.Profile]{Items: items, NextCursor: page.NextCursor})
	return nil
}

func (a *adminAPI) getProfile(w http.ResponseWriter, r *http.Request) *Problem {
	id := chi.URLParam(r, "id")
	prof, err := a.Store.GetProfile(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		return notFound("no profile with id " + id)
	}
	if err != nil {
		return internalError(a.Log, err)
	}
	writeJSON(w, http.StatusOK, profileView(prof))
	return nil
}

func (a *adminAPI) replaceProfile(w http.ResponseWriter, r *http.Request) *Problem {
	id := chi.URLParam(r, "id")
	if _, err := a.Store.GetProfile(r.Context(), id); errors.Is(err, store.ErrNotFound) {
		return notFound("no profile with id " + id)
	}
	in, p := a.profileInput(w, r)
	if p != nil {
		return p
	}
	prof, err := a.Store.ReplaceProfile(r.Context(), id, in)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return notFound("no profile with id " + id)
	case errors.Is(err, store.ErrDuplicateName):
		return conflict("duplicate_name", "a profile named "+in.Name+" already exists")
	case err != nil:
		return internalError(a.Log, err)
	}
	if a.OnProfileWritten != nil {
		a.OnProfileWritten(prof)
	}
	writeJSON(w, http.StatusOK, replacedProfile{Profile: profileView(prof), Warnings: a.profileWarnings("replaced", prof)})
	return nil
}

func (a *adminAPI) deleteProfile(w http.ResponseWriter, r *http.Request) *Problem {
	id := chi.URLParam(r, "id")
	err := a.Store.DeleteProfile(r.Context(), id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return notFound("no profile with id " + id)
	case errors.Is(err, store.ErrProfileInUse):
		return conflict("profile_in_use", "the profile still has active client keys; revoke them first")
	case err != nil:
		return internalError(a.Log, err)
	}
	if err := live.Publish(r.Context(), a.Store.Pool, live.AuthChanged(id)); err != nil {
		a.Log.Warn("announce profile deletion", "profile_id", id, "err", err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func keyView(k store.Key) map[string]any {
	var last any
	if k.LastUsedAt != nil {
		last = store.FormatTime(*k.LastUsedAt)
	}
	return map[string]any{"id": k.ID, "name": k.Name, "prefix": k.Prefix, "profile_id": k.ProfileID, "created_at": store.FormatTime(k.CreatedAt), "last_used_at": last}
}

func (a *adminAPI) createKey(w http.ResponseWriter, r *http.Request) *Problem {
	var b struct {
		Name      *string `json:"name"`
		ProfileID *string `json:"profile_id"`
	}
	c := &clientAPI{Deps: a.Deps}
	if p := c.decodeBody(w, r, &b); p != nil {
		return p
	}
	if _, p := adminString("name", b.Name); p != nil {
		return p
	}
	if b.ProfileID == nil || strings.TrimSpace(*b.ProfileID) == "" {
		return badRequest("profile_id is required")
	}
	if _, p := adminString("profile_id", b.ProfileID); p != nil {
		return p
	}
	k, secret, err := a.Store.NewClientKey(r.Context(), *b.Name, *b.ProfileID)
	if errors.Is(err, store.ErrNotFound) {
		return unprocessable("profile_unavailable", "profile "+*b.ProfileID+" does not exist or has been deleted")
	}
	if err != nil {
		return internalError(a.Log, err)
	}
	writeJSON(w, http.StatusCreated, map[string]any{"id": k.ID, "name": k.Name, "key": secret, "prefix": k.Prefix, "profile_id": k.ProfileID, "created_at": store.FormatTime(k.CreatedAt)})
	return nil
}

func (a *adminAPI) listKeys(w http.ResponseWriter, r *http.Request) *Problem {
	after, limit, p := pageParams(r)
	if p != nil {
		return p
	}
	page, err := a.Store.ListClientKeys(r.Context(), after, limit)
	if err != nil {
		return internalError(a.Log, err)
	}
	items := make([]map[string]any, 0, len(page.Items))
	for _, k := range page.Items {
		items = append(items, keyView(k))
	}
	writeJSON(w, http.StatusOK, pageBody[map[string]any]{Items: items, NextCursor: page.NextCursor})
	return nil
}

func (a *adminAPI) revokeKey(w http.ResponseWriter, r *http.Request) *Problem {
	id := chi.URLParam(r, "id")
	closed, err := a.Store.RevokeClientKey(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		return notFound("no client key with id " + id)
	}
	if err != nil {
		return internalError(a.Log, err)
	}
	// Every replica's open streams re-check their key now, not at their
	// next poll.
	if err := live.Publish(r.Context(), a.Store.Pool, live.AuthChanged(id)); err != nil {
		a.Log.Warn("announce key revocation", "key_id", id, "err", err)
	}
	for _, sid := range closed {
		sess, err := a.Store.GetSession(r.Context(), sid)
		if err != nil {
			a.Log.Warn("read revoked session", "session_id", sid, "err", err)
			continue
		}
		if err := a.Engine.CloseSession(r.Context(), sessionRef(sess), workflows.CloseInput{State: store.StateClosed, Reason: "session_close", ClientKeyID: id}); err != nil {
			a.Log.Warn("close revoked session workflow", "session_id", sid, "err", err)
		}
		_ = live.Publish(r.Context(), a.Store.Pool, "closed:"+sid)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (a *adminAPI) listSessions(w http.ResponseWriter, r *http.Request) *Problem {
	state := r.URL.Query().Get("state")
	switch state {
	case "", store.StateOpen, store.StateClosed, store.StateError:
	default:
		return badRequest("state must be one of open, closed, error")
	}
	after, limit, p := pageParams(r)
	if p != nil {
		return p
	}
	page, err := a.Store.ListSessions(r.Context(), state, after, limit)
	if err != nil {
		return internalError(a.Log, err)
	}
	writeJSON(w, http.StatusOK, pageBody[store.Session]{Items: page.Items, NextCursor: page.NextCursor})
	return nil
}

func (a *adminAPI) sessionEvents(w http.ResponseWriter, r *http.Request) *Problem {
	id := chi.URLParam(r, "id")
	if _, err := a.Store.GetSession(r.Context(), id); errors.Is(err, store.ErrNotFound) {
		return notFound("no session " + id)
	} else if err != nil {
		return internalError(a.Log, err)
	}
	return writeEventsPage(w, r, a.Deps, id)
}
