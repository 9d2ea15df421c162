package api

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/store"
)

// adminForkBody is POST /admin/v1/sessions/{id}/fork's body.
type adminForkBody struct {
	// ClientKeyID is the participant of the source the fork belongs to: it
	// keeps the declarations it made on the source and gets the session key.
	ClientKeyID string  `json:"client_key_id"`
	AtEventID   *string `json:"at_event_id"`
}

// adminFork forks any session on behalf of one of its participants.
func (a *adminAPI) adminFork(w http.ResponseWriter, r *http.Request) *Problem {
	ctx := r.Context()
	id := chi.URLParam(r, "id")
	var b adminForkBody
	c := &clientAPI{Deps: a.Deps}
	if p := c.decodeBody(w, r, &b); p != nil {
		return p
	}
	if b.ClientKeyID == "" {
		return badRequest("client_key_id is required: the participant the fork belongs to")
	}
	if _, err := a.Store.GetSession(ctx, id); errors.Is(err, store.ErrNotFound) {
		return notFound("no session " + id)
	} else if err != nil {
		return internalError(a.Log, err)
	}
	decl, err := a.Store.Client(ctx, id, b.ClientKeyID)
	if errors.Is(err, store.ErrNotFound) {
		return forbidden("not_a_participant", "client key "+b.ClientKeyID+" is not a participant of session "+id)
	}
	if err != nil {
		return internalError(a.Log, err)
	}
	var at int64
	if b.AtEventID != nil {
		if at, err = a.Store.SeqOfEvent(ctx, id, *b.AtEventID); errors.Is(err, store.ErrNotFound) {
			return badRequest("no event " + *b.AtEventID + " in session " + id)
		} else if err != nil {
			return internalError(a.Log, err)
		}
	}
	decl.Registered = false
	fork, fp, secret, err := a.Store.ForkSession(ctx, id, at, decl, declNames(decl), a.Caps)
	if p := openRefusal(err); p != nil {
		return p
	}
	if errors.Is(err, store.ErrForkPoint) {
		return badRequest("no such event in session " + id)
	}
	if err != nil {
		return internalError(a.Log, err)
	}
	a.Log.Info("admin fork", "session_id", id, "fork_session_id", fork.ID, "client_key_id", b.ClientKeyID, "event_seq", fp.EventSeq)
	writeJSON(w, http.StatusCreated, map[string]any{"session_id": fork.ID, "session_key": secret,
		"forked_from": map[string]any{"session_id": id, "event_seq": fp.EventSeq, "moved_to_turn_start": fp.Moved}})
	return nil
}

// declNames is the session.open payload of stored declarations.
func declNames(d store.ClientDecl) events.Declarations {
	names := func(raw json.RawMessage) []string {
		var defs []struct {
			Name string `json:"name"`
		}
		_ = json.Unmarshal(raw, &defs) // stored by open: well formed
		out := make([]string, 0, len(defs))
		for _, t := range defs {
			out = append(out, t.Name)
		}
		return out
	}
	return events.Declarations{ClientVersion: d.ClientVersion, Tools: names(d.Tools), SandboxTools: names(d.SandboxTools), SubagentTools: names(d.SubagentTools)}
}

// sessionLineage is GET /admin/v1/sessions/{id}/lineage.
func (a *adminAPI) sessionLineage(w http.ResponseWriter, r *http.Request) *Problem {
	id := chi.URLParam(r, "id")
	l, err := a.Store.Lineage(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		return notFound("no session " + id)
	}
	if err != nil {
		return internalError(a.Log, err)
	}
	writeJSON(w, http.StatusOK, l)
	return nil
}
