package crashlib

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/bae-go/bae-go/bench/benchstack"
	"github.com/bae-go/bae-go/sdk"
	"github.com/bae-go/bae-go/store"
)

// api is the bench's client side: the Go SDK for the client port, as an
// application would use it, and a few admin calls (the SDK is a client SDK)
// for setup and checks. Keep-alives are off, so every call dials: a kill
// never leaves a pooled connection half-used.
type api struct {
	http      *http.Client
	clientURL string
	admin     benchstack.Admin
	clientKey string
}

func newAPI(clientAddr, adminAddr, adminKey string, aim *aimer) *api {
	hc := &http.Client{Transport: &watchTransport{
		base: &http.Transport{DisableKeepAlives: true, DisableCompression: true},
		aim:  aim,
	}}
	return &api{
		http:      hc,
		clientURL: "http://" + clientAddr,
		admin:     benchstack.Admin{HTTP: hc, URL: "http://" + adminAddr, Key: adminKey},
	}
}

// watchTransport reports to the aimer the moment a sendMessage gets its
// 200: the message is stored and the client knows it (the accept and
// resume kill points).
type watchTransport struct {
	base http.RoundTripper
	aim  *aimer
}

func (w *watchTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/rpc") && req.GetBody != nil {
		if rc, err := req.GetBody(); err == nil {
			body, _ = io.ReadAll(rc)
			rc.Close()
		}
	}
	resp, err := w.base.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusOK && bytes.Contains(body, []byte(`"session.sendMessage"`)) {
		if bytes.Contains(body, []byte(`"tool_result"`)) {
			w.aim.hit(PointResume)
		} else {
			w.aim.hit(PointAccept)
		}
	}
	return resp, err
}

// setup creates a profile with the client tool, the bench's MCP server and
// the sandbox image (as the run needs them), and one client key.
func (a *api) setup(ctx context.Context, mcp bool, image string) error {
	body := map[string]any{"name": "crash", "primary_provider": "fake", "allowed_tools": []string{probeTool}}
	if mcp {
		body["mcp_servers"] = []string{mcpServerName}
	}
	if image != "" {
		body["available_sandboxes"] = []string{image}
	}
	key, err := a.admin.Setup(ctx, body)
	if err != nil {
		return err
	}
	a.clientKey = key
	return nil
}

// config is the SDK configuration of one session's client.
func (a *api) config() sdk.Config {
	return sdk.Config{ServerURL: a.clientURL, ClientKey: a.clientKey, HTTPClient: a.http, ClientVersion: "bae-crash"}
}

// open opens a session declaring the client tool (and the sandbox tool)
// and registers as its driver. hooks see the session's live events.
func (a *api) open(ctx context.Context, sandboxTools bool, hooks sdk.Hooks) (*sdk.Session, error) {
	opts := []sdk.Option{
		sdk.WithTool(sdk.Tool{
			Name: probeTool, Description: "Answers a probe; run by the client.",
			InputSchema: map[string]any{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "string"}}},
			// The drivers answer probes themselves (SendOnce); never called.
			Handler: func(context.Context, json.RawMessage) (any, error) { return nil, errors.New("unused") },
		}),
		sdk.WithHooks(hooks),
	}
	if sandboxTools {
		opts = append(opts, sdk.WithSandboxTool(sdk.ToolSpec{
			Name: sandboxTool, Description: "Runs a shell command in the session's sandbox.",
			InputSchema: map[string]any{"type": "object", "properties": map[string]any{"command": map[string]any{"type": "string"}}, "required": []string{"command"}},
		}))
	}
	s, err := sdk.Connect(ctx, a.config(), opts...)
	if err != nil {
		return nil, fmt.Errorf("open session: %w", err)
	}
	return s, nil
}

// wireEvent is the event shape the checks read.
type wireEvent struct {
	ID        string
	Type      string
	Payload   json.RawMessage
	CreatedAt string
}

func fromSDK(e sdk.Event) wireEvent {
	return wireEvent{ID: e.ID, Type: string(e.Type), Payload: e.Payload, CreatedAt: e.CreatedAt.UTC().Format(store.TimeFormat)}
}

// events reads a session's whole log.
func events(ctx context.Context, s *sdk.Session) ([]wireEvent, error) {
	var all []wireEvent
	for e, err := range s.Events(ctx, sdk.EventsQuery{Limit: 200}) {
		if err != nil {
			return nil, err
		}
		all = append(all, fromSDK(e))
	}
	return all, nil
}

type adminSession struct {
	ID    string `json:"id"`
	State string `json:"state"`
}

// adminSessions lists every session the admin API knows.
func (a *api) adminSessions(ctx context.Context) ([]adminSession, error) {
	var all []adminSession
	cursor := ""
	for {
		u := "/admin/v1/sessions?limit=200"
		if cursor != "" {
			u += "&cursor=" + url.QueryEscape(cursor)
		}
		var page struct {
			Items      []adminSession `json:"items"`
			NextCursor *string        `json:"next_cursor"`
		}
		if err := a.admin.Do(ctx, http.MethodGet, u, nil, &page, http.StatusOK); err != nil {
			return nil, err
		}
		all = append(all, page.Items...)
		if page.NextCursor == nil {
			return all, nil
		}
		cursor = *page.NextCursor
	}
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}
