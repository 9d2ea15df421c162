package schedule

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/bae-go/bae-go/internal/launcher"
)

// IDPrefix starts the id of every Temporal Schedule baesched owns; a
// schedule with this prefix that the file no longer names is deleted.
const IDPrefix = "baesched-"

// memoAgent is the memo field naming the agent of a scheduled run.
const memoAgent = "agent"

// ScheduleID is the Temporal Schedule id of agent; runs it starts get
// workflow ids beginning with the same string.
func ScheduleID(agent string) string { return IDPrefix + agent }

// reconcile makes the namespace's baesched schedules match agents: creates
// the new ones, updates the rest (keeping a pause set from the Temporal UI
// or CLI), and deletes those the file no longer names.
func reconcile(ctx context.Context, sc client.ScheduleClient, agents []Agent, o *Options, log *slog.Logger) error {
	want := make(map[string]bool, len(agents))
	for _, a := range agents {
		id := ScheduleID(a.Name)
		want[id] = true
		spec := client.ScheduleSpec{CronExpressions: []string{temporalCron(a.Schedule)}}
		action := &client.ScheduleWorkflowAction{
			ID:        id,
			Workflow:  launcher.WorkflowName,
			TaskQueue: o.TaskQueue,
			Memo:      map[string]any{memoAgent: a.Name},
			Args: []any{launcher.LaunchInput{
				Agent: a.Name, Kind: launcher.KindSchedule, TaskQueue: o.TaskQueue,
				StartWithin: o.CatchupWindow, HeartbeatTimeout: o.HeartbeatTimeout,
			}},
		}
		_, err := sc.Create(ctx, client.ScheduleOptions{
			ID:            id,
			Spec:          spec,
			Action:        action,
			Overlap:       enumspb.SCHEDULE_OVERLAP_POLICY_SKIP,
			CatchupWindow: o.CatchupWindow,
			Memo:          map[string]any{"launcher": "baesched"},
		})
		switch {
		case err == nil:
			log.Info("schedule created", "agent", a.Name, "schedule", a.Schedule, "id", id)
			continue
		case !errors.Is(err, temporal.ErrScheduleAlreadyRunning):
			return scheduleError(a, err)
		}
		err = sc.GetHandle(ctx, id).Update(ctx, client.ScheduleUpdateOptions{
			DoUpdate: func(in client.ScheduleUpdateInput) (*client.ScheduleUpdate, error) {
				s := in.Description.Schedule
				s.Spec = &spec
				s.Action = action
				if s.Policy == nil {
					s.Policy = &client.SchedulePolicies{}
				}
				s.Policy.Overlap = enumspb.SCHEDULE_OVERLAP_POLICY_SKIP
				s.Policy.CatchupWindow = o.CatchupWindow
				return &client.ScheduleUpdate{Schedule: &s}, nil
			},
		})
		if err != nil {
			return scheduleError(a, err)
		}
		log.Info("schedule updated", "agent", a.Name, "schedule", a.Schedule, "id", id)
	}
	it, err := sc.List(ctx, client.ScheduleListOptions{PageSize: 1000})
	if err != nil {
		return fmt.Errorf("list schedules: %w", err)
	}
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			return fmt.Errorf("list schedules: %w", err)
		}
		if !strings.HasPrefix(e.ID, IDPrefix) || want[e.ID] {
			continue
		}
		if err := sc.GetHandle(ctx, e.ID).Delete(ctx); err != nil {
			return fmt.Errorf("delete schedule %s: %w", e.ID, err)
		}
		log.Info("schedule deleted: its agent left the config", "id", e.ID)
	}
	return nil
}

// scheduleError names the agent whose schedule Temporal refused; a refusal
// of the expression itself is the operator's mistake (exit 2).
func scheduleError(a Agent, err error) error {
	var inv *serviceerror.InvalidArgument
	if errors.As(err, &inv) {
		return &launcher.UsageError{Msg: fmt.Sprintf("agent %q: schedule %q refused by Temporal: %v", a.Name, a.Schedule, err)}
	}
	return fmt.Errorf("agent %q: schedule: %w", a.Name, err)
}

// watchSkips logs BAE's message each time Temporal skips a fire of an
// agent because its previous run is still going. Overlap policy skip runs in
// the Temporal server, which tells nobody but its counter, so each agent's
// schedule is read when its next fire is due and again every settlePoll
// until Temporal has acted on that fire: the message comes when the fire is
// skipped, not at the next poll. every bounds the wait between reads (a
// fire triggered by hand, a changed or paused schedule).
func watchSkips(ctx context.Context, sc client.ScheduleClient, agents []Agent, every time.Duration, log *slog.Logger) {
	var wg sync.WaitGroup
	for _, a := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			watchAgentSkips(ctx, sc.GetHandle(ctx, ScheduleID(a.Name)), a.Name, every, log)
		}()
	}
	wg.Wait()
}

// settlePoll is how often a schedule is read once a fire is due and Temporal
// has not acted on it yet; settleMax is how long past a due fire that goes
// on (a paused schedule's fire never comes).
const (
	settlePoll = 50 * time.Millisecond
	settleMax  = 5 * time.Second
)

func watchAgentSkips(ctx context.Context, h client.ScheduleHandle, agent string, every time.Duration, log *slog.Logger) {
	seen := -1
	for {
		wait := every
		d, err := h.Describe(ctx)
		switch {
		case err != nil:
			if ctx.Err() == nil {
				log.Debug("describe schedule", "agent", agent, "err", err)
			}
		default:
			n := d.Info.NumActionsSkippedOverlap
			for i := seen; seen >= 0 && i < n; i++ {
				log.Warn(fmt.Sprintf("agent %q skipped: previous invocation still running", agent), "agent", agent)
			}
			seen = n
			if len(d.Info.NextActionTimes) > 0 {
				switch until := time.Until(d.Info.NextActionTimes[0]); {
				case until <= 0 && until > -settleMax:
					wait = settlePoll // due: Temporal is about to act on it
				case until > 0 && until < wait:
					wait = until
				}
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
