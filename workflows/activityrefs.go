package workflows

import (
	"context"
	"reflect"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/workflow"

	"github.com/bae-go/bae-go/events"
)

// Activities is every activity the Session workflow runs. Package activities
// implements it; RegisterActivities registers each method under its name,
// and the workflow calls them through the typed refs below, so a changed
// argument or result type fails to compile instead of failing a turn.
type Activities interface {
	BeginTurn(ctx context.Context, in BeginTurnInput) (BeginTurnResult, error)
	CallProvider(ctx context.Context, in CallProviderInput) (CallProviderResult, error)
	CallMCPTool(ctx context.Context, in ToolCallInput) (ToolCallResult, error)
	ExecSandbox(ctx context.Context, in ToolCallInput) (ToolCallResult, error)
	RunSubagentTool(ctx context.Context, in ToolCallInput) (ToolCallResult, error)
	RunSubagent(ctx context.Context, in RunSubagentInput) error
	FinishIteration(ctx context.Context, in FinishIterationInput) (FinishIterationResult, error)
	FailTurn(ctx context.Context, in FailTurnInput) error
	CleanupSession(ctx context.Context, in CleanupInput) error
	CompactContext(ctx context.Context, in CompactContextInput) error
	InterruptTurn(ctx context.Context, in InterruptTurnInput) (InterruptTurnResult, error)
	RecordTurnResult(ctx context.Context, in RecordTurnResultInput) (TurnResult, error)
	RequestApproval(ctx context.Context, in RequestApprovalInput) (RequestApprovalResult, error)
	SettleApproval(ctx context.Context, in SettleApprovalInput) error
}

// RegisterActivities registers each method of Activities, implemented by a,
// under the method's name (the Act* names).
func RegisterActivities(r interface {
	RegisterActivityWithOptions(a any, options activity.RegisterOptions)
}, a Activities) {
	t := reflect.TypeFor[Activities]()
	v := reflect.ValueOf(a)
	for i := 0; i < t.NumMethod(); i++ {
		name := t.Method(i).Name
		r.RegisterActivityWithOptions(v.MethodByName(name).Interface(), activity.RegisterOptions{Name: name})
	}
}

// call is an activity with a result; its method expression pins In and Out
// to the Activities method, so the compiler checks every call site.
type call[In, Out any] struct {
	name   string
	method func(Activities, context.Context, In) (Out, error)
}

func (c call[In, Out]) run(ctx workflow.Context, in In) (Out, error) {
	var out Out
	err := workflow.ExecuteActivity(ctx, c.name, in).Get(ctx, &out)
	return out, err
}

func (c call[In, Out]) runLocal(ctx workflow.Context, in In) (Out, error) {
	var out Out
	err := workflow.ExecuteLocalActivity(ctx, c.name, in).Get(ctx, &out)
	return out, err
}

// action is an activity without a result.
type action[In any] struct {
	name   string
	method func(Activities, context.Context, In) error
}

func (a action[In]) run(ctx workflow.Context, in In) error {
	return workflow.ExecuteActivity(ctx, a.name, in).Get(ctx, nil)
}

func (a action[In]) runLocal(ctx workflow.Context, in In) error {
	return workflow.ExecuteLocalActivity(ctx, a.name, in).Get(ctx, nil)
}

// The refs the workflow calls. Their names are the Activities methods';
// TestActivityRefsNameTheirMethods holds them together.
var (
	beginTurn       = call[BeginTurnInput, BeginTurnResult]{ActBeginTurn, Activities.BeginTurn}
	callProvider    = call[CallProviderInput, CallProviderResult]{ActCallProvider, Activities.CallProvider}
	callMCPTool     = call[ToolCallInput, ToolCallResult]{ActCallMCPTool, Activities.CallMCPTool}
	execSandbox     = call[ToolCallInput, ToolCallResult]{ActExecSandbox, Activities.ExecSandbox}
	runSubagentTool = call[ToolCallInput, ToolCallResult]{ActRunSubagentTool, Activities.RunSubagentTool}
	finishIteration = call[FinishIterationInput, FinishIterationResult]{ActFinishIteration, Activities.FinishIteration}
	runSubagent     = action[RunSubagentInput]{ActRunSubagent, Activities.RunSubagent}
	failTurnAct     = action[FailTurnInput]{ActFailTurn, Activities.FailTurn}
	cleanupSession  = action[CleanupInput]{ActCleanupSession, Activities.CleanupSession}
	compactContext  = action[CompactContextInput]{ActCompactContext, Activities.CompactContext}
	interruptTurn   = call[InterruptTurnInput, InterruptTurnResult]{ActInterruptTurn, Activities.InterruptTurn}
	recordResult    = call[RecordTurnResultInput, TurnResult]{ActRecordTurnResult, Activities.RecordTurnResult}
	requestApproval = call[RequestApprovalInput, RequestApprovalResult]{ActRequestApproval, Activities.RequestApproval}
	settleApproval  = action[SettleApprovalInput]{ActSettleApproval, Activities.SettleApproval}
)

// refMethods lists each ref's name and method expression, for the test that
// holds every ref to its method; a new ref goes here too.
func refMethods() map[string]any {
	return map[string]any{
		beginTurn.name: beginTurn.method, callProvider.name: callProvider.method,
		callMCPTool.name: callMCPTool.method, execSandbox.name: execSandbox.method,
		runSubagentTool.name: runSubagentTool.method, finishIteration.name: finishIteration.method,
		runSubagent.name: runSubagent.method, failTurnAct.name: failTurnAct.method,
		cleanupSession.name: cleanupSession.method, compactContext.name: compactContext.method,
		interruptTurn.name: interruptTurn.method, recordResult.name: recordResult.method,
		requestApproval.name: requestApproval.method, settleApproval.name: settleApproval.method,
	}
}

// serverTool is how the turn loop runs one server-side tool kind.
type serverTool struct {
	activity call[ToolCallInput, ToolCallResult]
	// timeout bounds one attempt's side effect (database waits come on top).
	timeout time.Duration
}

// serverTools routes each server-side tool kind to its activity. Client
// tools are absent: the harness runs them, and the turn pauses for them.
func serverToolFor(d events.Dispatch) (serverTool, bool) {
	switch d {
	case events.DispatchMCP:
		return serverTool{callMCPTool, 5 * time.Minute}, true
	case events.DispatchSandbox:
		return serverTool{execSandbox, 5 * time.Minute}, true
	case events.DispatchSubagent:
		return serverTool{runSubagentTool, 2 * time.Minute}, true
	}
	return serverTool{}, false
}
