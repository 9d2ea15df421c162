package crashlib

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/bae-go/bae-go/store"
	"github.com/bae-go/bae-go/workflows"
)

// verify checks the run from the outside, after the last crash: the public
// event log of every session, the admin API, the Session workflows'
// control state, and (to tell "never stored" from "stored and dropped"
// when a message is missing) the turn_inputs table.
func verify(ctx context.Context, st *stack, a *api, drivers []*driver, rep *Report) error {
	v := func(format string, args ...any) {
		rep.Violations = append(rep.Violations, fmt.Sprintf(format, args...))
	}
	rep.Landings = map[string]int{}
	pausedAbandons := 0            // pauses the client left unanswered on purpose
	dropped := map[string]string{} // turn id -> the client call it dropped
	seenIDs := map[string]string{}
	conn, err := pgx.Connect(ctx, st.dbURL)
	if err != nil {
		return fmt.Errorf("connect to the run's database: %w", err)
	}
	defer conn.Close(ctx)

	for _, d := range drivers {
		calls := d.snapshot()
		if d.stopped {
			last := calls[len(calls)-1]
			v("s%d: the server rejected %s %s with %d %q; the session's remaining turns were not sent", d.n, last.Kind, last.Key, last.ErrTerm.Code, last.ErrTerm.Message)
		}
		evs, err := a.events(ctx, d.sess)
		if err != nil {
			return fmt.Errorf("read events of session %d: %w", d.n, err)
		}
		rep.Events += len(evs)
		for _, e := range evs {
			if prev, dup := seenIDs[e.ID]; dup {
				v("s%d: duplicate event id %s (%s and %s)", d.n, e.ID, prev, e.Type)
			}
			seenIDs[e.ID] = e.Type
			if e.Type == "provider.request" {
				rep.ProviderLogged++
			}
		}
		segs := segments(evs)
		claimed := make([]bool, len(segs))
		prev := -1
		for _, c := range calls {
			rep.count(c)
			if c.Wrong != "" {
				v("s%d %s %s: wrong reply: %s", d.n, c.Kind, c.Key, c.Wrong)
			}
			var idx []int
			for i, s := range segs {
				if c.Key.matches(s.cms.Payload) {
					idx = append(idx, i)
				}
			}
			if len(idx) == 0 {
				what := fmt.Sprintf("s%d %s %s: no client.message.send in the log (sent %s%s; client: %s)", d.n, c.Kind, c.Key,
					c.Start.UTC().Format(store.TimeFormat), nextKill(rep.Kills, c.Start), c.outcome())
				turn, state := storedInput(ctx, conn, d.sess.ID, c.Key)
				switch {
				case state == neverStored && c.Broken:
					// The kill fell between the server's 200 and its INSERT:
					// the wire gives the client no way to know, and no
					// turn ever existed to finish.
					rep.Undelivered = append(rep.Undelivered, what+"; never stored")
				case state == storedNotBegun:
					dropped[turn] = what // reported with the turn input below
				default:
					v("%s; %s", what, state)
				}
				continue
			}
			if len(idx) > 1 {
				v("s%d %s %s: %d client.message.send events, want 1 (events %s)", d.n, c.Kind, c.Key, len(idx), segIDs(segs, idx))
			}
			i := idx[0]
			claimed[i] = true
			if i <= prev {
				v("s%d %s %s: logged out of send order (turn %d after turn %d)", d.n, c.Kind, c.Key, i, prev)
			}
			prev = i
			seg := segs[i]
			if c.Lost != "" {
				v("s%d %s %s: the client could not recover the reply (%s), although the turn is in the log", d.n, c.Kind, c.Key, c.Lost)
			}
			sms := seg.replies()
			if len(sms) != 1 {
				v("s%d %s %s: %d server.message.send events in its turn, want 1 (turn: %s)", d.n, c.Kind, c.Key, len(sms), seg.describe())
			}
			if len(sms) > 0 {
				logged := sms[len(sms)-1].Payload
				if c.Kind == kindTool {
					if c.Abandon && clientToolUseID(logged) != "" {
						pausedAbandons++
					}
					if clientToolUseID(logged) == "" {
						v("s%d %s %s: logged reply has no client tool_use: %s", d.n, c.Kind, c.Key, logged)
					}
				} else if got := messageText(logged); got != c.ExpectText {
					v("s%d %s %s: logged reply %q, want %q", d.n, c.Kind, c.Key, got, c.ExpectText)
				}
				if c.Terminal != nil && !sameJSON(contentOf(c.Terminal), contentOf(logged)) {
					v("s%d %s %s: terminal result %s differs from the logged reply %s", d.n, c.Kind, c.Key, c.Terminal, logged)
				}
			}
			for _, msg := range seg.providerViolations() {
				v("s%d %s %s: %s (turn: %s)", d.n, c.Kind, c.Key, msg, seg.describe())
			}
			for _, e := range seg.events {
				if e.Type == "session.error" {
					v("s%d %s %s: session.error %s in its turn", d.n, c.Kind, c.Key, e.Payload)
				}
			}
		}
		for i, s := range segs {
			if !claimed[i] {
				v("s%d: a turn nobody sent (or a repeat): client.message.send %s %s", d.n, s.cms.ID, contentOf(s.cms.Payload))
			}
		}
		rep.pauses(d.n, segs, v)
		rep.landings(calls, segs)

		// The Session workflow: nothing queued, running or paused at the end.
		resp, err := st.tc.QueryWorkflow(ctx, d.sess.ID, "", workflows.QueryControl)
		if err != nil {
			v("s%d: query the Session workflow: %v", d.n, err)
		} else {
			var cv workflows.ControlView
			if err := resp.Get(&cv); err != nil {
				return fmt.Errorf("decode control view: %w", err)
			}
			if cv.Busy || cv.Queued > 0 || cv.Closed || cv.Paused != nil {
				v("s%d: Session workflow not idle at the end: %+v", d.n, cv)
			}
		}
	}

	// Messages the server stored but never turned into a turn.
	rows, err := conn.Query(ctx, `SELECT turn_id, session_id, message::text, created_at FROM turn_inputs WHERE begin_result IS NULL ORDER BY created_at`)
	if err != nil {
		return fmt.Errorf("read turn inputs: %w", err)
	}
	type orphan struct {
		turn, sess, msg string
		at              time.Time
	}
	orphans, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (orphan, error) {
		var o orphan
		err := r.Scan(&o.turn, &o.sess, &o.msg, &o.at)
		return o, err
	})
	if err != nil {
		return fmt.Errorf("read turn inputs: %w", err)
	}
	for _, o := range orphans {
		client := dropped[o.turn]
		if client == "" {
			client = "no client call matches it"
		}
		v("turn input %s (session %s, stored %s%s) never began: the server stored %s and dropped it; %s; %s",
			o.turn, o.sess, o.at.UTC().Format(store.TimeFormat), nextKill(rep.Kills, o.at), o.msg, updateInHistory(ctx, st, o.sess, o.turn), client)
	}

	if rep.Abandoned < pausedAbandons {
		v("%d pauses were abandoned by the next message, want at least the %d left unanswered on purpose", rep.Abandoned, pausedAbandons)
	}

	// The admin API lists every session, open.
	list, err := a.adminSessions(ctx)
	if err != nil {
		return fmt.Errorf("admin sessions: %w", err)
	}
	state := map[string]string{}
	for _, s := range list {
		state[s.ID] = s.State
	}
	for _, d := range drivers {
		if state[d.sess.ID] != store.StateOpen {
			v("s%d: admin API shows session %s as %q, want open", d.n, d.sess.ID, state[d.sess.ID])
		}
	}
	rep.ProviderServed = st.fake.RequestCount()
	if rep.ProviderServed < rep.ProviderLogged {
		v("the fake served %d provider requests but %d provider.request events were logged", rep.ProviderServed, rep.ProviderLogged)
	}
	return nil
}

// Where a message missing from the log got to, per turn_inputs.
const (
	neverStored    = "never stored"
	storedNotBegun = "stored, never begun"
)

// storedInput finds a missing message in turn_inputs: its turn id and
// neverStored, storedNotBegun or another description.
func storedInput(ctx context.Context, conn *pgx.Conn, sessionID string, k matchKey) (string, string) {
	needle := k.Text
	if k.ToolUseID != "" {
		needle = k.ToolUseID
	}
	var turn string
	var began bool
	err := conn.QueryRow(ctx, `SELECT turn_id, begin_result IS NOT NULL FROM turn_inputs WHERE session_id = $1 AND strpos(message::text, $2) > 0 LIMIT 1`, sessionID, needle).Scan(&turn, &began)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return "", neverStored
	case err != nil:
		return "", "turn_inputs lookup failed: " + err.Error()
	case began:
		return turn, "stored as " + turn + " and begun, yet not in the log"
	default:
		return turn, storedNotBegun
	}
}

func segIDs(segs []segment, idx []int) string {
	var ids []string
	for _, i := range idx {
		ids = append(ids, segs[i].cms.ID)
	}
	return strings.Join(ids, ", ")
}

// describe lists a turn's event types, for violation messages.
func (s segment) describe() string {
	parts := []string{"client.message.send " + s.cms.ID}
	for _, e := range s.events {
		p := e.Type
		if strings.HasPrefix(e.Type, "provider.") {
			var pl struct {
				Attempt int   `json:"attempt"`
				OK      *bool `json:"ok"`
			}
			_ = json.Unmarshal(e.Payload, &pl)
			p += fmt.Sprintf("(a%d", pl.Attempt)
			if pl.OK != nil {
				p += fmt.Sprintf(",ok=%v", *pl.OK)
			}
			p += ")"
		}
		parts = append(parts, p+" "+e.ID)
	}
	return strings.Join(parts, " → ")
}

// providerViolations checks that provider events come as request/response
// pairs per attempt, and (the fake never asks for server tools) that the
// turn made exactly one successful provider round trip.
func (s segment) providerViolations() []string {
	var out []string
	var open *int
	pairs := 0
	for _, e := range s.events {
		if !strings.HasPrefix(e.Type, "provider.") {
			continue
		}
		var pl struct {
			Attempt int  `json:"attempt"`
			OK      bool `json:"ok"`
		}
		if err := json.Unmarshal(e.Payload, &pl); err != nil {
			out = append(out, fmt.Sprintf("undecodable %s payload", e.Type))
			continue
		}
		switch e.Type {
		case "provider.request":
			if open != nil {
				out = append(out, fmt.Sprintf("provider.request a%d while a%d has no response", pl.Attempt, *open))
			}
			a := pl.Attempt
			open = &a
		case "provider.response":
			switch {
			case open == nil:
				out = append(out, fmt.Sprintf("provider.response a%d without a request", pl.Attempt))
			case *open != pl.Attempt:
				out = append(out, fmt.Sprintf("provider.response a%d answers request a%d", pl.Attempt, *open))
			case !pl.OK:
				out = append(out, fmt.Sprintf("provider.response a%d not ok: %s", pl.Attempt, e.Payload))
			default:
				pairs++
			}
			open = nil
		}
	}
	if open != nil {
		out = append(out, fmt.Sprintf("provider.request a%d has no response", *open))
	}
	if pairs != 1 {
		out = append(out, fmt.Sprintf("%d provider request/response pairs, want 1", pairs))
	}
	return out
}

func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// updateInHistory says what the Session workflow's history knows of the
// SendMessage update whose id is turnID.
func updateInHistory(ctx context.Context, st *stack, sessionID, turnID string) string {
	it := st.tc.GetWorkflowHistory(ctx, sessionID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var found []string
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			return "workflow history unreadable: " + err.Error()
		}
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ADMITTED:
			if e.GetWorkflowExecutionUpdateAdmittedEventAttributes().GetRequest().GetMeta().GetUpdateId() == turnID {
				found = append(found, fmt.Sprintf("admitted at event %d", e.GetEventId()))
			}
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
			if e.GetWorkflowExecutionUpdateAcceptedEventAttributes().GetAcceptedRequest().GetMeta().GetUpdateId() == turnID {
				found = append(found, fmt.Sprintf("accepted at event %d", e.GetEventId()))
			}
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED:
			if e.GetWorkflowExecutionUpdateCompletedEventAttributes().GetMeta().GetUpdateId() == turnID {
				found = append(found, fmt.Sprintf("completed at event %d", e.GetEventId()))
			}
		}
	}
	if len(found) == 0 {
		return "the Session workflow's history has no SendMessage update with that id (never accepted)"
	}
	return "the Session workflow's history shows the update " + strings.Join(found, ", ")
}

// nextKill names the first kill after t, for evidence.
func nextKill(kills []kill, t time.Time) string {
	for _, k := range kills {
		if k.At.After(t) {
			return fmt.Sprintf(", %s before kill %d", k.At.Sub(t).Round(time.Millisecond), k.N)
		}
	}
	return ", after the last kill"
}

func parseTime(s string) time.Time {
	t, _ := time.Parse(store.TimeFormat, s)
	return t
}
