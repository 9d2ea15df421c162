package crashlib

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// api speaks only the public wire API, as an SDK would. Keep-alives are
// off: every call dials, so "connection refused" unambiguously means the
// request never reached a server (a reused pooled connection could fail
// after the request was written).
type api struct {
	http      *http.Client
	clientURL string
	adminURL  string
	adminKey  string
}

func newAPI(clientAddr, adminAddr, adminKey string) *api {
	return &api{
		http:      &http.Client{Transport: &http.Transport{DisableKeepAlives: true, DisableCompression: true}},
		clientURL: "http://" + clientAddr,
		adminURL:  "http://" + adminAddr,
		adminKey:  adminKey,
	}
}

func (a *api) doJSON(ctx context.Context, method, u, token string, body, out any, want int) error {
	var rd io.Reader
	if body != nil {
		buf, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("marshal request: %w", err)
		}
		rd = bytes.NewReader(buf)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.http.Do(req)
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

// setup creates a profile allowing the client tool and one client key.
func (a *api) setup(ctx context.Context) (string, error) {
	var prof struct {
		ID string `json:"id"`
	}
	if err := a.doJSON(ctx, http.MethodPost, a.adminURL+"/admin/v1/profiles", a.adminKey,
		map[string]any{"name": "crash", "primary_provider": "fake", "allowed_tools": []string{probeTool}}, &prof, http.StatusCreated); err != nil {
		return "", fmt.Errorf("create profile: %w", err)
	}
	var key struct {
		Key string `json:"key"`
	}
	if err := a.doJSON(ctx, http.MethodPost, a.adminURL+"/admin/v1/keys", a.adminKey,
		map[string]any{"name": "crash", "profile_id": prof.ID}, &key, http.StatusCreated); err != nil {
		return "", fmt.Errorf("create client key: %w", err)
	}
	return key.Key, nil
}

type session struct {
	ID  string `json:"session_id"`
	Key string `json:"session_key"`
}

// open opens a session declaring the client tool and registers as driver.
func (a *api) open(ctx context.Context, clientKey string) (*session, error) {
	s := &session{}
	body := map[string]any{
		"client_version": "bae-crash",
		"tools": []map[string]any{{
			"name": probeTool, "description": "Answers a probe; run by the client.",
			"input_schema": map[string]any{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "string"}}},
		}},
	}
	if err := a.doJSON(ctx, http.MethodPost, a.clientURL+"/api/v1/sessions", clientKey, body, s, http.StatusCreated); err != nil {
		return nil, fmt.Errorf("open session: %w", err)
	}
	out := a.rpc(ctx, s, "session.registerDriver", map[string]any{})
	switch {
	case out.Err != nil:
		return nil, fmt.Errorf("register driver: %w", out.Err)
	case out.RPCErr != nil:
		return nil, fmt.Errorf("register driver: rpc error %d: %s", out.RPCErr.Code, out.RPCErr.Message)
	case !bytes.Contains(out.Result, []byte(`"registered":true`)):
		return nil, fmt.Errorf("register driver: unexpected result %s", out.Result)
	}
	return s, nil
}

// wireEvent is the EventView shape of GET /events and session.event.
type wireEvent struct {
	ID        string          `json:"id"`
	Type      string          `json:"event_type"`
	Payload   json.RawMessage `json:"payload"`
	CreatedAt string          `json:"created_at"`
}

type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// rpcOutcome is how one JSON-RPC call over NDJSON ended.
type rpcOutcome struct {
	Result json.RawMessage // the terminal result, when one arrived
	RPCErr *rpcError       // the terminal error object, when one arrived
	Events []wireEvent     // session.event notifications before the end
	// Err is set when no terminal object arrived. NoResponse tells the
	// two cases apart: the request got no HTTP response at all (so, as
	// the server flushes its 200 before storing anything, nothing was
	// stored), or the NDJSON stream broke after the 200.
	Err        error
	NoResponse bool
	Refused    bool // the dial failed: no server was listening
	HTTPStatus int  // a non-200 answer (a problem document)
}

func (a *api) rpc(ctx context.Context, s *session, method string, params any) rpcOutcome {
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	if err != nil {
		return rpcOutcome{Err: fmt.Errorf("marshal request: %w", err), NoResponse: true}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.clientURL+"/api/v1/sessions/"+s.ID+"/rpc", bytes.NewReader(body))
	if err != nil {
		return rpcOutcome{Err: fmt.Errorf("build request: %w", err), NoResponse: true}
	}
	req.Header.Set("Authorization", "Bearer "+s.Key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.http.Do(req)
	if err != nil {
		return rpcOutcome{Err: err, NoResponse: true, Refused: isRefused(err)}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// A problem (auth, body limits) is answered before anything is
		// stored; the call failed outright.
		raw, _ := io.ReadAll(resp.Body)
		return rpcOutcome{Err: fmt.Errorf("%s: status %d: %s", method, resp.StatusCode, bytes.TrimSpace(raw)), HTTPStatus: resp.StatusCode}
	}
	var out rpcOutcome
	rd := bufio.NewReaderSize(resp.Body, 64<<10)
	for {
		line, err := rd.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 && err == nil {
			var m struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
				Params wireEvent       `json:"params"`
				Result json.RawMessage `json:"result"`
				Error  *rpcError       `json:"error"`
			}
			if jerr := json.Unmarshal(line, &m); jerr != nil {
				out.Err = fmt.Errorf("%s: undecodable line %q: %w", method, truncate(line, 120), jerr)
				return out
			}
			switch {
			case m.Method == "session.event":
				out.Events = append(out.Events, m.Params)
				continue
			case m.ID != nil && m.Error != nil:
				out.RPCErr = m.Error
				return out
			case m.ID != nil:
				out.Result = m.Result
				return out
			}
			continue
		}
		if err != nil {
			// EOF or a reset before the terminal object: the stream broke
			// (a partial last line counts as broken too).
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			out.Err = fmt.Errorf("%s: stream broke after %d events: %w", method, len(out.Events), err)
			return out
		}
	}
}

func isRefused(err error) bool {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return strings.Contains(err.Error(), "connection refused")
}

// events reads a session's whole log, following next_cursor.
func (a *api) events(ctx context.Context, s *session) ([]wireEvent, error) {
	var all []wireEvent
	cursor := ""
	for {
		u := a.clientURL + "/api/v1/sessions/" + s.ID + "/events?limit=200"
		if cursor != "" {
			u += "&cursor=" + url.QueryEscape(cursor)
		}
		var page struct {
			Items      []wireEvent `json:"items"`
			NextCursor *string     `json:"next_cursor"`
		}
		if err := a.doJSON(ctx, http.MethodGet, u, s.Key, nil, &page, http.StatusOK); err != nil {
			return nil, err
		}
		all = append(all, page.Items...)
		if page.NextCursor == nil {
			return all, nil
		}
		cursor = *page.NextCursor
	}
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
		u := a.adminURL + "/admin/v1/sessions?limit=200"
		if cursor != "" {
			u += "&cursor=" + url.QueryEscape(cursor)
		}
		var page struct {
			Items      []adminSession `json:"items"`
			NextCursor *string        `json:"next_cursor"`
		}
		if err := a.doJSON(ctx, http.MethodGet, u, a.adminKey, nil, &page, http.StatusOK); err != nil {
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
