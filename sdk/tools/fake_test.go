package tools

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/sdk"
)

// recorder is a fake /rpc endpoint that records every call and answers
// with a fixed result per method.
type recorder struct {
	mu      sync.Mutex
	calls   []recorded
	results map[string]any // method → result; default {"ok":true}
}

type recorded struct {
	Method string
	Params map[string]any
}

func (r *recorder) byMethod(method string) []map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []map[string]any
	for _, c := range r.calls {
		if c.Method == method {
			out = append(out, c.Params)
		}
	}
	return out
}

// fakeSession returns a Session talking to a recorder, and a context
// carrying it (as inside a tool handler).
func fakeSession(t *testing.T, opts ...sdk.Option) (*sdk.Session, context.Context, *recorder) {
	t.Helper()
	rec := &recorder{results: map[string]any{}}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		var in struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params map[string]any  `json:"params"`
		}
		if err := json.Unmarshal(body, &in); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		rec.mu.Lock()
		rec.calls = append(rec.calls, recorded{in.Method, in.Params})
		res, ok := rec.results[in.Method]
		rec.mu.Unlock()
		if !ok {
			res = map[string]any{"ok": true}
		}
		out, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": in.ID, "result": res})
		_, _ = w.Write(append(out, '\n'))
	}))
	t.Cleanup(ts.Close)
	s, err := sdk.Attach(sdk.Config{ServerURL: ts.URL}, "ses_1", "bae_ses_1", opts...)
	require.NoError(t, err)
	return s, sdk.ContextWithSession(context.Background(), s), rec
}
