// Package api serves the two HTTP surfaces: the client port (REST plus the
// JSON-RPC /rpc stream) and the loopback-only admin port.
package api

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/bae-go/bae-go/store"
)

// Problem is an RFC 7807 error body.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

func (p *Problem) Error() string { return p.Type + ": " + p.Detail }

func problem(status int, slug, detail string) *Problem {
	return &Problem{Type: slug, Title: http.StatusText(status), Status: status, Detail: detail}
}

func badRequest(detail string) *Problem { return problem(http.StatusBadRequest, "bad_request", detail) }
func unauthorized(detail string) *Problem {
	return problem(http.StatusUnauthorized, "unauthorized", detail)
}
func notFound(detail string) *Problem        { return problem(http.StatusNotFound, "not_found", detail) }
func conflict(slug, detail string) *Problem  { return problem(http.StatusConflict, slug, detail) }
func forbidden(slug, detail string) *Problem { return problem(http.StatusForbidden, slug, detail) }
func unprocessable(slug, detail string) *Problem {
	return problem(http.StatusUnprocessableEntity, slug, detail)
}

// quotaExceeded is the 429 for a cap reached. No Retry-After: the cap frees
// up when the client closes something, not with time.
func quotaExceeded(e *store.QuotaError) *Problem {
	return problem(http.StatusTooManyRequests, "quota_exceeded", quotaDetail(e))
}

// quotaRPCError is the JSON-RPC answer for a cap reached, the stream's
// counterpart of quotaExceeded.
func quotaRPCError(e *store.QuotaError) *RPCError {
	return quotaRPC(quotaDetail(e))
}

// storedQuotaRPCError refuses a resend whose message is stored: the cap
// refusal says so, since a refused sendMessage otherwise stores nothing
// and a client would take the message for dropped while its turn runs.
func storedQuotaRPCError(e *store.QuotaError) *RPCError {
	return quotaRPC(quotaDetail(e) + "; this message is already stored and runs: send it again under the same Idempotency-Key to follow its turn")
}

// quotaRPC is the one JSON-RPC form of every quota_exceeded refusal: a
// cap, a queue or a spent budget, named in detail.
func quotaRPC(detail string) *RPCError {
	return NewRPCError(-32000, "quota_exceeded: %s", detail)
}

// quotaDetail says which cap was reached, for REST and JSON-RPC alike.
func quotaDetail(e *store.QuotaError) string {
	what, then := "open sessions", "close one first"
	switch e.Resource {
	case store.ResourceSandboxes:
		what = "running remote sandboxes"
	case store.ResourceStreams:
		what = "live streams (session.subscribe and session.sendMessage)"
	case store.ResourceQueuedTurns:
		what, then = "turns queued and not yet started", "wait for one to start"
	}
	scope := "this client key"
	switch e.Scope {
	case store.ScopeProfile:
		scope = "this client key's profile"
	case store.ScopeSession:
		scope = "this session"
	}
	return fmt.Sprintf("%s already has %d %s, the most allowed; %s", scope, e.Limit, what, then)
}

func tooLarge(detail string) *Problem {
	return problem(http.StatusRequestEntityTooLarge, "payload_too_large", detail)
}

// internalError logs the cause and returns a body that reveals nothing.
func internalError(log *slog.Logger, err error) *Problem {
	log.Error("internal error", "err", err)
	return problem(http.StatusInternalServerError, "internal", "an internal error occurred")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// handle adapts a handler returning a problem.
func handle(fn func(w http.ResponseWriter, r *http.Request) *Problem) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if p := fn(w, r); p != nil {
			writeProblem(w, p)
		}
	}
}

// unroutedProblems answers an unknown path or method on r with a problem.
func unroutedProblems(r chi.Router) {
	r.NotFound(func(w http.ResponseWriter, r *http.Request) { writeProblem(w, notFound("no route for "+r.URL.Path)) })
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, problem(http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" is not allowed on "+r.URL.Path))
	})
}

func writeProblem(w http.ResponseWriter, p *Problem) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}
