package console

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/bae-go/bae-go/api"
	"github.com/bae-go/bae-go/api/wire"
)

// adminClient calls the admin API's own handler in process, so the
// console's writes get exactly the admin API's validation, side effects
// (image provisioning, the revoke cascade) and redaction. The handler is
// never bound to a listener and no admin key exists on this path: the
// browser has only its console cookie.
type adminClient struct{ h http.Handler }

// call sends body (JSON-encoded unless nil) and decodes a 2xx answer into
// out (when non-nil); any other answer is returned as its RFC 7807 problem.
func (a adminClient) call(ctx context.Context, method, path string, body, out any) *api.Problem {
	var rd *bytes.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return &api.Problem{Type: "internal", Status: http.StatusInternalServerError, Detail: err.Error()}
		}
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	// The admin router must route this request itself, not resume the
	// console router's routing state carried in ctx.
	ctx = context.WithValue(ctx, chi.RouteCtxKey, (*chi.Context)(nil))
	req, err := http.NewRequestWithContext(ctx, method, path, rd)
	if err != nil {
		return &api.Problem{Type: "internal", Status: http.StatusInternalServerError, Detail: err.Error()}
	}
	req.RemoteAddr = "console"
	req.Header.Set("Content-Type", "application/json")
	rec := &recorder{header: http.Header{}}
	a.h.ServeHTTP(rec, req)
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	if rec.status < 200 || rec.status > 299 {
		p := &api.Problem{}
		if err := json.Unmarshal(rec.body.Bytes(), p); err != nil || p.Type == "" {
			p = &api.Problem{Type: "internal", Status: rec.status, Detail: fmt.Sprintf("admin API answered %d", rec.status)}
		}
		return p
	}
	if out != nil && rec.body.Len() > 0 {
		if err := json.Unmarshal(rec.body.Bytes(), out); err != nil {
			return &api.Problem{Type: "internal", Status: http.StatusInternalServerError, Detail: "decode admin answer: " + err.Error()}
		}
	}
	return nil
}

// listAll follows an admin list endpoint's cursors to the end.
// profileNames lists every profile and maps each id to its name.
func (a adminClient) profileNames(ctx context.Context) ([]wire.Profile, map[string]string, *api.Problem) {
	profiles, p := listAll[wire.Profile](ctx, a, "/admin/v1/profiles")
	if p != nil {
		return nil, nil, p
	}
	names := make(map[string]string, len(profiles))
	for _, pr := range profiles {
		names[pr.ID] = pr.Name
	}
	return profiles, names, nil
}

// problemText is how a page shows an admin API refusal.
func problemText(p *api.Problem) string { return p.Detail + " (" + p.Type + ")" }

func listAll[T any](ctx context.Context, a adminClient, path string) ([]T, *api.Problem) {
	var all []T
	cursor := ""
	for range 1000 { // 200 000 rows: more than a console page should ever hold
		var page struct {
			Items      []T     `json:"items"`
			NextCursor *string `json:"next_cursor"`
		}
		q := url.Values{"limit": {"200"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		sep := "?"
		if strings.Contains(path, "?") { // a filtered listing
			sep = "&"
		}
		if p := a.call(ctx, http.MethodGet, path+sep+q.Encode(), nil, &page); p != nil {
			return nil, p
		}
		all = append(all, page.Items...)
		if page.NextCursor == nil {
			break
		}
		cursor = *page.NextCursor
	}
	return all, nil
}

// recorder is a minimal in-memory http.ResponseWriter.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}
func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}
