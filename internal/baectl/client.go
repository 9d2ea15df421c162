package baectl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/bae-go/bae-go/internal/lib/adminkey"
)

const (
	defaultAdminAddr = "127.0.0.1:8081"
	defaultDataDir   = "./bae-data"
	adminKeyFileName = "admin-key.pem"
	// requestTimeout bounds one admin call; the admin API has no long-running
	// endpoints, so anything slower means the server is wedged.
	requestTimeout = 30 * time.Second
	// pageSize is what auto-pagination asks for: the server's maximum, to
	// keep the number of round trips down.
	pageSize = 200
)

// LookupEnv reads an environment variable (os.LookupEnv in production).
type LookupEnv func(string) (string, bool)

// get returns the variable's value, treating set-but-empty as unset so an
// exported empty BAE_ADMIN_TOKEN does not mask the key file.
func (l LookupEnv) get(name string) string {
	if l == nil {
		return ""
	}
	v, _ := l(name)
	return strings.TrimSpace(v)
}

// connection is the resolved admin endpoint and credential.
type connection struct {
	baseURL string // scheme://host:port, no trailing slash
	display string // what the operator typed (or the default), for messages
	token   string // empty: send no Authorization header
	source  string // where token came from, for 401 messages
	// defaultKeyPath is the probed default key file, named in 401 guidance.
	defaultKeyPath string
}

// resolveAddr applies --admin-addr > BAE_ADMIN_ADDR > 127.0.0.1:8081. A bare
// host:port means plain HTTP (the admin port never speaks TLS); a value with
// a scheme is used verbatim for tunnels and TLS-terminating proxies.
func resolveAddr(flagValue string, env LookupEnv) (baseURL, display string) {
	display = strings.TrimSpace(flagValue)
	if display == "" {
		display = env.get("BAE_ADMIN_ADDR")
	}
	if display == "" {
		display = defaultAdminAddr
	}
	if strings.Contains(display, "://") {
		return strings.TrimRight(display, "/"), display
	}
	return "http://" + display, display
}

// defaultKeyFile is where baesrv writes its bootstrap key by default:
// <BAE_DATA_DIR>/admin-key.pem, with BAE_DATA_DIR defaulting to ./bae-data.
func defaultKeyFile(env LookupEnv) string {
	dir := env.get("BAE_DATA_DIR")
	if dir == "" {
		dir = defaultDataDir
	}
	return filepath.Join(dir, adminKeyFileName)
}

// resolveToken applies --admin-token > BAE_ADMIN_TOKEN > --admin-key-file >
// BAE_ADMIN_KEY_FILE > the default key file, and names where the token came
// from. An explicitly named file that cannot be read is an error; a missing
// default file just means no token.
func resolveToken(g globalOpts, env LookupEnv) (token, source string, err error) {
	if t := strings.TrimSpace(g.adminToken); t != "" {
		return t, "--admin-token", nil
	}
	if t := env.get("BAE_ADMIN_TOKEN"); t != "" {
		return t, "BAE_ADMIN_TOKEN", nil
	}
	explicit, from := strings.TrimSpace(g.adminKeyFile), "--admin-key-file"
	if explicit == "" {
		explicit, from = env.get("BAE_ADMIN_KEY_FILE"), "BAE_ADMIN_KEY_FILE"
	}
	if explicit != "" {
		key, err := adminkey.ReadKeyFile(explicit)
		if err != nil {
			return "", "", fmt.Errorf("read admin key file %s (from %s): %w", explicit, from, err)
		}
		if key == "" {
			return "", "", fmt.Errorf("admin key file %s (from %s) is empty", explicit, from)
		}
		return key, from + " " + explicit, nil
	}
	path := defaultKeyFile(env)
	key, err := adminkey.ReadKeyFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", "", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("read default admin key file %s: %w", path, err)
	}
	return key, "default key file " + path, nil
}

// adminClient talks to /admin/v1.
type adminClient struct {
	conn connection
	http *http.Client
	log  *slog.Logger
}

// apiError is a non-2xx admin API response.
type apiError struct {
	Status  int
	Type    string
	Title   string
	Detail  string
	conn    connection
	rawBody string // set when the body was not an RFC 7807 document
}

func (e *apiError) Error() string {
	switch e.Type {
	case "unauthorized":
		return unauthorizedGuidance(e.Detail, e.conn)
	case "profile_in_use":
		return fmt.Sprintf("%s (%d %s)\nrun `baectl list keys` to find the profile's active keys, then `baectl delete key <id>` for each, then retry",
			e.detail(), e.Status, e.Type)
	case "profile_unavailable":
		return fmt.Sprintf("%s (the referenced profile does not exist or was deleted) (%d %s)", e.detail(), e.Status, e.Type)
	case "":
		body := strings.TrimSpace(e.rawBody)
		if len(body) > 200 {
			body = body[:200] + "…"
		}
		if body == "" {
			return fmt.Sprintf("admin API returned %d %s with an empty body", e.Status, http.StatusText(e.Status))
		}
		return fmt.Sprintf("admin API returned %d %s: %s", e.Status, http.StatusText(e.Status), body)
	default:
		return fmt.Sprintf("%s (%d %s)", e.detail(), e.Status, e.Type)
	}
}

func (e *apiError) detail() string {
	switch {
	case e.Detail != "":
		return e.Detail
	case e.Title != "":
		return e.Title
	default:
		return http.StatusText(e.Status)
	}
}

func unauthorizedGuidance(detail string, conn connection) string {
	if detail == "" {
		detail = "no valid admin token was supplied"
	}
	sent := "no admin token was found"
	if conn.token != "" {
		sent = "the token from " + conn.source + " was rejected"
	}
	return fmt.Sprintf(`admin API rejected the request: %s (401 unauthorized); %s.
Provide an admin token in one of these ways (highest precedence first):
  1. --admin-token <token>   (or the BAE_ADMIN_TOKEN env var)
  2. --admin-key-file <path> (or the BAE_ADMIN_KEY_FILE env var)
  3. the default key file <BAE_DATA_DIR>/admin-key.pem (here: %s), which baesrv
     writes on first boot; it is found automatically when baectl runs where baesrv
     keeps its data (e.g. the repository root after `+"`make dev`"+`)`, detail, sent, conn.defaultKeyPath)
}

// connectError is a transport failure reaching the admin port.
type connectError struct {
	display string
	err     error
}

func (e *connectError) Error() string {
	return fmt.Sprintf("could not connect to admin API at %s — is baesrv running and is --admin-addr correct? (%v)", e.display, e.err)
}

func (e *connectError) Unwrap() error { return e.err }

// errVersionSkew marks a 2xx body that does not have the expected shape.
var errVersionSkew = errors.New("unexpected response from admin API — check that baectl and the server are the same version")

// do sends one request and returns the body of a 2xx response.
func (c *adminClient) do(ctx context.Context, method, path string, query url.Values, body any) ([]byte, error) {
	u := c.conn.baseURL + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	var rd io.Reader
	if body != nil {
		buf, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("encode request body: %w", err)
		}
		rd = bytes.NewReader(buf)
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, fmt.Errorf("build request for %s: %w", u, err)
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.conn.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.conn.token)
	}
	start := time.Now()
	resp, err := c.http.Do(req)
	switch {
	case err == nil:
	case errors.Is(err, context.Canceled):
		return nil, fmt.Errorf("interrupted: %w", err)
	case errors.Is(err, context.DeadlineExceeded):
		return nil, fmt.Errorf("admin API at %s did not answer %s %s within %s", c.conn.display, method, path, requestTimeout)
	default:
		return nil, &connectError{display: c.conn.display, err: err}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("read response from %s %s: %w", method, path, err)
	}
	c.log.Debug("admin request", "method", method, "path", path, "status", resp.StatusCode, "elapsed", time.Since(start))
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return raw, nil
	}
	apiErr := &apiError{Status: resp.StatusCode, conn: c.conn}
	var p struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Detail string `json:"detail"`
	}
	if json.Unmarshal(raw, &p) == nil && p.Type != "" {
		apiErr.Type, apiErr.Title, apiErr.Detail = p.Type, p.Title, p.Detail
	} else {
		apiErr.rawBody = string(raw)
	}
	return nil, apiErr
}

// getInto GETs path and decodes the JSON body into out, returning the raw
// body as well so --json can print exactly what the server sent.
func (c *adminClient) getInto(ctx context.Context, path string, query url.Values, out any) ([]byte, error) {
	raw, err := c.do(ctx, http.MethodGet, path, query, nil)
	if err != nil {
		return nil, err
	}
	if err := decode(raw, out); err != nil {
		return nil, err
	}
	return raw, nil
}

// send issues a request with a JSON body and decodes the response.
func (c *adminClient) send(ctx context.Context, method, path string, body, out any) ([]byte, error) {
	raw, err := c.do(ctx, method, path, nil, body)
	if err != nil {
		return nil, err
	}
	if out != nil {
		if err := decode(raw, out); err != nil {
			return nil, err
		}
	}
	return raw, nil
}

func decode(raw []byte, out any) error {
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%w: %v", errVersionSkew, err)
	}
	return nil
}

// page is one cursor-paginated list response.
type page struct {
	Items      *[]json.RawMessage `json:"items"`
	NextCursor *string            `json:"next_cursor"`
}

// listPage fetches one page; a body without "items" is version skew.
func (c *adminClient) listPage(ctx context.Context, path string, query url.Values) (page, []byte, error) {
	var p page
	raw, err := c.getInto(ctx, path, query, &p)
	if err != nil {
		return page{}, nil, err
	}
	if p.Items == nil {
		return page{}, nil, fmt.Errorf("%w: %s has no items", errVersionSkew, path)
	}
	return p, raw, nil
}

// listAll follows next_cursor until the last page and returns every item.
func (c *adminClient) listAll(ctx context.Context, path string, query url.Values) ([]json.RawMessage, error) {
	q := url.Values{}
	for k, v := range query {
		q[k] = v
	}
	q.Set("limit", fmt.Sprint(pageSize))
	all := []json.RawMessage{}
	seen := map[string]bool{}
	for {
		p, _, err := c.listPage(ctx, path, q)
		if err != nil {
			return nil, err
		}
		all = append(all, *p.Items...)
		if p.NextCursor == nil || *p.NextCursor == "" {
			return all, nil
		}
		// A cursor that comes back twice would loop forever; treat it as a
		// server bug rather than spinning.
		if seen[*p.NextCursor] {
			return nil, fmt.Errorf("%w: %s repeated cursor %q", errVersionSkew, path, *p.NextCursor)
		}
		seen[*p.NextCursor] = true
		q.Set("cursor", *p.NextCursor)
	}
}
