package api

import (
	"encoding/json"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/bae-go/bae-go/store"
)

// methodFork is bae-go's opt-in session.fork (docs/api.md): BAE has no such
// method and its SDKs never call it.
const methodFork = "session.fork"

// forkParams are session.fork's params: the forking client's declarations,
// as at open, and the last event to inherit (default: the latest).
type forkParams struct {
	openBody
	AtEventID *string `json:"at_event_id"`
}

// fork creates a session whose history is this session's up to an event
// and answers with its id and the caller's session key on it, as an open
// does. Only a registered driver of the session may fork it; the session
// may be closed.
func (c *clientAPI) fork(call *rpcCall) {
	if _, ok := c.requireDriver(call); !ok {
		return
	}
	var params forkParams
	if len(call.params) > 0 && string(call.params) != "null" {
		if err := json.Unmarshal(call.params, &params); err != nil {
			call.fail(NewRPCError(-32602, "Invalid params: %v", err))
			return
		}
	}
	ctx := call.r.Context()
	// A fork is an open: it waits with the opens.
	release, _, ok := c.opens.acquire(ctx)
	if !ok {
		call.fail(NewRPCError(-32000, "server_busy: %s", busyDetail))
		return
	}
	defer release()
	profile, err := c.Store.GetProfile(ctx, call.sess.ProfileID)
	if errors.Is(err, store.ErrNotFound) {
		call.fail(NewRPCError(-32000, "profile_unavailable: the profile bound to this session is no longer available"))
		return
	}
	if err != nil {
		call.log.Error("fork: read profile", "err", err)
		call.fail(NewRPCError(-32603, "Internal error"))
		return
	}
	if p := validateDecl(params.openBody, profile); p != nil {
		call.fail(NewRPCError(-32602, "Invalid params: %s: %s", p.Type, p.Detail))
		return
	}
	var at int64
	if params.AtEventID != nil {
		at, err = c.Store.SeqOfEvent(ctx, call.sess.ID, *params.AtEventID)
		if errors.Is(err, store.ErrNotFound) {
			call.fail(NewRPCError(-32602, "Invalid params: no event %q in this session", *params.AtEventID))
			return
		}
		if err != nil {
			call.log.Error("fork: resolve event", "err", err)
			call.fail(NewRPCError(-32603, "Internal error"))
			return
		}
	}
	fork, fp, secret, err := c.Store.ForkSession(ctx, call.sess.ID, at, params.decl(call.clientID), params.payload(), c.Caps)
	var quota *store.QuotaError
	switch {
	case errors.Is(err, store.ErrClientKeyRevoked):
		call.fail(NewRPCError(-32000, "unauthorized: the client key was revoked"))
		return
	case errors.As(err, &quota):
		call.fail(NewRPCError(-32000, "quota_exceeded: %s", quotaDetail(quota)))
		return
	case errors.Is(err, store.ErrForkPoint):
		call.fail(NewRPCError(-32602, "Invalid params: no such event in this session"))
		return
	case err != nil:
		call.log.Error("fork", "err", err)
		call.fail(NewRPCError(-32603, "Internal error"))
		return
	}
	trace.SpanFromContext(ctx).SetAttributes(attribute.String("bae.fork.session.id", fork.ID),
		attribute.String("bae.fork.source.session.id", call.sess.ID), attribute.Int64("bae.fork.event_seq", fp.EventSeq))
	if ref := c.Spans.ChildRef(ctx); ref != "" {
		if err := c.Store.SetSessionSpan(ctx, fork.ID, ref); err != nil {
			call.log.Warn("store session span", "session_id", fork.ID, "err", err)
		}
	}
	call.result(map[string]any{
		"session_id":  fork.ID,
		"session_key": secret,
		"profile":     c.publicProfile(profile),
		"forked_from": map[string]any{"session_id": call.sess.ID, "event_seq": fp.EventSeq, "moved_to_turn_start": fp.Moved},
	})
}
