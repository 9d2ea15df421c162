package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/jackc/pgx/v5"

	"github.com/bae-go/bae-go/bench/benchstack"
	"github.com/bae-go/bae-go/workflows"
)

// phase is one segment of the server-side timeline of a turn.
type phase struct {
	Name string          `json:"name"`
	What string          `json:"what"`
	Dist benchstack.Dist `json:"dist"`
}

// timelineSessions bounds how many workflow histories are read.
const timelineSessions = 50

// timeline splits measured turns into phases using wall-clock stamps from
// four sources in one process on one host, so they share a clock:
//
//   - the load generator: request sent, terminal response decoded;
//   - PostgreSQL: created_at = now(), the start of the transaction that
//     appended the turn's client.message.send, provider.request and
//     provider.response events (read with microseconds after the run; the
//     wire format rounds to milliseconds);
//   - the fake provider: handler entry and exit;
//   - Temporal: event times of the session's workflow history: the
//     workflow task that took the turn's Enqueue signal (scheduled,
//     started); for turns sent as Updates by older servers (the update id
//     is the turn id), workflow task scheduled/started/completed around
//     the accepted and the completed update, activity started/completed.
//
// Only turns with every stamp and a single provider request count, from up
// to timelineSessions sessions.
func timeline(ctx context.Context, dbURL string, tc client.Client, turns []turnRec, csvPath string) ([]phase, int, error) {
	db, err := readDBStamps(ctx, dbURL)
	if err != nil {
		return nil, 0, err
	}
	hist := map[string]*historyStamps{}
	seen := map[string]bool{}
	for _, t := range turns {
		if seen[t.sessionID] || len(seen) >= timelineSessions {
			continue
		}
		seen[t.sessionID] = true
		if err := readHistoryStamps(ctx, tc, t.sessionID, hist); err != nil {
			return nil, 0, err
		}
	}

	// A turn whose provider attempt ran as an activity takes two workflow
	// tasks; one whose attempt ran as a local activity (versionLocalProvider)
	// takes one, and its phases are fewer.
	names := activityPhases
	switch {
	case len(hist) > 0 && count(hist, func(h *historyStamps) bool { return h.signal }) > len(hist)/2:
		names = signalPhases
	case len(hist) > 0 && count(hist, func(h *historyStamps) bool { return h.local }) > len(hist)/2:
		names = localPhases
	}
	cols := make([][]time.Duration, len(names))
	used := 0
	var csv *os.File
	if csvPath != "" {
		if csv, err = os.Create(csvPath); err != nil {
			return nil, 0, fmt.Errorf("timeline: %w", err)
		}
		defer csv.Close()
		fmt.Fprint(csv, "session,turn,start_unix_ms")
		for _, n := range names {
			fmt.Fprintf(csv, ",%s_ms", strings.ReplaceAll(strings.ReplaceAll(n.name, " ", "_"), ">", ""))
		}
		fmt.Fprintln(csv)
	}
	for _, t := range turns {
		s, ok := db[t.token]
		// A retried provider call has several requests and attempts whose
		// stamps do not line up; those turns are left out.
		if !ok || t.err != nil || !t.fakeOK || t.fake.Requests != 1 {
			continue
		}
		h, ok := hist[s.turnID]
		if !ok || !h.complete() {
			continue
		}
		marks := []time.Time{t.start, s.input, h.wftSched, h.wftStart, s.cms, h.wftDone, h.actStart, s.preq,
			t.fake.First, t.fake.Last, s.presp, h.actDone, h.wft2Start, h.wft2Done, t.end}
		switch {
		case h.signal:
			marks = []time.Time{t.start, s.input, h.wftSched, h.wftStart, s.cms, s.preq,
				t.fake.First, t.fake.Last, s.presp, t.end}
		case h.local:
			marks = []time.Time{t.start, s.input, h.wftSched, h.wftStart, s.cms, s.preq,
				t.fake.First, t.fake.Last, s.presp, h.wft2Done, t.end}
		}
		if len(marks) != len(names)+1 {
			continue // a turn of another kind than most
		}
		if csv != nil {
			fmt.Fprintf(csv, "%s,%d,%d", t.sessionID, t.n, t.start.UnixMilli())
		}
		for i := range names {
			d := marks[i+1].Sub(marks[i])
			cols[i] = append(cols[i], d)
			if csv != nil {
				fmt.Fprintf(csv, ",%.3f", benchstack.Ms(d))
			}
		}
		if csv != nil {
			fmt.Fprintln(csv)
		}
		used++
	}
	out := make([]phase, len(names))
	for i, n := range names {
		out[i] = phase{Name: n.name, What: n.what, Dist: benchstack.Summarise(cols[i])}
	}
	return out, used, nil
}

type phaseName struct{ name, what string }

var activityPhases = []phaseName{
	{"http, input", "request sent -> turn input stored: HTTP, authentication, validation, the insert"},
	{"update", "turn input stored -> workflow task scheduled: update-with-start reaches history"},
	{"wft dispatch", "workflow task scheduled -> started: matching hands the task to the worker"},
	{"wft -> BeginTurn", "workflow task started -> BeginTurn tx: replay/sticky cache, update accepted, local activity starts"},
	{"BeginTurn -> wft done", "BeginTurn tx -> workflow task completed: local activity, RespondWorkflowTaskCompleted"},
	{"activity dispatch", "workflow task completed -> activity started: activity task through matching"},
	{"activity -> request", "activity started -> provider.request tx: tools and history reads"},
	{"provider out", "provider.request tx -> fake entered: append commit, HTTP request"},
	{"fake", "inside the fake provider"},
	{"provider in", "fake left -> provider.response tx: HTTP response, decode"},
	{"response -> activity done", "provider.response tx -> activity completed: append commit, RespondActivityTaskCompleted"},
	{"wft2 dispatch", "activity completed -> workflow task started: new task through matching"},
	{"wft2 -> update done", "workflow task started -> completed: workflow code, update result"},
	{"update -> client", "workflow task completed -> terminal read: update result to the handler, TurnEvents, relay, client decode"},
}

var localPhases = []phaseName{
	{"http, input", "request sent -> turn input stored: HTTP, authentication, validation, the insert"},
	{"update", "turn input stored -> workflow task scheduled: update-with-start reaches history"},
	{"wft dispatch", "workflow task scheduled -> started: matching hands the task to the worker"},
	{"wft -> BeginTurn", "workflow task started -> BeginTurn tx: replay/sticky cache, update accepted, local activity starts"},
	{"BeginTurn -> request", "BeginTurn tx -> provider.request tx: 0 when one transaction holds both (each event is stamped with its transaction's start)"},
	{"provider out", "provider.request tx -> fake entered: the begin's and the request's reads and writes, the commit, HTTP request"},
	{"fake", "inside the fake provider"},
	{"provider in", "fake left -> provider.response tx: HTTP response, decode"},
	{"response -> wft done", "provider.response tx -> workflow task completed: append commit, workflow code, update result, RespondWorkflowTaskCompleted"},
	{"update -> client", "workflow task completed -> terminal read: update result to the handler, TurnEvents, relay, client decode"},
}

// signalPhases: the turn arrived as an Enqueue signal and its result is
// recorded in PostgreSQL, which the handler waits for (no Update).
var signalPhases = []phaseName{
	{"http, input", "request sent -> turn input stored: HTTP, authentication, validation, the insert"},
	{"signal", "turn input stored -> workflow task scheduled: signal-with-start reaches history"},
	{"wft dispatch", "workflow task scheduled -> started: matching hands the task to the worker"},
	{"wft -> BeginTurn", "workflow task started -> BeginTurn tx: replay/sticky cache, signal taken, local activity starts"},
	{"BeginTurn -> request", "BeginTurn tx -> provider.request tx: 0 when one transaction holds both (each event is stamped with its transaction's start)"},
	{"provider out", "provider.request tx -> fake entered: the begin's and the request's reads and writes, the commit, HTTP request"},
	{"fake", "inside the fake provider"},
	{"provider in", "fake left -> provider.response tx: HTTP response, decode"},
	{"response -> client", "provider.response tx -> terminal read: append commit, RecordTurnResult and its notice, TurnEvents, relay, client decode"},
}

// count reports how many recorded turns satisfy f.
func count(hist map[string]*historyStamps, f func(*historyStamps) bool) int {
	n := 0
	for _, h := range hist {
		if f(h) {
			n++
		}
	}
	return n
}

type dbStamps struct {
	turnID                  string
	input, cms, preq, presp time.Time
}

func readDBStamps(ctx context.Context, dbURL string) (map[string]dbStamps, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, fmt.Errorf("timeline: connect: %w", err)
	}
	defer conn.Close(ctx)
	// The client.message.send payload carries the turn's unique token, which
	// joins the database's events to the bench's records.
	rows, err := conn.Query(ctx, `
		SELECT c.payload->>'content', c.turn_id, t.created_at, c.created_at,
		       min(e.created_at) FILTER (WHERE e.event_type = 'provider.request'),
		       max(e.created_at) FILTER (WHERE e.event_type = 'provider.response')
		FROM session_events c
		JOIN session_events e ON e.session_id = c.session_id AND e.turn_id = c.turn_id
		JOIN turn_inputs t ON t.turn_id = c.turn_id
		WHERE c.event_type = 'client.message.send'
		GROUP BY c.session_id, c.seq, t.created_at`)
	if err != nil {
		return nil, fmt.Errorf("timeline: query: %w", err)
	}
	out := map[string]dbStamps{}
	for rows.Next() {
		var tok string
		var s dbStamps
		var preq, presp *time.Time
		if err := rows.Scan(&tok, &s.turnID, &s.input, &s.cms, &preq, &presp); err != nil {
			return nil, fmt.Errorf("timeline: scan: %w", err)
		}
		if preq != nil && presp != nil {
			s.preq, s.presp = *preq, *presp
			out[tok] = s
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("timeline: rows: %w", err)
	}
	return out, nil
}

// historyStamps are one turn's milestones in its workflow history.
type historyStamps struct {
	wftSched, wftStart, wftDone    time.Time // the task that accepted the update
	actStart, actDone              time.Time // the first provider activity
	wft2Sched, wft2Start, wft2Done time.Time // the task that completed the update
	// local: the update was accepted and completed in one workflow task
	// with no activity between (the provider attempt ran locally).
	local bool
	// signal: the turn arrived as an Enqueue signal; wftSched and wftStart
	// are the task that took it.
	signal bool
}

func (h *historyStamps) complete() bool {
	if h.signal {
		return !h.wftSched.IsZero() && !h.wftStart.IsZero()
	}
	if h.local {
		return !h.wftSched.IsZero() && !h.wftStart.IsZero() && !h.wft2Done.IsZero()
	}
	for _, t := range []time.Time{h.wftSched, h.wftStart, h.wftDone, h.actStart, h.actDone, h.wft2Start, h.wft2Done} {
		if t.IsZero() {
			return false
		}
	}
	return true
}

// readHistoryStamps walks the current run of a session's history. A
// session's turns are sequential, so the events between an update's
// acceptance and its completion belong to that turn. Temporal writes the
// real start time into events it records late (a speculative workflow task,
// an activity started event kept transient until completion).
func readHistoryStamps(ctx context.Context, tc client.Client, sessionID string, into map[string]*historyStamps) error {
	it := tc.GetWorkflowHistory(ctx, sessionID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var sched, started, done time.Time
	var cur, sig *historyStamps
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return fmt.Errorf("timeline: history of %s: %w", sessionID, err)
		}
		at := ev.GetEventTime().AsTime()
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
			sched = at
			if sig != nil && sig.wftSched.IsZero() {
				sig.wftSched = at
			}
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED:
			started = at
			if sig != nil && !sig.wftSched.IsZero() {
				sig.wftStart, sig = at, nil
			}
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
			a := ev.GetWorkflowExecutionSignaledEventAttributes()
			var in workflows.SendMessageInput
			if a.GetSignalName() != workflows.SignalEnqueue || len(a.GetInput().GetPayloads()) == 0 ||
				json.Unmarshal(a.GetInput().GetPayloads()[0].GetData(), &in) != nil || in.TurnID == "" {
				continue
			}
			sig = &historyStamps{signal: true}
			into[in.TurnID] = sig
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
			done = at
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
			id := ev.GetWorkflowExecutionUpdateAcceptedEventAttributes().GetAcceptedRequest().GetMeta().GetUpdateId()
			cur = &historyStamps{wftSched: sched, wftStart: started, wftDone: done}
			into[id] = cur
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
			if cur != nil && cur.actStart.IsZero() {
				cur.actStart = at
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
			if cur != nil && cur.actDone.IsZero() {
				cur.actDone = at
			}
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED:
			id := ev.GetWorkflowExecutionUpdateCompletedEventAttributes().GetMeta().GetUpdateId()
			if h, ok := into[id]; ok {
				h.wft2Sched, h.wft2Start, h.wft2Done = sched, started, done
				h.local = h.actStart.IsZero() && h.wftStart.Equal(started)
			}
			cur = nil
		}
	}
	return nil
}
