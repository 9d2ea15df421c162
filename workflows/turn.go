package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

type turnResult struct {
	TurnResult
	sessionEnded bool
}

// dbActivity options: short PostgreSQL transactions, run as local activities
// (no extra task round-trip) and retried until the database answers.
func dbCtx(ctx workflow.Context) workflow.Context {
	return workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		// Schedule-to-close bounds the retries too; without it one slow
		// attempt would use up the whole budget.
		ScheduleToCloseTimeout: 10 * time.Minute,
		StartToCloseTimeout:    30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    100 * time.Millisecond,
			BackoffCoefficient: 2,
			MaximumInterval:    5 * time.Second,
		},
	})
}

// ProviderAttempts is how many times one provider attempt is tried on
// transport failures before it counts as failed.
const ProviderAttempts = 3

func providerCtx(ctx workflow.Context, hb time.Duration) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Minute,
		HeartbeatTimeout:    hb,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    250 * time.Millisecond,
			BackoffCoefficient: 2,
			MaximumInterval:    5 * time.Second,
			MaximumAttempts:    ProviderAttempts,
		},
	})
}

func toolCtx(ctx workflow.Context, call ToolCall, hb time.Duration) workflow.Context {
	timeout := 5 * time.Minute
	if call.Dispatch == DispatchSubagent {
		timeout = 2 * time.Minute
	}
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: timeout,
		HeartbeatTimeout:    3 * hb,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    500 * time.Millisecond,
			BackoffCoefficient: 2,
			MaximumInterval:    10 * time.Second,
			MaximumAttempts:    3,
		},
	})
}

// runTurn orchestrates one turn: record the client's message, walk the
// providers, dispatch server-side tools, and loop until a final answer, a
// pause for client tools, a provider failure, or the iteration cap.
// launchFn starts a remote subagent's background run.
type launchFn func(SubagentLaunch)

func runTurn(ctx workflow.Context, in BeginTurnInput, hb time.Duration, launch launchFn) (turnResult, error) {
	if hb <= 0 {
		hb = 10 * time.Second
	}
	ref := in.TurnRef
	var begin BeginTurnResult
	if err := workflow.ExecuteLocalActivity(dbCtx(ctx), ActBeginTurn, in).Get(ctx, &begin); err != nil {
		return turnResult{}, err
	}
	if begin.Outcome != "" {
		return turnResult{TurnResult: TurnResult{Outcome: begin.Outcome, ErrorCode: begin.ErrorCode, ErrorMessage: begin.ErrorMessage}, sessionEnded: begin.SessionEnded}, nil
	}
	for it := 0; it < MaxIterations; it++ {
		var res CallProviderResult
		for attempt, name := range begin.Providers {
			res = CallProviderResult{}
			if err := workflow.ExecuteActivity(providerCtx(ctx, hb), ActCallProvider, CallProviderInput{TurnRef: ref, Iteration: it, Attempt: attempt, Provider: name}).Get(ctx, &res); err != nil {
				return turnResult{}, err
			}
			if res.OK {
				break
			}
		}
		if !res.OK {
			return failTurn(ctx, FailTurnInput{TurnRef: ref, Reason: "all_providers_failed", Attempts: len(begin.Providers)})
		}
		if res.Final {
			return turnResult{TurnResult: TurnResult{Outcome: OutcomeCompleted}}, nil
		}
		for _, call := range res.ToolCalls {
			name := ""
			switch call.Dispatch {
			case DispatchMCP:
				name = ActCallMCPTool
			case DispatchSandbox:
				name = ActExecSandbox
			case DispatchSubagent:
				name = ActRunSubagentTool
			default:
				continue // client tools run in the harness
			}
			var tr ToolCallResult
			if err := workflow.ExecuteActivity(toolCtx(ctx, call, hb), name, ToolCallInput{TurnRef: ref, Iteration: it, Call: call}).Get(ctx, &tr); err != nil {
				return turnResult{}, err
			}
			if tr.Launch != nil && launch != nil {
				launch(*tr.Launch)
			}
		}
		var fin FinishIterationResult
		if err := workflow.ExecuteLocalActivity(dbCtx(ctx), ActFinishIteration, FinishIterationInput{TurnRef: ref, Iteration: it, Calls: res.ToolCalls}).Get(ctx, &fin); err != nil {
			return turnResult{}, err
		}
		if fin.Paused {
			return turnResult{TurnResult: TurnResult{Outcome: OutcomePaused}}, nil
		}
	}
	return failTurn(ctx, FailTurnInput{TurnRef: ref, Reason: "loop_limit"})
}

func failTurn(ctx workflow.Context, in FailTurnInput) (turnResult, error) {
	if err := workflow.ExecuteLocalActivity(dbCtx(ctx), ActFailTurn, in).Get(ctx, nil); err != nil {
		return turnResult{}, err
	}
	return turnResult{TurnResult: TurnResult{Outcome: OutcomeProvidersFailed}, sessionEnded: true}, nil
}
