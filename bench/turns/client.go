package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/bae-go/bae-go/bench/benchstack"
	"github.com/bae-go/bae-go/sdk"
)

// api is the benchmark's client for the two ports: the admin client for
// setup, the Go SDK to open sessions, and its own turn call, which counts a
// stream's notifications and bytes without decoding them (a long session's
// provider.request carries the whole conversation, and decoding it would
// count the load generator's work as the server's).
type api struct {
	http      *http.Client
	clientURL string
	// clientURLs, when set, are several replicas' client APIs: sessions
	// open on them in turn, as behind a round-robin load balancer, and are
	// driven where they opened.
	clientURLs []string
	opened     atomic.Uint64
	admin      benchstack.Admin
	watch      *stallWatch // optional: counts turns in flight
}

func newAPI(clientURL, adminURL, adminKey string, conns int) *api {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// One keep-alive connection per concurrent session: the default of 2
	// idle connections per host would make most turns dial a new socket.
	tr.MaxIdleConns = conns + 64
	tr.MaxIdleConnsPerHost = conns + 64
	tr.DisableCompression = true
	hc := &http.Client{Transport: tr}
	return &api{http: hc, clientURL: clientURL, admin: benchstack.Admin{HTTP: hc, URL: adminURL, Key: adminKey}}
}

func (a *api) close() { a.http.CloseIdleConnections() }

// setup creates the bench profile and one client key for all sessions.
func (a *api) setup(ctx context.Context) (string, error) {
	return a.admin.Setup(ctx, map[string]any{"name": "bench", "primary_provider": "fake", "allowed_tools": []string{}})
}

type session struct {
	ID  string
	Key string
	URL string // the client API it is driven through ("": the api's)
	n   int    // next JSON-RPC id
}

// sdkConfig is the bench client's SDK configuration for the client API at
// serverURL (no client key: set it to open a session).
func (a *api) sdkConfig(serverURL string) sdk.Config {
	return sdk.Config{ServerURL: serverURL, HTTPClient: a.http, ClientVersion: "bae-bench", Logger: slog.New(slog.DiscardHandler)}
}

// baseURL is the client API s is driven through.
func (a *api) baseURL(s *session) string {
	if s.URL != "" {
		return s.URL
	}
	return a.clientURL
}

// open opens a session and registers as its driver, through the SDK.
func (a *api) open(ctx context.Context, clientKey string) (*session, error) {
	u := a.clientURL
	if n := len(a.clientURLs); n > 0 {
		u = a.clientURLs[int((a.opened.Add(1)-1)%uint64(n))]
	}
	cfg := a.sdkConfig(u)
	cfg.ClientKey = clientKey
	s, err := sdk.Connect(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open session: %w", err)
	}
	return &session{ID: s.ID, Key: s.Key(), URL: u}, nil
}

// closeSession closes s for every participant, as a driver done with it
// would (its workflow ends).
func (a *api) closeSession(ctx context.Context, s *session) error {
	ss, err := sdk.Attach(a.sdkConfig(a.baseURL(s)), s.ID, s.Key)
	if err != nil {
		return err
	}
	if err := ss.Close(ctx); err != nil {
		return fmt.Errorf("close session %s: %w", s.ID, err)
	}
	return nil
}

// rpcLine is one NDJSON object: a notification (method, no id) or the
// terminal response (id plus result or error).
type rpcLine struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

type rpcResult struct {
	Result        json.RawMessage
	Notifications int
	Bytes         int64
}

// rpcError is a JSON-RPC error object or a broken stream; kind groups
// errors in the report.
type rpcError struct {
	kind string
	err  error
}

func (e *rpcError) Error() string { return e.kind + ": " + e.err.Error() }
func (e *rpcError) Unwrap() error { return e.err }

func errKind(err error) string {
	var re *rpcError
	if errors.As(err, &re) {
		return re.kind
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "timeout"
	}
	return "transport"
}

// rpc posts one JSON-RPC request and reads its NDJSON stream to the
// terminal response.
func (a *api) rpc(ctx context.Context, s *session, method string, params any) (rpcResult, error) {
	s.n++
	buf, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": s.n, "method": method, "params": params})
	if err != nil {
		return rpcResult{}, fmt.Errorf("marshal rpc: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.baseURL(s)+"/api/v1/sessions/"+s.ID+"/rpc", bytes.NewReader(buf))
	if err != nil {
		return rpcResult{}, fmt.Errorf("build rpc: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+s.Key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.http.Do(req)
	if err != nil {
		return rpcResult{}, fmt.Errorf("post rpc: %w", err)
	}
	defer resp.Body.Close()
	cr := &countingReader{r: resp.Body}
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(io.LimitReader(cr, 4096))
		return rpcResult{}, &rpcError{kind: fmt.Sprintf("http_%d", resp.StatusCode), err: fmt.Errorf("%s", bytes.TrimSpace(raw))}
	}
	// Notifications are counted, not decoded (see api).
	br := bufio.NewReaderSize(cr, 64<<10)
	var out rpcResult
	for {
		raw, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(raw)) == 0 && err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("stream ended without a terminal response")
			}
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return out, &rpcError{kind: "stream", err: err}
		}
		if bytes.HasPrefix(raw, notificationPrefix) {
			out.Notifications++
			continue
		}
		var line rpcLine
		if err := json.Unmarshal(raw, &line); err != nil {
			return out, &rpcError{kind: "stream", err: err}
		}
		if len(line.ID) == 0 || string(line.ID) == "null" {
			out.Notifications++
			continue
		}
		out.Bytes = cr.n
		if line.Error != nil {
			return out, &rpcError{kind: fmt.Sprintf("rpc_%d", line.Error.Code), err: errors.New(line.Error.Message)}
		}
		out.Result = line.Result
		return out, nil
	}
}

// notificationPrefix starts every session.event line bae-go and the floor
// write.
var notificationPrefix = []byte(`{"jsonrpc":"2.0","method":"session.event"`)

// turnReply is the part of sendMessage's terminal result the bench checks.
type turnReply struct {
	Message struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	} `json:"message"`
}

// turn sends one user message and checks the echo came back for it.
func (a *api) turn(ctx context.Context, s *session, token string, timeout time.Duration) (rpcResult, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if a.watch != nil {
		a.watch.begin()
		defer a.watch.end()
	}
	res, err := a.rpc(ctx, s, "session.sendMessage", map[string]any{"message": map[string]any{"role": "user", "content": token}})
	if err != nil {
		return res, err
	}
	var r turnReply
	if err := json.Unmarshal(res.Result, &r); err != nil {
		return res, &rpcError{kind: "bad_result", err: err}
	}
	want := "echo: " + token
	for _, b := range r.Message.Content {
		if b.Type == "text" && b.Text == want {
			return res, nil
		}
	}
	return res, &rpcError{kind: "wrong_reply", err: fmt.Errorf("want %q, got %.200s", want, res.Result)}
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
