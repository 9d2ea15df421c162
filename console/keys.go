package console

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/bae-go/bae-go/api"
	"github.com/bae-go/bae-go/api/wire"
	"github.com/bae-go/bae-go/internal/config"
)

func (c *Console) renderKeys(w http.ResponseWriter, r *http.Request, status int, extra map[string]any) {
	keys, p := listAll[wire.ClientKey](r.Context(), c.admin, "/admin/v1/keys")
	if p != nil {
		c.internal(w, r, p)
		return
	}
	profiles, names, p := c.admin.profileNames(r.Context())
	if p != nil {
		c.internal(w, r, p)
		return
	}
	// Newest first, like the sessions list.
	for i, j := 0, len(keys)-1; i < j; i, j = i+1, j-1 {
		keys[i], keys[j] = keys[j], keys[i]
	}
	data := map[string]any{"Keys": keys, "Profiles": profiles, "ProfileNames": names, "Revoked": r.URL.Query().Get("revoked")}
	for k, v := range extra {
		data[k] = v
	}
	c.render(w, r, status, "keys", data)
}

// keyRefused shows the admin API's refusal on the keys page, with extra
// template data; a server fault gets the error page.
func (c *Console) keyRefused(w http.ResponseWriter, r *http.Request, p *api.Problem, extra map[string]any) {
	if p.Status >= 500 {
		c.internal(w, r, p)
		return
	}
	extra["Error"] = problemText(p)
	c.renderKeys(w, r, p.Status, extra)
}

func (c *Console) keysPage(w http.ResponseWriter, r *http.Request) {
	c.renderKeys(w, r, http.StatusOK, nil)
}

// keyCreate shows the new key's secret in this one response only: it is not
// stored anywhere the console could show it again.
func (c *Console) keyCreate(w http.ResponseWriter, r *http.Request) {
	name, profile := strings.TrimSpace(r.PostForm.Get("name")), r.PostForm.Get("profile_id")
	var created wire.ClientKey
	if p := c.admin.call(r.Context(), http.MethodPost, "/admin/v1/keys", map[string]any{"name": name, "profile_id": profile}, &created); p != nil {
		c.keyRefused(w, r, p, map[string]any{"FormName": name, "FormProfile": profile})
		return
	}
	c.log.Info("console created client key", "key_id", created.ID, "profile_id", created.ProfileID)
	c.renderKeys(w, r, http.StatusCreated, map[string]any{"Created": created})
}

func (c *Console) keyRevoke(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	if p := c.admin.call(r.Context(), http.MethodDelete, "/admin/v1/keys/"+url.PathEscape(id), nil, nil); p != nil {
		c.keyRefused(w, r, p, map[string]any{})
		return
	}
	c.log.Info("console revoked client key", "key_id", id)
	back := "/keys?revoked=" + url.QueryEscape(id)
	if next := r.PostForm.Get("next"); strings.HasPrefix(next, "/profiles/") {
		back = safeNext(next)
	}
	http.Redirect(w, r, back, http.StatusSeeOther)
}

func (c *Console) configPage(w http.ResponseWriter, r *http.Request) {
	var snap config.ConfigSnapshot
	if p := c.admin.call(r.Context(), http.MethodGet, "/admin/v1/config", nil, &snap); p != nil {
		c.internal(w, r, p)
		return
	}
	var status struct {
		Items []wire.SandboxStatus `json:"items"`
	}
	if p := c.admin.call(r.Context(), http.MethodGet, "/admin/v1/sandbox-status", nil, &status); p != nil {
		c.internal(w, r, p)
		return
	}
	_, names, p := c.admin.profileNames(r.Context())
	if p != nil {
		c.internal(w, r, p)
		return
	}
	c.render(w, r, http.StatusOK, "config", map[string]any{
		"C": snap, "Sandbox": status.Items, "ProfileNames": names,
		"TemporalUI": c.links.base, "Namespace": c.links.namespace,
	})
}
