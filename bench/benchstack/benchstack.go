// Package benchstack is the one home of what the bench programs share: the
// stack they bring up (StartInProc: a throwaway database, the embedded or
// an external Temporal and baesrv), the fake provider served and timed
// (ServeTimed), free loopback ports, the fake provider's config entry, an
// admin API client and the figures' arithmetic. Sessions are driven
// through the sdk package or PostRPC. The checking campaigns (chaos, crash)
// also share their command's ending (Campaign), the reading of a logged
// message's text and of the usage a logged event reports, and the sandbox
// run counters.
package benchstack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/bae-go/bae-go/api/wire"
	"github.com/bae-go/bae-go/internal/lib/ids"
	"github.com/bae-go/bae-go/internal/sessionclient"
	"github.com/bae-go/bae-go/internal/testing/devstack"
)

// Database is a database created for one run on a PostgreSQL server.
type Database struct {
	BaseURL string // the maintenance database it was created from
	Name    string
	URL     string
}

// CreateDatabase makes <prefix><random> next to baseURL's database and sets
// each of settings on it (ALTER DATABASE … SET key = 'value').
func CreateDatabase(ctx context.Context, baseURL, prefix string, settings map[string]string) (*Database, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	conn, err := pgx.Connect(ctx, baseURL)
	if err != nil {
		return nil, fmt.Errorf("connect to %s (is PostgreSQL running? scripts/pg-up.sh): %w", Redact(baseURL), err)
	}
	defer conn.Close(ctx)
	name := prefix + ids.New("")[:16]
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return nil, fmt.Errorf("create database %s: %w", name, err)
	}
	for k, v := range settings {
		if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s SET %s = '%s'", name, k, v)); err != nil {
			return nil, fmt.Errorf("database %s: set %s: %w", name, k, err)
		}
	}
	u.Path = "/" + name
	return &Database{BaseURL: baseURL, Name: name, URL: u.String()}, nil
}

// Drop drops the database, closing its connections. It runs on a fresh
// context so an interrupted run still cleans up.
func (d *Database) Drop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, d.BaseURL)
	if err != nil {
		return fmt.Errorf("drop database %s: connect: %w", d.Name, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+d.Name+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", d.Name, err)
	}
	return nil
}

// Redact hides a URL's password.
func Redact(u string) string {
	p, err := url.Parse(u)
	if err != nil || p.User == nil {
		return u
	}
	p.User = url.User(p.User.Username())
	return p.String()
}

// FreePorts asks the kernel for n distinct free loopback ports.
func FreePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("pick a free port: %w", err)
		}
		lns = append(lns, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// TemporalOptions are the embedded Temporal's options for a bench: a
// frontend on port, no UI, baesrv's search attributes, in memory unless
// dataDir is set.
func TemporalOptions(port int, dataDir string, log *slog.Logger) devstack.Options {
	return devstack.Options{
		DataDir: dataDir, FrontendPort: port, UIPort: -1, Logger: log,
		SearchAttributes: sessionclient.SearchAttributes,
	}
}

// ProviderTOML is the bae-config.toml entry of the fake provider at url,
// named "fake".
func ProviderTOML(url string) string {
	return fmt.Sprintf(`
[[providers.entries]]
name       = "fake"
provider   = "anthropic"
base_url   = %q
model      = "fake-model"
auth_token = "not-a-secret"
`, url)
}

// Admin calls a baesrv's admin port.
type Admin struct {
	HTTP *http.Client
	URL  string // e.g. http://127.0.0.1:8081
	Key  string
}

// Do sends body (JSON, unless nil) to path and decodes the JSON answer
// into out (when non-nil), expecting status want.
func (a Admin) Do(ctx context.Context, method, path string, body, out any, want int) error {
	var rd io.Reader
	if body != nil {
		buf, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("marshal request: %w", err)
		}
		rd = bytes.NewReader(buf)
	}
	u := a.URL + path
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+a.Key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, u, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s %s: read body: %w", method, u, err)
	}
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: status %d: %s", method, u, resp.StatusCode, bytes.TrimSpace(raw))
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("%s %s: decode reply: %w", method, u, err)
		}
	}
	return nil
}

// Setup creates a profile from profile (its admin API body) and a client
// key named like it bound to it, and returns the key.
func (a Admin) Setup(ctx context.Context, profile map[string]any) (string, error) {
	var prof wire.Profile
	if err := a.Do(ctx, http.MethodPost, "/admin/v1/profiles", profile, &prof, http.StatusCreated); err != nil {
		return "", fmt.Errorf("create profile: %w", err)
	}
	var key wire.ClientKey
	if err := a.Do(ctx, http.MethodPost, "/admin/v1/keys", map[string]any{"name": profile["name"], "profile_id": prof.ID}, &key, http.StatusCreated); err != nil {
		return "", fmt.Errorf("create client key: %w", err)
	}
	return key.Key, nil
}

// SearchAttributesReady registers baesrv's search attributes on an external
// Temporal server's namespace and waits until a workflow start carrying them
// is accepted. baesrv registers them itself, but a real server's frontend
// learns a new attribute's mapping only at its next namespace-cache refresh
// (about 10 s later), and a session's first message before that fails.
func SearchAttributesReady(ctx context.Context, c client.Client, namespace string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_, err := c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
		Namespace: namespace, SearchAttributes: sessionclient.SearchAttributes,
	})
	var exists *serviceerror.AlreadyExists
	if err != nil && !errors.As(err, &exists) {
		return fmt.Errorf("add search attributes: %w", err)
	}
	var sa []temporal.SearchAttributeUpdate
	for name := range sessionclient.SearchAttributes {
		sa = append(sa, temporal.NewSearchAttributeKeyKeyword(name).ValueSet("probe"))
	}
	id := "bench-search-attribute-probe-" + ids.New("")[:8]
	for {
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
			ID: id, TaskQueue: "bench-probe", TypedSearchAttributes: temporal.NewSearchAttributes(sa...),
		}, "probe")
		if err == nil {
			return c.TerminateWorkflow(ctx, run.GetID(), run.GetRunID(), "probe")
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("search attributes never became usable: %w", err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}
