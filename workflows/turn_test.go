package workflows_test

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/workflows"
)

// scripted stands in for every activity of a turn: each answers from a
// script and records the call, so a test states the exact sequence of
// steps one branch of the turn loop takes.
type scripted struct {
	mu    sync.Mutex
	calls []string

	begin    workflows.BeginTurnResult
	provider func(in workflows.CallProviderInput) workflows.CallProviderResult
	// tool answers a server-side tool call (nil: an empty result).
	tool   func(name string, in workflows.ToolCallInput) (workflows.ToolCallResult, error)
	failed []workflows.FailTurnInput
	ran    []workflows.RunSubagentInput
	// attemptErr, when set, fails an attempt as an activity failure.
	attemptErr func(in workflows.CallProviderInput) error
	inputs     []workflows.CallProviderInput
	memos      []map[string]any
	steps      []string
	// eagerSteps runs the session as recorded before versionTurnStepLazy:
	// every step upserted.
	eagerSteps bool
}

func (s *scripted) record(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, fmt.Sprintf(format, args...))
}

func (s *scripted) BeginTurn(_ context.Context, in workflows.BeginTurnInput) (workflows.BeginTurnResult, error) {
	s.record("BeginTurn")
	return s.begin, nil
}

func (s *scripted) CallProvider(ctx context.Context, in workflows.CallProviderInput) (workflows.CallProviderResult, error) {
	if in.Begin != nil {
		return beginThenCall(ctx, in, s.BeginTurn, s.CallProvider)
	}
	s.record("CallProvider i%d a%d %s", in.Iteration, in.Attempt, in.Provider)
	s.mu.Lock()
	s.inputs = append(s.inputs, in)
	s.mu.Unlock()
	if s.attemptErr != nil {
		if err := s.attemptErr(in); err != nil {
			return workflows.CallProviderResult{}, err
		}
	}
	return s.provider(in), nil
}

func (s *scripted) toolActivity(name string) func(context.Context, workflows.ToolCallInput) (workflows.ToolCallResult, error) {
	return func(_ context.Context, in workflows.ToolCallInput) (workflows.ToolCallResult, error) {
		s.record("%s i%d %s", name, in.Iteration, in.Call.ID)
		if s.tool == nil {
			return workflows.ToolCallResult{}, nil
		}
		return s.tool(name, in)
	}
}

func (s *scripted) FinishIteration(_ context.Context, in workflows.FinishIterationInput) (workflows.FinishIterationResult, error) {
	s.record("FinishIteration i%d calls=%d", in.Iteration, len(in.Calls))
	for _, c := range in.Calls {
		if c.Dispatch == events.DispatchClient {
			return workflows.FinishIterationResult{Paused: true}, nil
		}
	}
	return workflows.FinishIterationResult{}, nil
}

func (s *scripted) FailTurn(_ context.Context, in workflows.FailTurnInput) error {
	s.record("FailTurn %s", in.Reason)
	s.mu.Lock()
	s.failed = append(s.failed, in)
	s.mu.Unlock()
	return nil
}

func (s *scripted) RunSubagent(_ context.Context, in workflows.RunSubagentInput) error {
	s.record("RunSubagent %s", in.SubagentID)
	s.mu.Lock()
	s.ran = append(s.ran, in)
	s.mu.Unlock()
	return nil
}

func (s *scripted) Cleanup(_ context.Context, in workflows.CleanupInput) error {
	s.record("CleanupSession %s", in.Reason)
	return nil
}

// runOneTurn runs a session workflow through one SendMessage and a close,
// and returns the turn's result.
func runOneTurn(t *testing.T, s *scripted) workflows.TurnResult {
	t.Helper()
	var ts testsuite.WorkflowTestSuite
	env := ts.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(workflows.Session, workflow.RegisterOptions{Name: workflows.SessionWorkflow})
	reg := func(fn any, name string) { env.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name}) }
	reg(s.BeginTurn, workflows.ActBeginTurn)
	reg(s.CallProvider, workflows.ActCallProvider)
	reg(s.toolActivity(workflows.ActCallMCPTool), workflows.ActCallMCPTool)
	reg(s.toolActivity(workflows.ActExecSandbox), workflows.ActExecSandbox)
	reg(s.toolActivity(workflows.ActRunSubagentTool), workflows.ActRunSubagentTool)
	reg(s.RunSubagent, workflows.ActRunSubagent)
	reg(s.FinishIteration, workflows.ActFinishIteration)
	reg(s.FailTurn, workflows.ActFailTurn)
	reg(s.Cleanup, workflows.ActCleanupSession)
	if s.eagerSteps {
		env.OnGetVersion(workflows.ChangeTurnStepLazy, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	}
	env.OnUpsertMemo(mock.Anything).Run(func(args mock.Arguments) {
		s.mu.Lock()
		memo := maps.Clone(args.Get(0).(map[string]any))
		if step, ok := memo[workflows.MemoCurrentStep]; ok {
			text, _ := step.(string)
			if step == nil {
				text = "<removed>"
			}
			s.steps = append(s.steps, text)
			delete(memo, workflows.MemoCurrentStep)
		}
		if len(memo) > 0 {
			s.memos = append(s.memos, memo)
		}
		s.mu.Unlock()
	}).Return(nil)

	var res workflows.TurnResult
	var uerr error
	done := false
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(workflows.UpdateSendMessage, "t1", &testsuite.TestUpdateCallback{
			OnAccept: func() {},
			OnReject: func(err error) { uerr, done = err, true },
			OnComplete: func(v any, err error) {
				res, _ = v.(workflows.TurnResult)
				uerr, done = err, true
			},
		}, workflows.SendMessageInput{TurnID: "t1", ClientKeyID: "key_a"})
	}, time.Second)
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(workflows.UpdateClose, "close", &testsuite.TestUpdateCallback{
			OnAccept: func() {}, OnReject: func(error) {}, OnComplete: func(any, error) {},
		}, workflows.CloseInput{State: "closed", Reason: "session_close"})
	}, time.Hour)
	env.ExecuteWorkflow(workflows.SessionWorkflow, workflows.SessionParams{SessionID: "ses_1", TurnTimeout: time.Minute})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	require.True(t, done, "the turn finished")
	require.NoError(t, uerr)
	return res
}

func final(workflows.CallProviderInput) workflows.CallProviderResult {
	return workflows.CallProviderResult{OK: true, Final: true}
}

func primary() workflows.BeginTurnResult {
	return workflows.BeginTurnResult{Providers: []string{"primary", "fallback"}, Models: []string{"model-p", "model-f"}, ProfileName: "main"}
}

var stepTimes = regexp.MustCompile(` · since [0-9TZ:-]+|[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]+Z`)

// stepsWithoutTimes drops a step's start, and writes other times as <t>.
func stepsWithoutTimes(steps []string) []string {
	out := make([]string, len(steps))
	for i, st := range steps {
		out[i] = stepTimes.ReplaceAllStringFunc(st, func(m string) string {
			if strings.HasPrefix(m, " · since") {
				return ""
			}
			return "<t>"
		})
	}
	return out
}

func TestTurnBranches(t *testing.T) {
	allKinds := []workflows.ToolCall{
		{ID: "m1", Name: "mcp_tool", Dispatch: events.DispatchMCP, Server: "srv"},
		{ID: "s1", Name: "run", Dispatch: events.DispatchSandbox},
		{ID: "a1", Name: "launch_subagent", Dispatch: events.DispatchSubagent},
		{ID: "c1", Name: "client_tool", Dispatch: events.DispatchClient},
	}
	cases := []struct {
		name    string
		script  *scripted
		outcome string
		calls   []string
		check   func(t *testing.T, s *scripted, res workflows.TurnResult)
	}{{
		name:    "text answer from the primary",
		script:  &scripted{begin: primary(), provider: final},
		outcome: workflows.OutcomeCompleted,
		calls:   []string{"BeginTurn", "CallProvider i0 a0 primary", "CleanupSession session_close"},
		check: func(t *testing.T, s *scripted, res workflows.TurnResult) {
			assert.Equal(t, "primary", res.Provider)
			assert.Equal(t, []map[string]any{{workflows.MemoProfileName: "main"}}, s.memos, "the profile's name, once")
		},
	}, {
		// The first attempt began the turn; having failed as an activity, it
		// returned no begin result, which is read back from BeginTurn.
		name: "a failed attempt is a failed activity, and the walk goes on",
		script: &scripted{begin: primary(), provider: final, attemptErr: func(in workflows.CallProviderInput) error {
			if in.Attempt == 0 {
				return temporal.NewNonRetryableApplicationError("HTTP 500", workflows.ErrProviderAttemptFailed, nil)
			}
			return nil
		}},
		outcome: workflows.OutcomeCompleted,
		calls:   []string{"BeginTurn", "CallProvider i0 a0 primary", "BeginTurn", "CallProvider i0 a1 fallback", "CleanupSession session_close"},
		check: func(t *testing.T, s *scripted, res workflows.TurnResult) {
			assert.Equal(t, "fallback", res.Provider)
			assert.Empty(t, res.LastError, "the turn did not fail")
		},
	}, {
		name: "every attempt failed as an activity: the session ends and the memo says why",
		script: &scripted{begin: primary(), provider: final, attemptErr: func(in workflows.CallProviderInput) error {
			return temporal.NewNonRetryableApplicationError(fmt.Sprintf("HTTP %d", 500+in.Attempt), workflows.ErrProviderAttemptFailed, nil)
		}},
		outcome: workflows.OutcomeProvidersFailed,
		calls:   []string{"BeginTurn", "CallProvider i0 a0 primary", "BeginTurn", "CallProvider i0 a1 fallback", "FailTurn all_providers_failed", "CleanupSession session_error"},
		check: func(t *testing.T, s *scripted, res workflows.TurnResult) {
			assert.Equal(t, events.ReasonAllProvidersFailed, res.Reason)
			assert.Equal(t, "fallback: HTTP 501", res.LastError)
			assert.Empty(t, res.Provider)
			assert.Equal(t, []map[string]any{{
				workflows.MemoProfileName:     "main",
				workflows.MemoLastError:       "all_providers_failed (fallback: HTTP 501)",
				workflows.MemoLastErrorTurnID: "t1",
			}}, s.memos)
		},
	}, {
		name: "any other activity failure still fails the turn",
		script: &scripted{begin: primary(), provider: final, attemptErr: func(in workflows.CallProviderInput) error {
			return temporal.NewNonRetryableApplicationError("broken", "other", nil)
		}},
		outcome: workflows.OutcomeFailed,
		calls:   []string{"BeginTurn", "CallProvider i0 a0 primary", "FailTurn turn_failed", "CleanupSession session_close"},
	}, {
		name: "fallback after a failed primary",
		script: &scripted{begin: primary(), provider: func(in workflows.CallProviderInput) workflows.CallProviderResult {
			return workflows.CallProviderResult{OK: in.Attempt == 1, Final: in.Attempt == 1}
		}},
		outcome: workflows.OutcomeCompleted,
		calls:   []string{"BeginTurn", "CallProvider i0 a0 primary", "CallProvider i0 a1 fallback", "CleanupSession session_close"},
	}, {
		name: "every provider failed: the session ends",
		script: &scripted{begin: primary(), provider: func(workflows.CallProviderInput) workflows.CallProviderResult {
			return workflows.CallProviderResult{}
		}},
		outcome: workflows.OutcomeProvidersFailed,
		calls:   []string{"BeginTurn", "CallProvider i0 a0 primary", "CallProvider i0 a1 fallback", "FailTurn all_providers_failed", "CleanupSession session_error"},
		check: func(t *testing.T, s *scripted, _ workflows.TurnResult) {
			assert.Equal(t, 2, s.failed[0].Attempts)
		},
	}, {
		name:    "begin rejects the turn",
		script:  &scripted{begin: workflows.BeginTurnResult{Outcome: workflows.OutcomeRejected, Rejection: workflows.RejectInvalidMessage}},
		outcome: workflows.OutcomeRejected,
		calls:   []string{"BeginTurn", "CleanupSession session_close"},
	}, {
		name:    "begin ends the session",
		script:  &scripted{begin: workflows.BeginTurnResult{Outcome: workflows.OutcomeRejected, SessionEnded: true}},
		outcome: workflows.OutcomeRejected,
		calls:   []string{"BeginTurn", "CleanupSession session_error"},
	}, {
		name: "each tool kind to its own activity, then a pause for the client tool",
		script: &scripted{eagerSteps: true, begin: primary(), provider: func(workflows.CallProviderInput) workflows.CallProviderResult {
			return workflows.CallProviderResult{OK: true, ToolCalls: allKinds}
		}},
		outcome: workflows.OutcomePaused,
		calls: []string{"BeginTurn", "CallProvider i0 a0 primary",
			"CallMCPTool i0 m1", "ExecSandbox i0 s1", "RunSubagentTool i0 a1", "FinishIteration i0 calls=4", "CleanupSession session_close"},
		check: func(t *testing.T, s *scripted, _ workflows.TurnResult) {
			// Each step in the memo before it runs, then the pause, then
			// the close; the first attempt is made before the turn knows
			// its walk.
			assert.Equal(t, []string{
				"provider call to the profile's primary provider: iteration 1, attempt 1 · turn t1",
				"MCP tool srv/mcp_tool (m1): iteration 1 · turn t1",
				"sandbox exec run (s1): iteration 1 · turn t1",
				"subagent tool launch_subagent (a1): iteration 1 · turn t1",
				"paused: waiting for client tool results from key key_a until <t> · turn t1",
				"session closed",
			}, stepsWithoutTimes(s.steps))
		},
	}, {
		name: "server tools only: the loop goes on to the next iteration",
		script: &scripted{eagerSteps: true, begin: primary(), provider: func(in workflows.CallProviderInput) workflows.CallProviderResult {
			if in.Iteration == 0 {
				return workflows.CallProviderResult{OK: true, ToolCalls: allKinds[:1]}
			}
			return workflows.CallProviderResult{OK: true, Final: true}
		}},
		outcome: workflows.OutcomeCompleted,
		calls:   []string{"BeginTurn", "CallProvider i0 a0 primary", "CallMCPTool i0 m1", "FinishIteration i0 calls=1", "CallProvider i1 a0 primary", "CleanupSession session_close"},
		check: func(t *testing.T, s *scripted, _ workflows.TurnResult) {
			assert.Equal(t, []string{
				"provider call to the profile's primary provider: iteration 1, attempt 1 · turn t1",
				"MCP tool srv/mcp_tool (m1): iteration 1 · turn t1",
				"provider call to primary (model-p): iteration 2, attempt 1 of 2 · turn t1",
				"idle · last turn t1: completed",
				"session closed",
			}, stepsWithoutTimes(s.steps))
		},
	}, {
		// versionTurnStepLazy: no step outlasts its workflow task here (the
		// test environment runs each in one), so none reaches the memo and
		// the turn's end removes none; only the profile's name and the
		// close are upserted.
		name: "lazy steps: tools and a pause upsert no step",
		script: &scripted{begin: primary(), provider: func(workflows.CallProviderInput) workflows.CallProviderResult {
			return workflows.CallProviderResult{OK: true, ToolCalls: allKinds}
		}},
		outcome: workflows.OutcomePaused,
		check: func(t *testing.T, s *scripted, _ workflows.TurnResult) {
			assert.Equal(t, []string{"session closed"}, stepsWithoutTimes(s.steps))
			assert.Equal(t, []map[string]any{{workflows.MemoProfileName: "main"}}, s.memos)
		},
	}, {
		name: "lazy steps: a completed tool loop upserts no step",
		script: &scripted{begin: primary(), provider: func(in workflows.CallProviderInput) workflows.CallProviderResult {
			if in.Iteration == 0 {
				return workflows.CallProviderResult{OK: true, ToolCalls: allKinds[:1]}
			}
			return workflows.CallProviderResult{OK: true, Final: true}
		}},
		outcome: workflows.OutcomeCompleted,
		check: func(t *testing.T, s *scripted, _ workflows.TurnResult) {
			assert.Equal(t, []string{"session closed"}, stepsWithoutTimes(s.steps))
		},
	}, {
		name: "a subagent launch runs in the background",
		script: &scripted{begin: primary(), provider: func(in workflows.CallProviderInput) workflows.CallProviderResult {
			if in.Iteration == 0 {
				return workflows.CallProviderResult{OK: true, ToolCalls: allKinds[2:3]}
			}
			return workflows.CallProviderResult{OK: true, Final: true}
		}, tool: func(name string, in workflows.ToolCallInput) (workflows.ToolCallResult, error) {
			return workflows.ToolCallResult{Launch: &workflows.SubagentLaunch{SubagentID: "sba_1", TimeoutSecs: 60}}, nil
		}},
		outcome: workflows.OutcomeCompleted,
		check: func(t *testing.T, s *scripted, _ workflows.TurnResult) {
			require.Len(t, s.ran, 1)
			assert.Equal(t, workflows.RunSubagentInput{SessionID: "ses_1", SubagentID: "sba_1"}, s.ran[0])
		},
	}, {
		name: "the iteration cap ends the turn",
		script: &scripted{begin: primary(), provider: func(workflows.CallProviderInput) workflows.CallProviderResult {
			return workflows.CallProviderResult{OK: true, ToolCalls: allKinds[1:2]}
		}},
		outcome: workflows.OutcomeProvidersFailed,
		check: func(t *testing.T, s *scripted, _ workflows.TurnResult) {
			assert.Contains(t, s.calls, fmt.Sprintf("CallProvider i%d a0 primary", workflows.MaxIterations-1))
			assert.NotContains(t, s.calls, fmt.Sprintf("CallProvider i%d a0 primary", workflows.MaxIterations))
			require.Len(t, s.failed, 1)
			assert.Equal(t, events.ReasonLoopLimit, s.failed[0].Reason)
		},
	}, {
		name: "a step failing past its retries fails the turn, not the session",
		script: &scripted{begin: primary(), provider: func(workflows.CallProviderInput) workflows.CallProviderResult {
			return workflows.CallProviderResult{OK: true, ToolCalls: allKinds[1:2]}
		}, tool: func(string, workflows.ToolCallInput) (workflows.ToolCallResult, error) {
			return workflows.ToolCallResult{}, temporal.NewNonRetryableApplicationError("broken", "test", nil)
		}},
		outcome: workflows.OutcomeFailed,
		calls:   []string{"BeginTurn", "CallProvider i0 a0 primary", "ExecSandbox i0 s1", "FailTurn turn_failed", "CleanupSession session_close"},
		check: func(t *testing.T, s *scripted, res workflows.TurnResult) {
			assert.Equal(t, workflows.ActExecSandbox, res.FailedStep)
			assert.Equal(t, workflows.ActExecSandbox, s.failed[0].Step)
		},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := c.script
			res := runOneTurn(t, s)
			for _, in := range s.inputs {
				assert.True(t, in.FailAsError, "a new session asks for failed attempts as activity failures")
			}
			assert.Equal(t, c.outcome, res.Outcome)
			if c.calls != nil {
				assert.Equal(t, c.calls, s.calls)
			}
			if c.check != nil {
				c.check(t, s, res)
			}
		})
	}
}
