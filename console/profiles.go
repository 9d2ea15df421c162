package console

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/bae-go/bae-go/api"
	"github.com/bae-go/bae-go/api/wire"
	"github.com/bae-go/bae-go/internal/compaction"
	"github.com/bae-go/bae-go/internal/config"
)

// profileForm is a profile as the form edits it.
type profileForm struct {
	wire.Profile
	// SandboxText is the profile's "sandbox" overrides as JSON text ("" for
	// none), so that saving the form keeps them; Profile.Sandbox is unused.
	SandboxText string
	// Ctx is the profile's "context" (compaction) policy; Profile.Context
	// is unused.
	Ctx contextForm
	// ModelSettingsText is the profile's "model_settings" as JSON text
	// ("" for none), as SandboxText.
	ModelSettingsText string
}

// contextForm is a context policy as the form edits it: numbers as typed,
// so that the admin API, not the form, judges them and names the field.
type contextForm struct {
	Enabled, ClearToolResults, Summarize bool
	KeepTurns, Trigger                   string
	SummarizerProvider                   string
}

func contextFormOf(p compaction.Policy) contextForm {
	return contextForm{
		Enabled: p.Enabled, ClearToolResults: p.ClearToolResults, Summarize: p.Summarize,
		KeepTurns: strconv.Itoa(p.KeepTurns), Trigger: strconv.FormatFloat(p.Trigger, 'g', -1, 64),
		SummarizerProvider: p.SummarizerProvider,
	}
}

// editForm is the form for editing pr.
func editForm(pr wire.Profile) profileForm {
	pol, err := compaction.ParsePolicy(pr.Context)
	if err != nil {
		pol = compaction.DefaultPolicy()
	}
	return profileForm{Profile: pr, SandboxText: sandboxText(pr.Sandbox), Ctx: contextFormOf(pol), ModelSettingsText: sandboxText(pr.ModelSettings)}
}

// newForm is the form for a new profile: the default policy.
func newForm() profileForm {
	return profileForm{Ctx: contextFormOf(compaction.DefaultPolicy())}
}

// sandboxText renders stored overrides for the form: "" when there are none.
func sandboxText(raw json.RawMessage) string {
	var buf bytes.Buffer
	if len(raw) == 0 || json.Indent(&buf, raw, "", "  ") != nil || buf.String() == "{}" || buf.String() == "null" {
		return ""
	}
	return buf.String()
}

// pickers are the choices the profile form offers: the provider and MCP
// registries from bae-config.toml and every sandbox image a profile
// already declares (new images are typed in).
type pickers struct {
	Providers []config.ProviderSummary
	MCP       []config.MCPServerSummary
	Images    []string
	// FallbackSlots is how many ordered fallback pickers the form shows.
	FallbackSlots int
	// Warnings name the profile's providers the registry does not hold, as
	// the admin API answers them when the profile is written.
	Warnings []wire.Warning
}

func (c *Console) pickers(ctx context.Context, current profileForm) (pickers, *api.Problem) {
	var pk pickers
	var provItems struct {
		Items []config.ProviderSummary `json:"items"`
	}
	if p := c.admin.call(ctx, http.MethodGet, "/admin/v1/providers", nil, &provItems); p != nil {
		return pk, p
	}
	var mcpItems struct {
		Items []config.MCPServerSummary `json:"items"`
	}
	if p := c.admin.call(ctx, http.MethodGet, "/admin/v1/mcp-servers", nil, &mcpItems); p != nil {
		return pk, p
	}
	pk.Providers, pk.MCP = provItems.Items, mcpItems.Items
	// A profile may name entries since removed from the file: keep them
	// selectable so saving the form does not drop them silently.
	known := map[string]bool{}
	registry := make([]string, 0, len(pk.Providers))
	for _, p := range pk.Providers {
		known[p.Name] = true
		registry = append(registry, p.Name)
	}
	if current.ID != "" || current.PrimaryProvider != "" {
		pk.Warnings = wire.ProfileWarnings(registry, current.PrimaryProvider, current.FallbackProviders)
	}
	for _, n := range append([]string{current.PrimaryProvider, current.Ctx.SummarizerProvider}, current.FallbackProviders...) {
		if n != "" && !known[n] {
			known[n] = true
			pk.Providers = append(pk.Providers, config.ProviderSummary{Name: n, Provider: "not in bae-config.toml"})
		}
	}
	knownMCP := map[string]bool{}
	for _, m := range pk.MCP {
		knownMCP[m.Name] = true
	}
	for _, n := range current.MCPServers {
		if !knownMCP[n] {
			knownMCP[n] = true
			pk.MCP = append(pk.MCP, config.MCPServerSummary{Name: n, Transport: "not in bae-config.toml"})
		}
	}
	profiles, p := listAll[wire.Profile](ctx, c.admin, "/admin/v1/profiles")
	if p != nil {
		return pk, p
	}
	images := map[string]bool{}
	for _, pr := range profiles {
		for _, im := range pr.AvailableSandboxes {
			images[im] = true
		}
	}
	for _, im := range current.AvailableSandboxes {
		images[im] = true
	}
	for im := range images {
		pk.Images = append(pk.Images, im)
	}
	sort.Strings(pk.Images)
	pk.FallbackSlots = max(len(pk.Providers)-1, len(current.FallbackProviders), 1)
	return pk, nil
}

func (c *Console) profilesPage(w http.ResponseWriter, r *http.Request) {
	profiles, p := listAll[wire.Profile](r.Context(), c.admin, "/admin/v1/profiles")
	if p != nil {
		c.internal(w, r, p)
		return
	}
	keys, p := listAll[wire.ClientKey](r.Context(), c.admin, "/admin/v1/keys")
	if p != nil {
		c.internal(w, r, p)
		return
	}
	var provItems struct {
		Items []config.ProviderSummary `json:"items"`
	}
	if p := c.admin.call(r.Context(), http.MethodGet, "/admin/v1/providers", nil, &provItems); p != nil {
		c.internal(w, r, p)
		return
	}
	registry := make([]string, 0, len(provItems.Items))
	for _, pr := range provItems.Items {
		registry = append(registry, pr.Name)
	}
	keyCount := map[string]int{}
	for _, k := range keys {
		keyCount[k.ProfileID]++
	}
	q := r.URL.Query()
	c.render(w, r, http.StatusOK, "profiles", map[string]any{
		"Profiles": profiles, "KeyCount": keyCount, "Registry": registry, "Deleted": q.Get("deleted"), "Saved": q.Get("saved"),
	})
}

func (c *Console) renderProfileForm(w http.ResponseWriter, r *http.Request, status int, f profileForm, formErr string, inUse []wire.ClientKey) {
	pk, p := c.pickers(r.Context(), f)
	if p != nil {
		c.internal(w, r, p)
		return
	}
	c.render(w, r, status, "profile", map[string]any{"F": f, "P": pk, "Error": formErr, "InUse": inUse, "New": f.ID == "",
		"Saved": r.URL.Query().Get("saved") != "", "ErrorField": errorField(formErr)})
}

// errorField is the field an admin API refusal names ("context.trigger: …"),
// so that the form can mark it.
func errorField(detail string) string {
	field, _, ok := strings.Cut(detail, ":")
	if !ok || !strings.HasPrefix(field, "context.") || strings.ContainsAny(field, " \"") {
		return ""
	}
	return field
}

func (c *Console) profileNew(w http.ResponseWriter, r *http.Request) {
	c.renderProfileForm(w, r, http.StatusOK, newForm(), "", nil)
}

func (c *Console) profileEdit(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	var pr wire.Profile
	if p := c.admin.call(r.Context(), http.MethodGet, "/admin/v1/profiles/"+url.PathEscape(id), nil, &pr); p != nil {
		if p.Status == http.StatusNotFound {
			c.renderError(w, r, http.StatusNotFound, "No such profile", p.Detail)
			return
		}
		c.internal(w, r, p)
		return
	}
	c.renderProfileForm(w, r, http.StatusOK, editForm(pr), "", nil)
}

// formList reads free text: names separated by commas or new lines.
func formList(s string) []string {
	out := []string{}
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == '\n' || r == '\r' }) {
		if f = strings.TrimSpace(f); f != "" && !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}

func nonEmpty(vals []string) []string {
	out := []string{}
	for _, v := range vals {
		if v = strings.TrimSpace(v); v != "" && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

func profileFromForm(r *http.Request) profileForm {
	f := r.PostForm
	images := nonEmpty(f["sandbox"])
	for _, im := range formList(f.Get("new_sandboxes")) {
		if !slices.Contains(images, im) {
			images = append(images, im)
		}
	}
	return profileForm{
		Profile: wire.Profile{
			ID:                 chi.URLParam(r, "id"),
			Name:               strings.TrimSpace(f.Get("name")),
			PrimaryProvider:    strings.TrimSpace(f.Get("primary_provider")),
			FallbackProviders:  nonEmpty(f["fallback"]),
			MCPServers:         nonEmpty(f["mcp"]),
			AllowedTools:       formList(f.Get("allowed_tools")),
			AvailableSandboxes: images,
		},
		SandboxText:       strings.TrimSpace(f.Get("sandbox_json")),
		ModelSettingsText: strings.TrimSpace(f.Get("model_settings_json")),
		Ctx: contextForm{
			Enabled:            f.Get("context_enabled") != "",
			ClearToolResults:   f.Get("context_clear_tool_results") != "",
			Summarize:          f.Get("context_summarize") != "",
			KeepTurns:          strings.TrimSpace(f.Get("context_keep_turns")),
			Trigger:            strings.TrimSpace(f.Get("context_trigger")),
			SummarizerProvider: strings.TrimSpace(f.Get("context_summarizer_provider")),
		},
	}
}

// body is the policy as the admin API takes it. A number field left empty
// takes the default; anything typed is passed on as a number when it reads
// as one and as text otherwise, for the admin API to refuse naming the
// field.
func (c contextForm) body() map[string]any {
	b := map[string]any{
		"enabled": c.Enabled, "clear_tool_results": c.ClearToolResults, "summarize": c.Summarize,
		"summarizer_provider": c.SummarizerProvider,
	}
	for key, v := range map[string]string{"keep_turns": c.KeepTurns, "trigger": c.Trigger} {
		switch {
		case v == "":
		case isJSONNumber(v):
			b[key] = json.Number(v)
		default:
			b[key] = v
		}
	}
	return b
}

func isJSONNumber(s string) bool {
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil || d.More() {
		return false
	}
	n, ok := v.(json.Number)
	return ok && n.String() == s
}

// body is the admin API request; the admin API validates the sandbox
// object, the form only checks that it is JSON.
func (f profileForm) body() (map[string]any, bool) {
	b := map[string]any{
		"name": f.Name, "primary_provider": f.PrimaryProvider, "fallback_providers": f.FallbackProviders,
		"mcp_servers": f.MCPServers, "allowed_tools": f.AllowedTools, "available_sandboxes": f.AvailableSandboxes,
	}
	// The default policy is sent as none: stored as the default, it follows
	// the server's defaults if they change.
	if f.Ctx != contextFormOf(compaction.DefaultPolicy()) {
		b["context"] = f.Ctx.body()
	}
	if f.SandboxText != "" {
		if !json.Valid([]byte(f.SandboxText)) {
			return nil, false
		}
		b["sandbox"] = json.RawMessage(f.SandboxText)
	}
	if f.ModelSettingsText != "" {
		if !json.Valid([]byte(f.ModelSettingsText)) {
			return nil, false
		}
		b["model_settings"] = json.RawMessage(f.ModelSettingsText)
	}
	return b, true
}

const badSandboxJSON = "Sandbox limits must be a JSON object, such as {\"network\": \"bridge\"} (and model settings too)"

func (c *Console) profileCreate(w http.ResponseWriter, r *http.Request) {
	f := profileFromForm(r)
	body, ok := f.body()
	if !ok {
		c.renderProfileForm(w, r, http.StatusBadRequest, f, badSandboxJSON, nil)
		return
	}
	var created struct {
		ID       string         `json:"id"`
		Warnings []wire.Warning `json:"warnings"`
	}
	if p := c.admin.call(r.Context(), http.MethodPost, "/admin/v1/profiles", body, &created); p != nil {
		c.profileProblem(w, r, f, p)
		return
	}
	savedRedirect(w, r, created.ID, created.Warnings)
}

// savedRedirect goes back to the list after a save, or to the profile's
// own page when the admin API warned, where the warnings are shown.
func savedRedirect(w http.ResponseWriter, r *http.Request, id string, warns []wire.Warning) {
	if len(warns) > 0 {
		http.Redirect(w, r, "/profiles/"+url.PathEscape(id)+"?saved=1", http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, "/profiles?saved="+url.QueryEscape(id), http.StatusSeeOther)
}

func (c *Console) profileReplace(w http.ResponseWriter, r *http.Request) {
	f := profileFromForm(r)
	body, ok := f.body()
	if !ok {
		c.renderProfileForm(w, r, http.StatusBadRequest, f, badSandboxJSON, nil)
		return
	}
	var replaced struct {
		Warnings []wire.Warning `json:"warnings"`
	}
	if p := c.admin.call(r.Context(), http.MethodPut, "/admin/v1/profiles/"+url.PathEscape(f.ID), body, &replaced); p != nil {
		c.profileProblem(w, r, f, p)
		return
	}
	savedRedirect(w, r, f.ID, replaced.Warnings)
}

// profileProblem redraws the form with the admin API's reason.
func (c *Console) profileProblem(w http.ResponseWriter, r *http.Request, f profileForm, p *api.Problem) {
	switch {
	case p.Status == http.StatusNotFound:
		c.renderError(w, r, http.StatusNotFound, "No such profile", p.Detail)
	case p.Status >= 500:
		c.internal(w, r, p)
	default:
		c.renderProfileForm(w, r, p.Status, f, problemText(p), nil)
	}
}

func (c *Console) profileDelete(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	var pr wire.Profile
	if p := c.admin.call(r.Context(), http.MethodGet, "/admin/v1/profiles/"+url.PathEscape(id), nil, &pr); p != nil {
		c.profileProblem(w, r, profileForm{Profile: wire.Profile{ID: id}}, p)
		return
	}
	p := c.admin.call(r.Context(), http.MethodDelete, "/admin/v1/profiles/"+url.PathEscape(id), nil, nil)
	if p == nil {
		http.Redirect(w, r, "/profiles?deleted="+url.QueryEscape(pr.Name), http.StatusSeeOther)
		return
	}
	f := editForm(pr)
	if p.Type != "profile_in_use" {
		c.profileProblem(w, r, f, p)
		return
	}
	// Explain the conflict with the keys that cause it, each revocable here.
	keys, kp := listAll[wire.ClientKey](r.Context(), c.admin, "/admin/v1/keys")
	if kp != nil {
		c.internal(w, r, kp)
		return
	}
	var inUse []wire.ClientKey
	for _, k := range keys {
		if k.ProfileID == id {
			inUse = append(inUse, k)
		}
	}
	c.renderProfileForm(w, r, http.StatusConflict, f, "", inUse)
}
