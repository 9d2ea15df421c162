package console

import (
	"context"
	"net/url"
	"strconv"
	"strings"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/bae-go/bae-go/workflows"
)

// temporalLinks builds Temporal Web UI links. A session is the workflow
// whose id is the session id; a turn is its Enqueue signal naming the turn
// id (or, from servers before the signal, its SendMessage update whose
// update id is the turn id).
type temporalLinks struct {
	base      string // UI base URL without a trailing slash; "" = no links
	namespace string
	client    client.Client // resolves a turn to its history event; may be nil
}

func (t temporalLinks) enabled() bool { return t.base != "" }

func (t temporalLinks) workflowURL(sessionID string) string {
	if !t.enabled() {
		return ""
	}
	return t.base + "/namespaces/" + url.PathEscape(t.namespace) + "/workflows/" + url.PathEscape(sessionID)
}

// maxRunsSearched bounds the walk back through continue-as-new runs (each
// run holds up to 200 turns).
const maxRunsSearched = 20

// turnURL finds the run and history event where the turn was signalled
// (or its update accepted) and links to it; failing that, to the workflow.
func (t temporalLinks) turnURL(ctx context.Context, sessionID, turnID string) string {
	fallback := t.workflowURL(sessionID)
	if t.client == nil {
		return fallback
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	desc, err := t.client.DescribeWorkflowExecution(ctx, sessionID, "")
	if err != nil {
		return fallback
	}
	runID := desc.GetWorkflowExecutionInfo().GetExecution().GetRunId()
	for range maxRunsSearched {
		if runID == "" {
			break
		}
		eventID, previous := t.findTurn(ctx, sessionID, runID, turnID)
		if eventID > 0 {
			return fallback + "/" + url.PathEscape(runID) + "/history/events/" + strconv.FormatInt(eventID, 10)
		}
		runID = previous
	}
	return fallback
}

// findTurn scans one run's history for the turn's signal (or accepted update) with id
// turnID; it also returns the run this one continued from.
func (t temporalLinks) findTurn(ctx context.Context, sessionID, runID, turnID string) (eventID int64, previousRun string) {
	it := t.client.GetWorkflowHistory(ctx, sessionID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return 0, ""
		}
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
			previousRun = ev.GetWorkflowExecutionStartedEventAttributes().GetContinuedExecutionRunId()
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
			a := ev.GetWorkflowExecutionSignaledEventAttributes()
			if a.GetSignalName() == workflows.SignalEnqueue && signalledTurn(a.GetInput()) == turnID {
				return ev.GetEventId(), previousRun
			}
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
			if ev.GetWorkflowExecutionUpdateAcceptedEventAttributes().GetAcceptedRequest().GetMeta().GetUpdateId() == turnID {
				return ev.GetEventId(), previousRun
			}
		}
	}
	return 0, previousRun
}

func trimBase(u string) string { return strings.TrimRight(u, "/") }

// signalledTurn is the turn id an Enqueue signal's input names ("" when it
// cannot be read).
func signalledTurn(in *commonpb.Payloads) string {
	if len(in.GetPayloads()) == 0 {
		return ""
	}
	var msg workflows.SendMessageInput
	if err := converter.GetDefaultDataConverter().FromPayload(in.GetPayloads()[0], &msg); err != nil {
		return ""
	}
	return msg.TurnID
}
