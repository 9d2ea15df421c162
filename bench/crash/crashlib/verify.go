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
	"go.temporal.io/sdk/converter"

	"github.com/bae-go/bae-go/bench/benchstack"
	"github.com/bae-go/bae-go/internal/provider"
	"github.com/bae-go/bae-go/store"
	"github.com/bae-go/bae-go/workflows"
)

// Problem classes: what the report counts per kill point and outage.
const (
	classUndelivered = "undelivered" // the client never got a terminal result
	classLost        = "lost"        // a message, its turn or its reply is missing from the log
	classDuplicated  = "duplicated"  // an event (a message, a reply, a provider call) logged twice
	classSideEffect  = "side effect" // a sandbox command ran more (or less) than once
	classTurnFailed  = "turn_failed" // the turn ended in session.error turn_failed
	classOther       = "other"
	classUsage       = "usage" // the usage recorded differs from what the log's responses report
)

// verify checks the run from the outside, after the last crash: the public
// event log of every session, the admin API, the Session workflows'
// control state, the sandbox counters, the MCP server's call counts, and
// (to tell "never stored" from "stored and dropped" when a message is
// missing) the turn_inputs table.
func verify(ctx context.Context, st *stack, a *api, drivers []*driver, sb *sandboxes, mc *mcpCounter, rep *Report) error {
	rep.Problems = map[*call]map[string]bool{}
	// v records a violation; c (nil for none) is the call it concerns.
	v := func(class string, c *call, format string, args ...any) {
		rep.Violations = append(rep.Violations, fmt.Sprintf("[%s] ", class)+fmt.Sprintf(format, args...))
		rep.Classes[class]++
		if c == nil {
			rep.Untied++
		} else {
			if rep.Problems[c] == nil {
				rep.Problems[c] = map[string]bool{}
			}
			rep.Problems[c][class] = true
		}
	}
	rep.Classes = map[string]int{}
	rep.Landings = map[string]int{}
	pausedAbandons := 0            // pauses the client left unanswered on purpose
	dropped := map[string]string{} // turn id -> the client call it dropped
	seenIDs := map[string]string{}
	conn, err := pgx.Connect(ctx, st.db.URL)
	if err != nil {
		return fmt.Errorf("connect to the run's database: %w", err)
	}
	defer conn.Close(ctx)

	for _, d := range drivers {
		calls := d.snapshot()
		rep.Calls = append(rep.Calls, calls...)
		if d.stopped {
			last := calls[len(calls)-1]
			v(classOther, last, "s%d: the server rejected %s %s (%s); the session's remaining turns were not sent", d.n, last.Kind, last.Key, last.Lost)
		}
		evs, err := events(ctx, d.sess)
		if err != nil {
			return fmt.Errorf("read events of session %d: %w", d.n, err)
		}
		rep.Events += len(evs)
		for _, e := range evs {
			if prev, dup := seenIDs[e.ID]; dup {
				v(classDuplicated, nil, "s%d: duplicate event id %s (%s and %s)", d.n, e.ID, prev, e.Type)
			}
			seenIDs[e.ID] = e.Type
			if e.Type == "provider.request" {
				rep.ProviderLogged++
			}
		}
		if msg, err := usageMismatch(ctx, conn, d.sess.ID, evs); err != nil {
			return fmt.Errorf("read usage of session %d: %w", d.n, err)
		} else if msg != "" {
			v(classUsage, nil, "s%d: %s", d.n, msg)
		}
		var counters map[string]int
		if sb != nil {
			if counters, err = benchstack.SandboxCounts(ctx, d.box, counterDir); err != nil {
				return fmt.Errorf("read sandbox counters of session %d: %w", d.n, err)
			}
		}
		segs := segments(evs)
		claimed := make([]bool, len(segs))
		prev := -1
		for _, c := range calls {
			rep.count(c)
			if c.Lost != "" {
				v(classUndelivered, c, "s%d %s %s: no terminal result: %s", d.n, c.Kind, c.Key, c.Lost)
			}
			if c.Wrong != "" {
				v(classOther, c, "s%d %s %s: wrong reply: %s", d.n, c.Kind, c.Key, c.Wrong)
			}
			if c.TurnFailed {
				v(classTurnFailed, c, "s%d %s %s: the turn failed: %d %q", d.n, c.Kind, c.Key, c.ErrTerm.Code, c.ErrTerm.Message)
			}
			switch c.Kind {
			case kindSandbox:
				switch n := counters[c.Tag]; {
				case n > 1:
					rep.SandboxRepeats++
					v(classSideEffect, c, "s%d %s %s: the sandbox command ran %d times (counter %s/%s)", d.n, c.Kind, c.Key, n, counterDir, c.Tag)
				case n == 0 && c.Terminal != nil:
					v(classSideEffect, c, "s%d %s %s: answered, but the sandbox command never ran", d.n, c.Kind, c.Key)
				}
			case kindMCP:
				if n := mc.count(c.Tag); n > 1 {
					rep.MCPRepeats++
					c.MCPCalls = n
				}
			}
			var idx []int
			for i, s := range segs {
				if c.Key.matches(s.cms.Payload) {
					idx = append(idx, i)
				}
			}
			if len(idx) == 0 {
				what := fmt.Sprintf("s%d %s %s: no client.message.send in the log (sent %s%s; client: %s)", d.n, c.Kind, c.Key,
					c.Start.UTC().Format(store.TimeFormat), nextEvent(rep.Chaos, c.Start), c.outcome())
				turn, state := storedInput(ctx, conn, d.sess.ID, c.Key)
				switch {
				case state == neverStored && c.Terminal == nil:
					// Never stored, and the client knows no result: counted as
					// undelivered above.
				case state == storedNotBegun:
					dropped[turn] = what // reported with the turn input below
				default:
					v(classLost, c, "%s; %s", what, state)
				}
				continue
			}
			if len(idx) > 1 {
				v(classDuplicated, c, "s%d %s %s: %d client.message.send events, want 1 (events %s)", d.n, c.Kind, c.Key, len(idx), segIDs(segs, idx))
			}
			i := idx[0]
			claimed[i] = true
			if i <= prev {
				v(classOther, c, "s%d %s %s: logged out of send order (turn %d after turn %d)", d.n, c.Kind, c.Key, i, prev)
			}
			prev = i
			seg := segs[i]
			sms := seg.replies()
			switch {
			case len(sms) == 0 && !seg.failed():
				v(classLost, c, "s%d %s %s: no server.message.send in its turn (turn: %s)", d.n, c.Kind, c.Key, seg.describe())
			case len(sms) > 1:
				v(classDuplicated, c, "s%d %s %s: %d server.message.send events in its turn, want 1 (turn: %s)", d.n, c.Kind, c.Key, len(sms), seg.describe())
			}
			if len(sms) > 0 {
				logged := sms[len(sms)-1].Payload
				if c.Kind == kindTool {
					if c.Abandon && clientToolUseID(logged) != "" {
						pausedAbandons++
					}
					if clientToolUseID(logged) == "" {
						v(classOther, c, "s%d %s %s: logged reply has no client tool_use: %s", d.n, c.Kind, c.Key, logged)
					}
				} else if got := benchstack.MessageText(logged); got != c.ExpectText {
					v(classOther, c, "s%d %s %s: logged reply %q, want %q", d.n, c.Kind, c.Key, got, c.ExpectText)
				}
				if c.Terminal != nil && !sameJSON(benchstack.ContentOf(c.Terminal), benchstack.ContentOf(logged)) {
					v(classOther, c, "s%d %s %s: terminal result %s differs from the logged reply %s", d.n, c.Kind, c.Key, c.Terminal, logged)
				}
			}
			if !seg.failed() {
				for _, msg := range seg.providerViolations(c.Kind.providerRounds()) {
					v(classDuplicated, c, "s%d %s %s: %s (turn: %s)", d.n, c.Kind, c.Key, msg, seg.describe())
				}
			}
			for _, e := range seg.events {
				if e.Type != "session.error" {
					continue
				}
				if seg.failed() && !c.TurnFailed {
					v(classTurnFailed, c, "s%d %s %s: session.error %s in its turn", d.n, c.Kind, c.Key, e.Payload)
				} else if !seg.failed() {
					v(classOther, c, "s%d %s %s: session.error %s in its turn", d.n, c.Kind, c.Key, e.Payload)
				}
			}
		}
		for i, s := range segs {
			if !claimed[i] {
				v(classDuplicated, nil, "s%d: a turn nobody sent (or a repeat): client.message.send %s %s", d.n, s.cms.ID, benchstack.ContentOf(s.cms.Payload))
			}
		}
		rep.pauses(d.n, segs, func(format string, args ...any) { v(classLost, nil, format, args...) })
		rep.landings(calls, segs)

		// The Session workflow: nothing queued, running or paused at the end.
		resp, err := queryOncePolled(ctx, func() (converter.EncodedValue, error) {
			return st.tc.QueryWorkflow(ctx, d.sess.ID, "", workflows.QueryControl)
		})
		if err != nil {
			v(classOther, nil, "s%d: query the Session workflow: %v", d.n, err)
		} else {
			var cv workflows.ControlView
			if err := resp.Get(&cv); err != nil {
				return fmt.Errorf("decode control view: %w", err)
			}
			if cv.Busy || cv.Queued > 0 || cv.Closed || cv.Paused != nil {
				v(classOther, nil, "s%d: Session workflow not idle at the end: %+v", d.n, cv)
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
		v(classLost, nil, "turn input %s (session %s, stored %s%s) never began: the server stored %s and dropped it; %s; %s",
			o.turn, o.sess, o.at.UTC().Format(store.TimeFormat), nextEvent(rep.Chaos, o.at), o.msg, updateInHistory(ctx, st, o.sess, o.turn), client)
	}

	if rep.Abandoned < pausedAbandons {
		v(classOther, nil, "%d pauses were abandoned by the next message, want at least the %d left unanswered on purpose", rep.Abandoned, pausedAbandons)
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
			v(classOther, nil, "s%d: admin API shows session %s as %q, want open", d.n, d.sess.ID, state[d.sess.ID])
		}
	}
	rep.ProviderServed = st.fake.RequestCount()
	if rep.ProviderServed < rep.ProviderLogged {
		v(classDuplicated, nil, "the fake served %d provider requests but %d provider.request events were logged", rep.ProviderServed, rep.ProviderLogged)
	}
	return nil
}

// failed reports a turn that ended in a turn_failed session.error.
func (s segment) failed() bool {
	for _, e := range s.events {
		if e.Type == "session.error" && strings.Contains(string(e.Payload), `"turn_failed"`) {
			return true
		}
	}
	return false
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
// pairs per attempt, and that the turn made exactly rounds successful
// provider round trips (a provider call logged twice shows here).
func (s segment) providerViolations(rounds int) []string {
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
	if pairs != rounds {
		out = append(out, fmt.Sprintf("%d provider request/response pairs, want %d", pairs, rounds))
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
// turn: its Enqueue signal, or (from servers before the signal) the
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
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
			a := e.GetWorkflowExecutionSignaledEventAttributes()
			var in workflows.SendMessageInput
			if a.GetSignalName() == workflows.SignalEnqueue && len(a.GetInput().GetPayloads()) > 0 &&
				converter.GetDefaultDataConverter().FromPayload(a.GetInput().GetPayloads()[0], &in) == nil && in.TurnID == turnID {
				found = append(found, fmt.Sprintf("signalled at event %d", e.GetEventId()))
			}
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
		return "the Session workflow's history has no Enqueue signal or SendMessage update for that turn (never received)"
	}
	return "the Session workflow's history shows the turn " + strings.Join(found, ", ")
}

// nextEvent names the first chaos event after t, for evidence.
func nextEvent(evs []chaosEvent, t time.Time) string {
	for _, e := range evs {
		if e.At.After(t) {
			return fmt.Sprintf(", %s before %s", e.At.Sub(t).Round(time.Millisecond), e)
		}
	}
	return ", after the last chaos event"
}

func parseTime(s string) time.Time {
	t, _ := time.Parse(store.TimeFormat, s)
	return t
}

// usageMismatch compares the session's recorded usage (the usage_calls
// ledger) with the usage its successful provider.response events and
// session.compaction summaries report: every answered call counted once,
// whatever crashed in between. It says what differs, "" when nothing.
func usageMismatch(ctx context.Context, conn *pgx.Conn, sessionID string, evs []wireEvent) (string, error) {
	var logged provider.Usage
	var calls int64
	for _, e := range evs {
		if u, ok := benchstack.EventUsage(e.Type, e.Payload); ok {
			calls++
			logged = logged.Add(u)
		}
	}
	var rec provider.Usage
	var n int64
	err := conn.QueryRow(ctx, `SELECT count(*), coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0),
		coalesce(sum(cache_read_tokens), 0), coalesce(sum(cache_write_tokens), 0) FROM usage_calls WHERE session_id = $1`, sessionID).
		Scan(&n, &rec.Input, &rec.Output, &rec.CacheRead, &rec.CacheWrite)
	if err != nil {
		return "", err
	}
	if n != calls || rec != logged {
		return fmt.Sprintf("usage recorded for %d calls %+v, the log reports %d calls %+v", n, rec, calls, logged), nil
	}
	return "", nil
}

// queryOncePolled runs query until the server has a worker polling for it:
// right after the last restart the server refuses a query with "no poller
// seen" until the new worker's first poll, which says nothing about the
// session. Any other outcome, or 30 s of refusals, is returned as it is.
func queryOncePolled(ctx context.Context, query func() (converter.EncodedValue, error)) (converter.EncodedValue, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := query()
		if err == nil || !strings.Contains(err.Error(), "no poller seen") || time.Now().After(deadline) {
			return resp, err
		}
		select {
		case <-ctx.Done():
			return resp, err
		case <-time.After(200 * time.Millisecond):
		}
	}
}
