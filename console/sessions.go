package console

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/bae-go/bae-go/api/wire"
	"github.com/bae-go/bae-go/internal/lib/live"
	"github.com/bae-go/bae-go/store"
)

const sessionsPerPage = 25

// validID matches the server's ids (prefix_ + hex), so nothing else reaches
// a query or a Temporal call.
var validID = regexp.MustCompile(`^[a-z]{3}_[0-9a-f]{32}$`)

func (c *Console) sessionsPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := store.SessionFilter{State: q.Get("state"), ProfileID: strings.TrimSpace(q.Get("profile")), IDPrefix: strings.TrimSpace(q.Get("q"))}
	var problems []string
	switch f.State {
	case "", store.StateOpen, store.StateClosed, store.StateError:
	default:
		problems = append(problems, "Unknown state "+strconv.Quote(f.State)+"; showing every state.")
		f.State = ""
	}
	if len(f.IDPrefix) > 64 {
		f.IDPrefix = f.IDPrefix[:64]
	}
	var before int64
	if b := q.Get("before"); b != "" {
		v, err := strconv.ParseInt(b, 10, 64)
		if err != nil || v < 0 {
			problems = append(problems, "Ignored a malformed page cursor.")
		} else {
			before = v
		}
	}
	page, err := c.o.Store.SearchSessions(r.Context(), f, before, sessionsPerPage)
	if err != nil {
		c.internal(w, r, err)
		return
	}
	profiles, names, p := c.admin.profileNames(r.Context())
	if p != nil {
		c.internal(w, r, p)
		return
	}
	var older string
	if page.NextCursor != nil {
		v := url.Values{"before": {*page.NextCursor}}
		for _, k := range []string{"state", "profile", "q"} {
			if q.Get(k) != "" {
				v.Set(k, q.Get(k))
			}
		}
		older = "/sessions?" + v.Encode()
	}
	c.render(w, r, http.StatusOK, "sessions", map[string]any{
		"Sessions": page.Items, "Profiles": profiles, "ProfileNames": names, "Filter": f,
		"States": []string{store.StateOpen, store.StateClosed, store.StateError},
		"Older":  older, "FirstPage": before == 0, "Problems": problems,
	})
}

// maxEventsShown bounds what one session page (and its stream) holds.
const maxEventsShown = 5000

// loadEvents reads a session's log from after on, up to maxEventsShown.
func (c *Console) loadEvents(ctx context.Context, sessionID string, after int64, have int) ([]store.Event, error) {
	var out []store.Event
	for have+len(out) < maxEventsShown {
		batch, err := c.o.Store.EventsAfter(ctx, sessionID, after, min(500, maxEventsShown-have-len(out)))
		if err != nil {
			return nil, err
		}
		out = append(out, batch...)
		if len(batch) < 500 {
			break
		}
		after = batch[len(batch)-1].Seq
	}
	return out, nil
}

// sessionView is what the session page and its stream draw.
type sessionView struct {
	Session     store.Session
	Items       []transcriptItem
	Rows        []timelineRow
	Last        int64
	Truncated   bool
	WorkflowURL string
	TurnLinks   bool
	// CSRF is the login's token, for the Stop buttons of running turns.
	CSRF string
	// Originals: the view is a compaction's original events, drawn inside
	// the transcript (no Stop buttons, no Temporal links).
	Originals bool
}

func (c *Console) viewOf(sess store.Session, evs []store.Event) sessionView {
	v := sessionView{Session: sess, Items: buildTranscript(evs), WorkflowURL: c.links.workflowURL(sess.ID), TurnLinks: c.links.enabled()}
	for _, e := range evs {
		v.Rows = append(v.Rows, timelineOf(e))
	}
	if n := len(evs); n > 0 {
		v.Last = evs[n-1].Seq
	}
	v.Truncated = len(evs) >= maxEventsShown
	return v
}

func (c *Console) session(w http.ResponseWriter, r *http.Request) (store.Session, bool) {
	id := chi.URLParam(r, "id")
	if !validID.MatchString(id) {
		c.renderError(w, r, http.StatusNotFound, "No such session", "There is no session "+id+".")
		return store.Session{}, false
	}
	sess, err := c.o.Store.GetSession(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		c.renderError(w, r, http.StatusNotFound, "No such session", "There is no session "+id+".")
		return store.Session{}, false
	}
	if err != nil {
		c.internal(w, r, err)
		return store.Session{}, false
	}
	return sess, true
}

func (c *Console) sessionPage(w http.ResponseWriter, r *http.Request) {
	sess, ok := c.session(w, r)
	if !ok {
		return
	}
	evs, err := c.loadEvents(r.Context(), sess.ID, 0, 0)
	if err != nil {
		c.internal(w, r, err)
		return
	}
	profileName := ""
	var prof wire.Profile
	if p := c.admin.call(r.Context(), http.MethodGet, "/admin/v1/profiles/"+sess.ProfileID, nil, &prof); p == nil {
		profileName = prof.Name
	}
	v := c.viewOf(sess, evs)
	v.CSRF = c.auth.csrfToken(loginFrom(r.Context()))
	data := map[string]any{"V": v, "ProfileName": profileName, "Forks": c.forkTreeOf(r.Context(), sess)}
	var usage wire.SessionUsage
	if p := c.admin.call(r.Context(), http.MethodGet, "/admin/v1/sessions/"+sess.ID+"/usage", nil, &usage); p == nil {
		data["Usage"] = usage
	}
	c.render(w, r, http.StatusOK, "session", data)
}

// sessionStream is a Server-Sent Events stream of the session's new events:
// "timeline" (new rows), "transcript" (the whole transcript, redrawn),
// "delta" (pieces of running turns' answers, see deltas.go), "state", then
// "end" once the session is over, or "logout" as soon as the login is no
// longer valid. The login is re-checked on every wake-up (at most once a
// second for deltas) and every RecheckEvery, so an expired login ends the
// stream.
func (c *Console) sessionStream(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	if !validID.MatchString(id) {
		http.NotFound(w, r)
		return
	}
	ctx := r.Context()
	sess, err := c.o.Store.GetSession(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		http.NotFound(w, r)
		return
	}
	if err != nil {
		c.log.Error("console stream", "session_id", id, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	after := int64(0)
	for _, v := range []string{r.Header.Get("Last-Event-ID"), r.URL.Query().Get("after")} {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
			after = n
			break
		}
	}
	waiter := c.o.Hub.Watch(id)
	defer waiter.Close()
	// Subscribed before the log is read, so no delta falls between the two;
	// the browser drops the ones it already has by their sequence.
	deltas := c.o.Hub.Deltas().Subscribe(id)
	defer deltas.Close()
	// The transcript folds results into calls, so it is redrawn from the
	// whole log; only the timeline is sent incrementally.
	evs, err := c.loadEvents(ctx, id, 0, 0)
	if err != nil {
		c.log.Error("console stream", "session_id", id, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	csrf := c.auth.csrfToken(loginFrom(ctx))
	sent := after
	state := ""
	send := func() error {
		var fresh []store.Event
		for _, e := range evs {
			if e.Seq > sent {
				fresh = append(fresh, e)
			}
		}
		if len(fresh) > 0 {
			rows := make([]timelineRow, 0, len(fresh))
			for _, e := range fresh {
				rows = append(rows, timelineOf(e))
			}
			v := c.viewOf(sess, evs)
			v.CSRF = csrf
			tl, err := c.fragment("timeline-rows", rows)
			if err != nil {
				return err
			}
			tr, err := c.fragment("transcript", v)
			if err != nil {
				return err
			}
			sent = fresh[len(fresh)-1].Seq
			writeSSE(w, "timeline", strconv.FormatInt(sent, 10), tl)
			writeSSE(w, "transcript", "", tr)
		}
		if sess.State != state {
			state = sess.State
			writeSSE(w, "state", "", state)
		}
		return rc.Flush()
	}
	if err := send(); err != nil {
		return
	}
	// The running turns' answers so far, from what this replica kept.
	if sess.State == store.StateOpen {
		for _, t := range runningTurns(evs) {
			backlog, complete := c.o.Hub.Deltas().Backlog(sess.ID, t, 0)
			switch {
			case complete && len(backlog) > 0:
				writeSSE(w, "delta", "", deltaJSON(backlog))
			case !complete && len(backlog) > 0:
				writeSSE(w, "delta", "", deltaJSON([]live.Delta{{TurnID: t, Type: live.DeltaReset}}))
			}
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
	recheck := time.NewTicker(c.o.RecheckEvery)
	defer recheck.Stop()
	// Wake exactly when the login runs out, not only on the next tick.
	expiry := time.NewTimer(time.UnixMilli(loginFrom(ctx).Expires).Sub(c.o.Now()))
	defer expiry.Stop()
	var verified time.Time
	wokeForDeltas := false
	for {
		// Deltas may come many times a second: the login is checked for
		// them at most once a second (and at once on any other wake-up).
		if !wokeForDeltas || time.Since(verified) >= deltaRecheck {
			if _, err := c.auth.verify(r); err != nil {
				// A login that could not be checked ends the stream without
				// "logout": the browser reconnects and is checked again.
				if errors.Is(err, errNoLogin) {
					writeSSE(w, "logout", "", "/login?next="+url.QueryEscape("/sessions/"+id))
					_ = rc.Flush()
				}
				return
			}
			verified = time.Now()
		}
		if wokeForDeltas {
			wokeForDeltas = false
			if err := c.sendDeltas(w, rc, deltas); err != nil {
				return
			}
		}
		if sess.State != store.StateOpen && sent >= lastSeq(evs) {
			writeSSE(w, "end", "", sess.State)
			_ = rc.Flush()
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-recheck.C:
			fmt.Fprint(w, ": keep-alive\n\n")
		case <-expiry.C:
		case <-deltas.Ready():
			wokeForDeltas = true
			continue
		case <-waiter.Wake():
		}
		// A turn's deltas go out before its events: the final message then
		// replaces the live text, never the other way round.
		if err := c.sendDeltas(w, rc, deltas); err != nil {
			return
		}
		// State first: a session ends in the same transaction as its last
		// events, so once it reads as ended, those events are readable.
		if s, err := c.o.Store.GetSession(ctx, id); err == nil {
			sess = s
		}
		if len(evs) < maxEventsShown {
			more, err := c.loadEvents(ctx, id, lastSeq(evs), len(evs))
			if err != nil {
				return
			}
			evs = append(evs, more...)
		}
		if err := send(); err != nil {
			return
		}
	}
}

func lastSeq(evs []store.Event) int64 {
	if len(evs) == 0 {
		return 0
	}
	return evs[len(evs)-1].Seq
}

// sseLineEndings are the three line endings of the event-stream format.
var sseLineEndings = strings.NewReplacer("\r\n", "\n", "\r", "\n")

// writeSSE writes one event. Every line of data gets its own "data:", lines
// being split at each of \r\n, \r and \n as the browser splits them: data
// carries text from drivers and models, and a line ending left inside a
// field would let that text start fields or events of its own. The browser
// joins the lines with \n again. event and id are the server's own and must
// not hold a line ending.
func writeSSE(w io.Writer, event, id, data string) {
	var b strings.Builder
	b.WriteString("event: " + event + "\n")
	if id != "" {
		b.WriteString("id: " + id + "\n")
	}
	for line := range strings.SplitSeq(sseLineEndings.Replace(data), "\n") {
		b.WriteString("data: " + line + "\n")
	}
	b.WriteString("\n")
	_, _ = io.WriteString(w, b.String())
}

// turnTemporal redirects to the turn's update in the Temporal UI.
func (c *Console) turnTemporal(w http.ResponseWriter, r *http.Request) {
	id, turn := chi.URLParam(r, "id"), chi.URLParam(r, "turn")
	if !c.links.enabled() || !validID.MatchString(id) || !validID.MatchString(turn) {
		c.renderError(w, r, http.StatusNotFound, "No Temporal link", "Set BAE_CONSOLE_TEMPORAL_UI_URL to link turns to the Temporal UI.")
		return
	}
	http.Redirect(w, r, c.links.turnURL(r.Context(), id, turn), http.StatusFound)
}

// turnStop interrupts a running turn through the admin API's interrupt
// route (what the turn produced so far is kept, marked interrupted) and
// goes back to the session.
func (c *Console) turnStop(w http.ResponseWriter, r *http.Request) {
	id, turn := chi.URLParam(r, "id"), chi.URLParam(r, "turn")
	if !validID.MatchString(id) || !validID.MatchString(turn) {
		c.renderError(w, r, http.StatusNotFound, "No such turn", "There is no turn "+turn+" in session "+id+".")
		return
	}
	if p := c.admin.call(r.Context(), http.MethodPost, "/admin/v1/sessions/"+id+"/interrupt", map[string]any{"turnId": turn}, nil); p != nil {
		if p.Status >= 500 {
			c.internal(w, r, p)
			return
		}
		c.renderError(w, r, p.Status, "The turn was not stopped", problemText(p))
		return
	}
	http.Redirect(w, r, "/sessions/"+id, http.StatusSeeOther)
}
