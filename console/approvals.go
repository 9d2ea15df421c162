package console

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/bae-go/bae-go/api"
)

// The approvals page lists the server-side tool calls waiting for a
// person's yes, across sessions, each with the conversation that led to it
// and forms to approve (as asked, or with edited arguments) or reject with
// a message the model reads. Decisions go through the admin API's decision
// route, so the console's operator gets exactly its checks (the tool's
// input schema, one winner per approval).

// approvalDoc is an approval as the admin API shows it.
type approvalDoc struct {
	ID        string `json:"id"`
	SessionID string `json:"session_id"`
	TurnID    string `json:"turn_id"`
	ToolCall  struct {
		ID        string          `json:"id"`
		Kind      string          `json:"kind"`
		Name      string          `json:"name"`
		Server    string          `json:"server,omitempty"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"tool_call"`
	Deciders    string `json:"deciders"`
	Deadline    string `json:"deadline"`
	OnTimeout   string `json:"on_timeout"`
	State       string `json:"state"`
	RequestedAt string `json:"requested_at"`
}

// approvalCard is one pending approval on the page.
type approvalCard struct {
	A approvalDoc
	// Args is the model's arguments, indented, and what the edit box starts
	// with; FormArgs/FormMessage keep what the operator typed when the
	// decision was refused.
	Args                  string
	FormArgs, FormMessage string
	Error                 string
	// Turns are the conversation around the call: the turn that asked for
	// it and the one before.
	Turns []*turnView
	CSRF  string
}

// consoleOperator is who the admin API records as deciding from the
// console: the console has one password, not named operators.
const consoleOperator = "console"

// maxApprovalCards bounds the page; the oldest pending come first.
const maxApprovalCards = 50

func (c *Console) approvalsPage(w http.ResponseWriter, r *http.Request) {
	c.renderApprovals(w, r, http.StatusOK, nil, nil)
}

// pendingApprovals is the oldest maxApprovalCards pending approvals (the
// admin API lists them oldest first), and whether there are more: one
// page, so the live list stays one query however many are waiting.
func (c *Console) pendingApprovals(r *http.Request) ([]approvalDoc, bool, *api.Problem) {
	var page struct {
		Items      []approvalDoc `json:"items"`
		NextCursor *string       `json:"next_cursor"`
	}
	q := url.Values{"state": {"pending"}, "limit": {strconv.Itoa(maxApprovalCards)}}
	if p := c.admin.call(r.Context(), http.MethodGet, "/admin/v1/approvals?"+q.Encode(), nil, &page); p != nil {
		return nil, false, p
	}
	return page.Items, page.NextCursor != nil, nil
}

// renderApprovals draws the page; refused, when set, is the card whose
// decision the admin API refused, kept as the operator filled it in.
func (c *Console) renderApprovals(w http.ResponseWriter, r *http.Request, status int, extra map[string]any, refused *approvalCard) {
	list, more, p := c.pendingApprovals(r)
	if p != nil {
		c.internal(w, r, p)
		return
	}
	cards, err := c.approvalCards(r, list, refused)
	if err != nil {
		c.internal(w, r, err)
		return
	}
	data := map[string]any{"Cards": cards, "More": more, "Have": pendingKey(list, more)}
	if d := r.URL.Query().Get("decided"); validApprovalID(d) {
		data["Decided"] = d
		data["DecidedState"] = r.URL.Query().Get("state")
		if s := r.URL.Query().Get("session"); validID.MatchString(s) {
			data["DecidedSession"] = s
		}
	}
	for k, v := range extra {
		data[k] = v
	}
	c.render(w, r, status, "approvals", data)
}

// approvalCards builds the cards of list (at most maxApprovalCards), each
// with its conversation read from the session's log.
func (c *Console) approvalCards(r *http.Request, list []approvalDoc, refused *approvalCard) ([]approvalCard, error) {
	csrf := c.auth.csrfToken(loginFrom(r.Context()))
	logs := map[string][]transcriptItem{}
	cards := make([]approvalCard, 0, len(list))
	for _, a := range list {
		card := approvalCard{A: a, Args: pretty(a.ToolCall.Arguments), CSRF: csrf}
		card.FormArgs = card.Args
		if refused != nil && refused.A.ID == a.ID {
			card.FormArgs, card.FormMessage, card.Error = refused.FormArgs, refused.FormMessage, refused.Error
		}
		items, ok := logs[a.SessionID]
		if !ok {
			evs, err := c.loadEvents(r.Context(), a.SessionID, 0, 0)
			if err != nil {
				return nil, err
			}
			items = buildTranscript(evs)
			logs[a.SessionID] = items
		}
		card.Turns = turnsAround(items, a.TurnID)
		cards = append(cards, card)
	}
	return cards, nil
}

// turnsAround is the turn turnID and the turn before it.
func turnsAround(items []transcriptItem, turnID string) []*turnView {
	var turns []*turnView
	for _, it := range items {
		if it.Turn != nil {
			turns = append(turns, it.Turn)
		}
	}
	for i, t := range turns {
		if t.ID == turnID {
			return turns[max(0, i-1) : i+1]
		}
	}
	return nil
}

func validApprovalID(id string) bool { return strings.HasPrefix(id, "apr_") && validID.MatchString(id) }

// approvalDecide posts the operator's decision. Approving with arguments
// equal to the model's (however they are spaced) is a plain approval, so
// the log records an edit only when there was one.
func (c *Console) approvalDecide(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	if !validApprovalID(id) {
		c.renderError(w, r, http.StatusNotFound, "No such approval", "There is no approval "+id+".")
		return
	}
	var a approvalDoc
	if p := c.admin.call(r.Context(), http.MethodGet, "/admin/v1/approvals/"+id, nil, &a); p != nil {
		c.approvalRefused(w, r, p, nil)
		return
	}
	form := &approvalCard{A: a, FormArgs: r.PostForm.Get("arguments"), FormMessage: r.PostForm.Get("message")}
	body := map[string]any{"operator": consoleOperator}
	switch r.PostForm.Get("decision") {
	case "approve":
		body["decision"] = "approve"
		edited, err := editedArguments(a.ToolCall.Arguments, form.FormArgs)
		if err != nil {
			form.Error = err.Error()
			c.renderApprovals(w, r, http.StatusBadRequest, nil, form)
			return
		}
		if edited != nil {
			body["arguments"] = edited
		}
	case "reject":
		msg := strings.TrimSpace(form.FormMessage)
		if msg == "" {
			form.Error = "Say why: the message is what the model reads instead of the tool's result."
			c.renderApprovals(w, r, http.StatusBadRequest, nil, form)
			return
		}
		body["decision"], body["message"] = "reject", msg
	default:
		c.renderError(w, r, http.StatusBadRequest, "Bad form", "Choose approve or reject.")
		return
	}
	var decided approvalDoc
	if p := c.admin.call(r.Context(), http.MethodPost, "/admin/v1/approvals/"+id+"/decision", body, &decided); p != nil {
		c.approvalRefused(w, r, p, form)
		return
	}
	c.log.Info("console decided approval", "approval_id", id, "session_id", a.SessionID, "state", decided.State, "edited", body["arguments"] != nil)
	http.Redirect(w, r, "/approvals?"+url.Values{"decided": {id}, "state": {decided.State}, "session": {a.SessionID}}.Encode(), http.StatusSeeOther)
}

// approvalRefused shows the admin API's refusal: on the card (arguments
// that fail the tool's schema), or above the list (decided meanwhile, gone).
func (c *Console) approvalRefused(w http.ResponseWriter, r *http.Request, p *api.Problem, form *approvalCard) {
	if p.Status >= 500 {
		c.internal(w, r, p)
		return
	}
	if form != nil && p.Status == http.StatusUnprocessableEntity {
		form.Error = problemText(p)
		c.renderApprovals(w, r, p.Status, nil, form)
		return
	}
	msg := problemText(p)
	if p.Status == http.StatusConflict {
		msg = "Someone decided it first: " + msg
	}
	c.renderApprovals(w, r, p.Status, map[string]any{"Error": msg}, nil)
}

// editedArguments is the operator's arguments when they differ from the
// model's, nil when they do not.
func editedArguments(model json.RawMessage, typed string) (json.RawMessage, error) {
	typed = strings.TrimSpace(typed)
	if typed == "" {
		return nil, nil
	}
	var edited map[string]any
	if err := json.Unmarshal([]byte(typed), &edited); err != nil || edited == nil {
		return nil, errors.New("The arguments must be a JSON object.")
	}
	var orig map[string]any
	if json.Unmarshal(model, &orig) == nil && reflect.DeepEqual(orig, edited) {
		return nil, nil
	}
	return json.RawMessage(typed), nil
}

// approvalsPoll is how often the live list looks for new and decided
// approvals: they span every session, which no one session's wake-up
// covers.
const approvalsPoll = time.Second

// approvalsStream is a Server-Sent Events stream of the pending list:
// "approvals" (the cards, redrawn) whenever the set of pending approvals
// changes, "logout" once the login is no longer valid.
func (c *Console) approvalsStream(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	last := r.URL.Query().Get("have")
	tick := time.NewTicker(approvalsPoll)
	defer tick.Stop()
	for {
		if _, err := c.auth.verify(r); err != nil {
			if errors.Is(err, errNoLogin) {
				writeSSE(w, "logout", "", "/login?next="+url.QueryEscape("/approvals"))
				_ = rc.Flush()
			}
			return
		}
		list, more, p := c.pendingApprovals(r)
		if p != nil {
			c.log.Error("console approvals stream", "err", p)
			return
		}
		if key := pendingKey(list, more); key != last {
			cards, err := c.approvalCards(r, list, nil)
			if err != nil {
				c.log.Error("console approvals stream", "err", err)
				return
			}
			frag, err := c.pageFragment("approvals", "approval-cards", cards)
			if err != nil {
				c.log.Error("console approvals stream", "err", err)
				return
			}
			last = key
			writeSSE(w, "approvals", "", frag)
		} else {
			_, _ = w.Write([]byte(": keep-alive\n\n"))
		}
		if err := rc.Flush(); err != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// pendingKey names a pending list: the page hands it to its stream, which
// redraws only when it changes.
func pendingKey(list []approvalDoc, more bool) string {
	ids := make([]string, 0, len(list)+1)
	for _, a := range list {
		ids = append(ids, a.ID)
	}
	if more {
		ids = append(ids, "more")
	}
	return strings.Join(ids, ",")
}
