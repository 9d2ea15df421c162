package sdk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/propagation"
)

// transport issues the REST and /rpc requests of one Config.
type transport struct {
	cfg Config // normalized
}

// ctxErr prefers the context's error: a cancelled call returns ctx.Err()
// itself rather than whatever the HTTP stack made of the cancellation.
func ctxErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	return err
}

func (t *transport) newRequest(ctx context.Context, method, path, token string, body any) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		buf, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("bae: encode %s %s body: %w", method, path, err)
		}
		rd = bytes.NewReader(buf)
	}
	req, err := http.NewRequestWithContext(ctx, method, t.cfg.ServerURL+path, rd)
	if err != nil {
		return nil, fmt.Errorf("bae: %s %s: %w", method, path, err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	// Joins the server's spans to the caller's trace; writes nothing when
	// ctx carries no valid span context.
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
	return req, nil
}

// do sends a request and returns the response when it is 2xx; otherwise
// the body is decoded as a problem document.
func (t *transport) do(req *http.Request) (*http.Response, error) {
	t.cfg.Logger.DebugContext(req.Context(), "bae request", "method", req.Method, "path", req.URL.Path)
	resp, err := t.cfg.HTTPClient.Do(req)
	if err != nil {
		return nil, ctxErr(req.Context(), fmt.Errorf("bae: %s %s: %w", req.Method, req.URL.Path, err))
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp, nil
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return nil, ctxErr(req.Context(), fmt.Errorf("bae: %s %s: read error body: %w", req.Method, req.URL.Path, err))
	}
	return nil, problemFrom(resp.StatusCode, raw)
}

// problemFrom tolerates bodies that are not problem documents.
func problemFrom(status int, raw []byte) *ProblemError {
	p := &ProblemError{}
	if json.Unmarshal(raw, p) != nil || p.Type == "" {
		p = &ProblemError{Type: "unknown", Detail: strings.TrimSpace(string(raw))}
	}
	if p.Status == 0 {
		p.Status = status
	}
	if p.Title == "" {
		p.Title = http.StatusText(status)
	}
	return p
}

// restJSON performs a REST call and decodes the JSON response into out.
func (t *transport) restJSON(ctx context.Context, method, path, token string, body, out any) error {
	req, err := t.newRequest(ctx, method, path, token, body)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := t.do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return ctxErr(ctx, fmt.Errorf("bae: decode %s %s response: %w", method, path, err))
	}
	return nil
}

// rpcRequest is a JSON-RPC 2.0 request.
type rpcRequest struct {
	JSONRPC string `json:"jsonrpc"`
	ID      int64  `json:"id"`
	Method  string `json:"method"`
	Params  any    `json:"params"`
}

// frame is one NDJSON line of an /rpc response.
type frame struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *RPCError       `json:"error"`
}

// terminal reports whether the frame answers the request: it carries a
// non-null id. Everything else is a notification.
func (f *frame) terminal() bool {
	id := bytes.TrimSpace(f.ID)
	return len(id) > 0 && string(id) != "null"
}

// event decodes a session.event notification.
func (f *frame) event() (Event, bool, error) {
	if f.Method != "session.event" || len(f.Params) == 0 {
		return Event{}, false, nil
	}
	var e Event
	if err := json.Unmarshal(f.Params, &e); err != nil {
		return Event{}, false, fmt.Errorf("bae: decode session.event: %w", err)
	}
	return e, true, nil
}

// stream is an open /rpc NDJSON response.
type stream struct {
	ctx    context.Context
	method string
	body   io.ReadCloser
	dec    *json.Decoder
	header http.Header // the response's
}

// openRPC posts one JSON-RPC request and returns its response stream. A
// non-2xx status (auth is checked before the stream opens) is a
// *ProblemError.
func (t *transport) openRPC(ctx context.Context, sessionID, token string, req rpcRequest, header http.Header) (*stream, error) {
	path := "/api/v1/sessions/" + pathEscape(sessionID) + "/rpc"
	hreq, err := t.newRequest(ctx, http.MethodPost, path, token, req)
	if err != nil {
		return nil, err
	}
	for k, vs := range header {
		hreq.Header[k] = vs
	}
	hreq.Header.Set("Accept", "application/x-ndjson")
	resp, err := t.do(hreq)
	if err != nil {
		return nil, err
	}
	// json.Decoder reads NDJSON without a line-length limit: provider
	// payloads in notifications can be many megabytes.
	return &stream{ctx: ctx, method: req.Method, body: resp.Body, dec: json.NewDecoder(resp.Body), header: resp.Header}, nil
}

// next returns the next frame, or io.EOF when the server closed the stream.
func (s *stream) next() (*frame, error) {
	var f frame
	if err := s.dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			if cerr := s.ctx.Err(); cerr != nil {
				return nil, cerr
			}
			return nil, io.EOF
		}
		return nil, ctxErr(s.ctx, fmt.Errorf("bae: %s: read stream: %w", s.method, err))
	}
	return &f, nil
}

func (s *stream) close() { _ = s.body.Close() }
