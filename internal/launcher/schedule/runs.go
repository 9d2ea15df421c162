package schedule

import (
	"context"
	"fmt"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/bae-go/bae-go/internal/launcher"
)

// RunInfo is one past or running run of a scheduled agent, as `baesched runs`
// lists it.
type RunInfo struct {
	Agent      string
	WorkflowID string
	RunID      string
	Start      time.Time
	Close      time.Time // zero while running
	Status     string    // Temporal's: Running, Completed, Terminated…
	Result     launcher.LaunchResult
}

// ListRuns returns the newest runs of baesched's agents (of agent only, when
// set), newest first, at most limit.
func ListRuns(ctx context.Context, c client.Client, agent string, limit int) ([]RunInfo, error) {
	query := fmt.Sprintf("WorkflowType = '%s'", launcher.WorkflowName)
	var out []RunInfo
	var token []byte
	for len(out) < limit {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, PageSize: 100, NextPageToken: token})
		if err != nil {
			return nil, fmt.Errorf("list runs: %w", err)
		}
		for _, e := range resp.Executions {
			id := e.GetExecution().GetWorkflowId()
			name, ok := agentOf(e)
			if !ok || (agent != "" && name != agent) {
				continue
			}
			ri := RunInfo{
				Agent: name, WorkflowID: id, RunID: e.GetExecution().GetRunId(),
				Start: e.GetStartTime().AsTime(), Status: statusName(e.GetStatus()),
			}
			if e.GetCloseTime() != nil {
				ri.Close = e.GetCloseTime().AsTime()
			}
			if e.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
				if err := c.GetWorkflow(ctx, id, ri.RunID).Get(ctx, &ri.Result); err != nil {
					return nil, fmt.Errorf("result of %s: %w", id, err)
				}
			}
			out = append(out, ri)
			if len(out) == limit {
				break
			}
		}
		token = resp.NextPageToken
		if len(token) == 0 {
			break
		}
	}
	return out, nil
}

// agentOf reads the agent's name from a scheduled run's memo (its workflow
// id carries a fire time after the name, and names may contain dashes).
func agentOf(e *workflowpb.WorkflowExecutionInfo) (string, bool) {
	if !strings.HasPrefix(e.GetExecution().GetWorkflowId(), IDPrefix) {
		return "", false
	}
	p := e.GetMemo().GetFields()[memoAgent]
	if p == nil {
		return "", false
	}
	var name string
	if err := converter.GetDefaultDataConverter().FromPayload(p, &name); err != nil {
		return "", false
	}
	return name, true
}

func statusName(s enumspb.WorkflowExecutionStatus) string {
	return strings.TrimPrefix(s.String(), "WorkflowExecutionStatus")
}
