package console

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/bae-go/bae-go/store"
)

// The session page's fork actions ("fork from here", "rewind to here" on a
// turn) go through the admin API, as Stop does; the tree of forks is read
// from the store.

// maxForkTree bounds the sessions the tree draws.
const maxForkTree = 100

// forkNode is one session of a fork tree.
type forkNode struct {
	ID string
	// EventSeq is the last event it inherited (0 for the root).
	EventSeq int64
	Current  bool
	Children []*forkNode
}

// forkTree is the tree of forks sessionID belongs to, from its first
// source down; nil when the session is neither a fork nor forked.
func (c *Console) forkTree(ctx context.Context, sessionID string) (*forkNode, error) {
	root := sessionID
	for range maxForkTree {
		l, err := c.o.Store.Lineage(ctx, root)
		if err != nil {
			return nil, err
		}
		if l.ForkedFrom == nil {
			break
		}
		root = l.ForkedFrom.SessionID
	}
	n := 0
	var walk func(id string, seq int64) (*forkNode, error)
	walk = func(id string, seq int64) (*forkNode, error) {
		n++
		node := &forkNode{ID: id, EventSeq: seq, Current: id == sessionID}
		l, err := c.o.Store.Lineage(ctx, id)
		if err != nil {
			return nil, err
		}
		for _, f := range l.Forks {
			if n >= maxForkTree {
				break
			}
			child, err := walk(f.SessionID, f.EventSeq)
			if err != nil {
				return nil, err
			}
			node.Children = append(node.Children, child)
		}
		return node, nil
	}
	tree, err := walk(root, 0)
	if err != nil || len(tree.Children) == 0 {
		return nil, err
	}
	return tree, nil
}

// turnRewind rewinds the session to before a turn (the admin rewind route).
func (c *Console) turnRewind(w http.ResponseWriter, r *http.Request) {
	id, turn := chi.URLParam(r, "id"), chi.URLParam(r, "turn")
	if !validID.MatchString(id) || !validID.MatchString(turn) {
		c.renderError(w, r, http.StatusNotFound, "No such turn", "There is no turn "+turn+" in session "+id+".")
		return
	}
	if p := c.admin.call(r.Context(), http.MethodPost, "/admin/v1/sessions/"+id+"/rewind", map[string]any{"turn_id": turn}, nil); p != nil {
		if p.Status >= 500 {
			c.internal(w, r, p)
			return
		}
		c.renderError(w, r, p.Status, "The session was not rewound", problemText(p))
		return
	}
	http.Redirect(w, r, "/sessions/"+id, http.StatusSeeOther)
}

// sessionFork forks the session at an event for one of its participants
// and shows the fork. The fork's session key is not shown: the
// participant joins it with its client key, or an operator forks through
// the admin API to get one.
func (c *Console) sessionFork(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	at, key := strings.TrimSpace(r.PostFormValue("at")), strings.TrimSpace(r.PostFormValue("client_key_id"))
	if !validID.MatchString(id) || !validID.MatchString(at) || !validID.MatchString(key) {
		c.renderError(w, r, http.StatusBadRequest, "Nothing forked", "A fork needs a session, an event and a participant.")
		return
	}
	var res struct {
		SessionID string `json:"session_id"`
	}
	if p := c.admin.call(r.Context(), http.MethodPost, "/admin/v1/sessions/"+id+"/fork", map[string]any{"client_key_id": key, "at_event_id": at}, &res); p != nil {
		if p.Status >= 500 {
			c.internal(w, r, p)
			return
		}
		c.renderError(w, r, p.Status, "Nothing forked", problemText(p))
		return
	}
	if !validID.MatchString(res.SessionID) {
		c.internal(w, r, fmt.Errorf("fork answered session id %q", res.SessionID))
		return
	}
	http.Redirect(w, r, "/sessions/"+res.SessionID, http.StatusSeeOther)
}

// forkTreeOf is forkTree for the page: a failure to read it is logged and
// the page drawn without it.
func (c *Console) forkTreeOf(ctx context.Context, sess store.Session) *forkNode {
	t, err := c.forkTree(ctx, sess.ID)
	if err != nil {
		c.log.Warn("console: read the fork tree", "session_id", sess.ID, "err", err)
		return nil
	}
	return t
}
