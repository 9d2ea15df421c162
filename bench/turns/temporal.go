package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/bae-go/bae-go/bench/temporalfloor"

	"github.com/bae-go/bae-go/bench/benchstack"
)

// temporalAlone is the Temporal round trip of a turn with nothing else in
// it (bench/temporalfloor), measured with bae-go's load on the bench's
// Temporal server (embedded, or the external one of -temporal) after the
// floor's phase: added to the floor's
// latency it is the least a turn that is an Update can take here.
type temporalAlone struct {
	Completed int             `json:"completed"`
	PerSecond float64         `json:"updates_per_s"`
	Latency   benchstack.Dist `json:"latency"`
	CPU       CPUStats        `json:"cpu"`
	Err       string          `json:"error,omitempty"`
	// Timeline splits the updates like bae-go's server timeline, from the
	// same kinds of stamps (bench, Temporal history, the local activity).
	Timeline      []phase `json:"timeline,omitempty"`
	TimelineTurns int     `json:"timeline_updates"`
	// latencies and elapsed are what Latency and PerSecond come from
	// (-rounds pools them).
	latencies []time.Duration
	elapsed   time.Duration
	// load ends the phase's workflows (-rounds).
	load temporalfloor.Load
}

func runTemporalAlone(ctx context.Context, log *slog.Logger, o options, st *stack, pg *pgSampler) (*temporalAlone, error) {
	turns := o.turns
	if o.duration > 0 {
		// As many as -duration would take at the offered rate, or as the
		// floor's closed loop would: at most 40 each.
		turns = 40
		if o.rate > 0 {
			turns = max(1, int(o.duration.Seconds()*o.rate)/o.sessions)
		}
	}
	w, err := temporalfloor.StartWorker(st.Temporal)
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	log.Info("measuring Temporal alone", "workflows", o.sessions, "updates_per_workflow", turns, "rate", o.rate)
	var start cpuMark
	load := temporalfloor.Load{
		Sessions: o.sessions, Warmup: o.warmup, Turns: turns, Rate: o.rate, Prefix: fmt.Sprintf("bench-%d-", time.Now().UnixNano()),
		Measuring: func() { start = markCPU(nil, st.procs(ctx, pg)) },
		Stamps:    true,
	}
	res, err := temporalfloor.Run(ctx, st.Temporal, load)
	t := &temporalAlone{Completed: len(res.Latencies), PerSecond: res.PerSecond(), Latency: benchstack.Summarise(res.Latencies), CPU: cpuBetween(start, markCPU(nil, st.procs(context.WithoutCancel(ctx), pg)))}
	t.latencies, t.elapsed, t.load = res.Latencies, res.Elapsed, load
	t.CPU.perTurn(res.Elapsed.Seconds(), t.Completed)
	if err != nil {
		t.Err = err.Error()
	}
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if ph, n, terr := aloneTimeline(tctx, st.Temporal, res.Updates); terr != nil {
		log.Warn("Temporal-alone timeline unavailable", "err", terr)
	} else {
		t.Timeline, t.TimelineTurns = ph, n
	}
	return t, err
}

// alonePhases are Temporal alone's segments, each set against the bae-go
// segments that span the same milestones (bae is their names, summed).
var alonePhases = []struct {
	phaseName
	bae []string
}{
	{phaseName{"request -> wft sched", "request sent -> workflow task scheduled: update-with-start reaches history"}, []string{"http, input", "update"}},
	{phaseName{"wft dispatch", "workflow task scheduled -> started: matching hands the task to the worker"}, []string{"wft dispatch"}},
	{phaseName{"wft -> local activity", "workflow task started -> local activity runs: sticky cache, update accepted, local activity starts"}, []string{"wft -> BeginTurn"}},
	{phaseName{"local activity -> wft done", "local activity runs -> workflow task completed: update result, RespondWorkflowTaskCompleted"},
		[]string{"BeginTurn -> request", "provider out", "fake", "provider in", "response -> wft done"}},
	{phaseName{"wft done -> client", "workflow task completed -> client has the result: update result to the caller"}, []string{"update -> client"}},
}

// aloneTimeline splits Temporal alone's measured updates like bae-go's
// timeline: the bench's send and receive, the update's workflow task in
// the workflow's history and when the local activity ran (all on one
// host's clock).
func aloneTimeline(ctx context.Context, tc client.Client, ups []temporalfloor.UpdateRec) ([]phase, int, error) {
	type wft struct{ sched, start, done time.Time }
	accepted := map[string]wft{}
	completed := map[string]wft{}
	seen := map[string]bool{}
	for _, u := range ups {
		if seen[u.WorkflowID] || len(seen) >= timelineSessions {
			continue
		}
		seen[u.WorkflowID] = true
		it := tc.GetWorkflowHistory(ctx, u.WorkflowID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		var cur wft
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				return nil, 0, fmt.Errorf("history of %s: %w", u.WorkflowID, err)
			}
			at := ev.GetEventTime().AsTime()
			switch ev.GetEventType() {
			case enumspb.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
				cur = wft{sched: at}
			case enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED:
				cur.start = at
			case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
				cur.done = at
			case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
				accepted[ev.GetWorkflowExecutionUpdateAcceptedEventAttributes().GetAcceptedRequest().GetMeta().GetUpdateId()] = cur
			case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED:
				completed[ev.GetWorkflowExecutionUpdateCompletedEventAttributes().GetMeta().GetUpdateId()] = cur
			}
		}
	}
	cols := make([][]time.Duration, len(alonePhases))
	used := 0
	for _, u := range ups {
		a, ok1 := accepted[u.UpdateID]
		c, ok2 := completed[u.UpdateID]
		la, ok3 := temporalfloor.LocalActivityStarted(u.UpdateID)
		if !ok1 || !ok2 || !ok3 || a.sched.IsZero() || a.start.IsZero() || c.done.IsZero() {
			continue
		}
		marks := []time.Time{u.Start, a.sched, a.start, la, c.done, u.End}
		for i := range alonePhases {
			cols[i] = append(cols[i], marks[i+1].Sub(marks[i]))
		}
		used++
	}
	out := make([]phase, len(alonePhases))
	for i, p := range alonePhases {
		out[i] = phase{Name: p.name, What: p.what, Dist: benchstack.Summarise(cols[i])}
	}
	return out, used, nil
}
