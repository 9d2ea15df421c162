package launcher

import (
	"errors"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// Names people see in the Temporal UI.
const (
	WorkflowName = "Launch"
	ActivityName = "RunAgent"
)

// Kinds of launch, recorded in each run's input.
const (
	KindSchedule = "schedule"
	KindTrigger  = "trigger"
)

// Outcomes of a run, in LaunchResult.Outcome.
const (
	OutcomeExited      = "exited"       // the child exited (ExitCode set) or a signal killed it (ExitCode nil)
	OutcomeSpawnFailed = "spawn_failed" // the command could not be started
	OutcomeSkipped     = "skipped"      // not spawned: an unset ${VAR}, or the agent left the config
	OutcomeMissed      = "missed"       // the launcher was away longer than the catch-up window
	OutcomeLost        = "lost"         // the launcher died while the child ran: it is not run again
)

// Application error types RunAgent fails with; the workflow turns each into
// an outcome instead of retrying.
const (
	errTypeSpawn = "SpawnFailed"
	errTypeSkip  = "Skipped"
)

// LaunchInput is one run of one agent. It carries no command, argument,
// environment or request value: the activity finds those in the launcher's
// own memory, so secrets and request bodies stay out of Temporal.
type LaunchInput struct {
	Agent     string
	Kind      string
	TaskQueue string // the launcher's own queue: the activity runs where the agent is configured
	// Handle names a trigger's prepared invocation inside the baeapi process
	// that received the request.
	Handle string `json:",omitempty"`
	// StartWithin is the catch-up window: a run that reaches the worker later
	// than this after it was started is recorded as missed, not spawned.
	StartWithin time.Duration
	// HeartbeatTimeout is how long the activity may go without a heartbeat
	// before the run counts as lost.
	HeartbeatTimeout time.Duration
}

// LaunchResult is what the run list shows for a run.
type LaunchResult struct {
	Outcome    string
	ExitCode   *int      `json:",omitempty"`
	Detail     string    `json:",omitempty"`
	Started    time.Time `json:",omitzero"`
	Ended      time.Time `json:",omitzero"`
	OutputTail []string  `json:",omitempty"`
}

// maxRunTime bounds a child's run; heartbeats, not this, catch a dead launcher.
const maxRunTime = 7 * 24 * time.Hour

// Launch runs one agent once: at most once, never retried, since a child's
// effects are not known to be idempotent.
func Launch(ctx workflow.Context, in LaunchInput) (LaunchResult, error) {
	if in.StartWithin > 0 {
		late := workflow.Now(ctx).Sub(workflow.GetInfo(ctx).WorkflowStartTime)
		if late > in.StartWithin {
			workflow.GetLogger(ctx).Warn("run missed: launcher away longer than the catch-up window", "agent", in.Agent, "late", late.String())
			return LaunchResult{Outcome: OutcomeMissed, Detail: "the launcher was away for " + late.Round(time.Second).String()}, nil
		}
	}
	opts := workflow.ActivityOptions{
		TaskQueue:           in.TaskQueue,
		StartToCloseTimeout: maxRunTime,
		HeartbeatTimeout:    in.HeartbeatTimeout,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
	}
	if in.StartWithin > 0 {
		opts.ScheduleToStartTimeout = in.StartWithin
	}
	var res LaunchResult
	err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, opts), ActivityName, in).Get(ctx, &res)
	if err == nil {
		return res, nil
	}
	var appErr *temporal.ApplicationError
	var toErr *temporal.TimeoutError
	switch {
	case errors.As(err, &appErr) && appErr.Type() == errTypeSpawn:
		return LaunchResult{Outcome: OutcomeSpawnFailed, Detail: appErr.Message()}, nil
	case errors.As(err, &appErr) && appErr.Type() == errTypeSkip:
		return LaunchResult{Outcome: OutcomeSkipped, Detail: appErr.Message()}, nil
	case errors.As(err, &toErr) && toErr.TimeoutType() == enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START:
		return LaunchResult{Outcome: OutcomeMissed, Detail: "no launcher picked the run up within the catch-up window"}, nil
	case errors.As(err, &toErr):
		return LaunchResult{Outcome: OutcomeLost, Detail: "the launcher stopped answering while the agent ran (" + toErr.TimeoutType().String() + "); it is not run again"}, nil
	}
	return LaunchResult{Outcome: OutcomeLost, Detail: err.Error()}, nil
}
